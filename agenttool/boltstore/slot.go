package boltstore

import (
	"bytes"

	bolt "go.etcd.io/bbolt"

	"github.com/retrysafe/retrysafe/agenttool/storekit"
)

// slotsBucket indexes the record that holds each slot of the unknown fence
// (storekit.Record.HoldsSlot), by its tool and fence scope:
//
//	tool 0x00 fence-scope → the key of the record that holds the slot
//
// A claim finds its slot's occupant with one lookup in each of two
// buckets: slots held by pending records are in pendingSlotsBucket, the
// others (unknown outcomes, notices) here. Every call takes a slot and
// gives it back, so the bucket it writes stays as small as the calls in
// flight, whatever number of slots notices hold for a while (the soak
// benchmark's `-boltstats` shows both).
var (
	slotsBucket        = []byte("retrysafe/slots")
	pendingSlotsBucket = []byte("retrysafe/slots/pending")
)

// slotEntries returns the keys slot k's entries name, the pending
// records' bucket first, each once. A slot has one entry, but both buckets
// are read, so that an entry in one (stale, in a file some other writer
// left inconsistent) can never hide a holder indexed in the other: the
// fence then fails closed, as DecideClaim keeps only the records that hold
// the slot.
func slotEntries(tx *bolt.Tx, k []byte) [][]byte {
	var out [][]byte
	for _, name := range [][]byte{pendingSlotsBucket, slotsBucket} {
		if bk := tx.Bucket(name); bk != nil {
			if v := bk.Get(k); v != nil && (len(out) == 0 || !bytes.Equal(out[0], v)) {
				out = append(out, v)
			}
		}
	}
	return out
}

// slotHolder returns the key of the record that holds slot k, or nil: the
// first entry whose record holds it, or cannot be read (failing closed).
func slotHolder(b *bolt.Bucket, k []byte) []byte {
	for _, key := range slotEntries(b.Tx(), k) {
		r, err := load(b, string(key))
		if err != nil || (r != nil && r.HoldsSlot() && bytes.Equal(slotKey(r.Slot()), k)) {
			return key
		}
	}
	return nil
}

// slotsFor returns the bucket of the slots that records in r's state hold.
func slotsFor(tx *bolt.Tx, r *storekit.Record) *bolt.Bucket {
	if r.State == storekit.Pending {
		return tx.Bucket(pendingSlotsBucket)
	}
	return tx.Bucket(slotsBucket)
}

func slotKey(sl storekit.Slot) []byte {
	k := make([]byte, 0, len(sl.Tool)+1+len(sl.Scope))
	return append(append(append(k, sl.Tool...), 0), sl.Scope[:]...)
}

// reslot moves the slot index from prev (nil: a new record) to r (nil: a
// deleted one).
func reslot(tx *bolt.Tx, r, prev *storekit.Record) error {
	if prev != nil && prev.HoldsSlot() && (r == nil || !r.HoldsSlot() || r.Slot() != prev.Slot() || (r.State == storekit.Pending) != (prev.State == storekit.Pending)) {
		k := slotKey(prev.Slot())
		// Where prev's entry is: a file of an earlier layout has its
		// pending records' slots in the slots bucket too.
		for _, slots := range []*bolt.Bucket{tx.Bucket(pendingSlotsBucket), tx.Bucket(slotsBucket)} {
			if bytes.Equal(slots.Get(k), []byte(prev.Key)) {
				if err := slots.Delete(k); err != nil {
					return err
				}
			}
		}
	}
	if r != nil && r.HoldsSlot() {
		return slotsFor(tx, r).Put(slotKey(r.Slot()), []byte(r.Key))
	}
	return nil
}

// besideBucket indexes the open records beside their session's slot
// (storekit.Record.Beside: claimed under FenceOff, a principal's fence, a
// version before slots, or settled aside from their scope), by tool,
// principal and session:
//
//	tool 0x00 principal session key → empty
//
// A claim fenced by session finds them with one seek, and so does a claim
// fenced by principal; records of the default, per-session fence never
// enter it. (Schema 8 and earlier indexed them by tool and session alone,
// in the bucket "retrysafe/beside", which an upgrade drops.)
var besideBucket = []byte("retrysafe/beside-by-principal")

// oldBesideBucket is the beside index of schema 8 and earlier.
var oldBesideBucket = []byte("retrysafe/beside")

// besidePrefix is the prefix of the entries of tool and principal; a
// claim fenced by session adds its session to it.
func besidePrefix(tool string, principal storekit.Digest) []byte {
	k := make([]byte, 0, len(tool)+1+2*len(principal)+64)
	return append(append(append(k, tool...), 0), principal[:]...)
}

// besideKey is the entry of r in the beside index.
func besideKey(r *storekit.Record) []byte {
	return append(append(besidePrefix(r.Tool, r.Principal), r.Session[:]...), r.Key...)
}

// rebeside moves the beside index from prev (nil: a new record) to r (nil:
// a deleted one).
func rebeside(tx *bolt.Tx, r, prev *storekit.Record) error {
	was, is := prev != nil && prev.Beside(), r != nil && r.Beside()
	if !was && !is {
		return nil
	}
	beside := tx.Bucket(besideBucket)
	if was && (!is || r.Tool != prev.Tool || r.Principal != prev.Principal || r.Session != prev.Session) {
		if err := beside.Delete(besideKey(prev)); err != nil {
			return err
		}
	}
	if is {
		return beside.Put(besideKey(r), []byte{})
	}
	return nil
}

// rebuildBeside fills the beside index from every record that may be
// beside its slot: those of the records and the pending buckets (a
// generation holds none).
func rebuildBeside(tx *bolt.Tx) error {
	for _, name := range [][]byte{recordsBucket, pendingBucket} {
		err := tx.Bucket(name).ForEach(func(k, v []byte) error {
			rec, err := decode(k, v)
			if err != nil {
				return nil // unreadable records stay as they are, failing closed when used
			}
			return rebeside(tx, &rec, nil)
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// occupants returns what holds req's claim back, for storekit.DecideClaim:
// the records of other keys its slot's entries name (DecideClaim keeps
// those that hold it), and, for a claim fenced by session or by
// principal, the records beside that slot (storekit.ClaimRequest.Beside)
// — of its tool and session, or of its tool and principal — in key order
// (of session, then key, for a principal's).
func occupants(b *bolt.Bucket, req *storekit.ClaimRequest) ([]storekit.Record, error) {
	if req.FenceScope == (storekit.Digest{}) {
		return nil, nil
	}
	var out []storekit.Record
	seen := map[string]bool{req.Key: true}
	add := func(key string) error {
		if seen[key] {
			return nil // the slot's entries and the records beside it may name one record twice
		}
		seen[key] = true
		r, err := load(b, key)
		if r != nil {
			out = append(out, *r)
		}
		return err
	}
	for _, k := range slotEntries(b.Tx(), slotKey(req.Slot())) {
		if err := add(string(k)); err != nil {
			return nil, err
		}
	}
	if !req.GathersBeside() {
		return out, nil
	}
	prefix := besidePrefix(req.Tool, req.Principal)
	if req.FencedBySession() {
		prefix = append(prefix, req.Session[:]...)
	}
	keyAt := len(besidePrefix(req.Tool, req.Principal)) + len(req.Session)
	c := b.Tx().Bucket(besideBucket).Cursor()
	for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
		key := string(k[keyAt:])
		if seen[key] {
			continue
		}
		seen[key] = true
		r, err := load(b, key)
		if err != nil {
			return nil, err
		}
		if r != nil && req.Beside(r) {
			out = append(out, *r)
		}
	}
	return out, nil
}

// assignLegacySlots gives slots to the open records of a store written
// before slots existed (schema 5 and older), whose records have no fence
// scope: the most recent open record of each tool and session takes its
// session's slot, as a tool with the default, per-session fence would
// have it. Other open records of the session are still listed for
// reconciliation, but hold no slot.
func assignLegacySlots(tx *bolt.Tx) error {
	b := tx.Bucket(recordsBucket)
	newest := map[storekit.Slot]*storekit.Record{}
	err := tx.Bucket(openBucket).ForEach(func(k, _ []byte) error {
		rec, err := load(b, string(k))
		if err != nil || rec == nil || rec.FenceScope != (storekit.Digest{}) || rec.Session == (storekit.Digest{}) {
			return nil // unreadable records stay as they are, failing closed when used
		}
		sl := storekit.Slot{Tool: rec.Tool, Scope: rec.Session}
		if cur := newest[sl]; cur == nil || rec.Updated.After(cur.Updated) {
			newest[sl] = rec
		}
		return nil
	})
	if err != nil {
		return err
	}
	for sl, rec := range newest {
		if slotHolder(b, slotKey(sl)) != nil {
			continue
		}
		prev := *rec
		rec.FenceScope = sl.Scope
		if err := save(b, rec, &prev); err != nil {
			return err
		}
	}
	return nil
}
