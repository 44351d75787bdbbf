package boltstore

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/storekit"
)

func sampleRecord() agenttool.Record {
	now := time.Unix(0, 1_780_000_000_123_456_789)
	return agenttool.Record{
		Key: "send_email/abc", Tool: "send_email", State: agenttool.Unknown,
		Principal: agenttool.Digest{1, 2, 3}, Session: agenttool.Digest{5, 5}, Fingerprint: agenttool.Digest{31: 9},
		Owner: "", Token: 42, Attempts: 2,
		Outcome: []byte(`{"version":1,"status":"unknown_outcome"}`),
		Created: now, Updated: now.Add(time.Second), RetryApproved: true,
		Resolution: &agenttool.Resolution{Verdict: "not applied", By: "operator:ana", Why: "checked the outbox", At: now.Add(time.Minute)},
		Label:      "Ana Ruiz · ticket 4411",
	}
}

func sameRecord(t *testing.T, got, want agenttool.Record) {
	t.Helper()
	g, w := appendRecord(nil, &got), appendRecord(nil, &want)
	if !bytes.Equal(g, w) || got.Key != want.Key {
		t.Fatalf("record\n%+v\nwant\n%+v", got, want)
	}
	for _, p := range [][2]time.Time{{got.Created, want.Created}, {got.Updated, want.Updated}, {got.Expires, want.Expires}, {got.LeaseExpiry, want.LeaseExpiry}} {
		if !p[0].Equal(p[1]) {
			t.Fatalf("time %v, want %v", p[0], p[1])
		}
	}
}

// markedRecord is a record marked as standing in for an action proved
// applied (format 5), which keeps its input if input.
func markedRecord(input bool) agenttool.Record {
	r := sampleRecord()
	r.Replaces, r.NoticeUntil, r.StandsFor = "send_email/x", time.Unix(1<<33, 0), "send_email/a"
	if input {
		r.Input = []byte(`{"to":"ana@example.com"}`)
	}
	return r
}

func TestRecordRoundTrip(t *testing.T) {
	withInput := sampleRecord()
	withInput.Input = []byte{}
	for _, r := range []agenttool.Record{
		sampleRecord(), withInput, markedRecord(false), markedRecord(true),
		{Key: "k", Tool: "t", State: agenttool.Pending, Owner: "0123abcd-7", Token: 1, LeaseExpiry: time.Unix(5, 0), Created: time.Unix(4, 0), Updated: time.Unix(4, 0)},
	} {
		v := encode(&r)
		if len(v) > recordSize(&r) {
			t.Errorf("encoding of %d bytes, bound %d", len(v), recordSize(&r))
		}
		got, err := decode([]byte(r.Key), v)
		if err != nil {
			t.Fatal(err)
		}
		sameRecord(t, got, r)
		if got.StandsFor != r.StandsFor || (got.Input == nil) != (r.Input == nil) {
			t.Errorf("read back standing for %q with input %q; want %q and %q", got.StandsFor, got.Input, r.StandsFor, r.Input)
		}
	}
}

// A record written by an earlier version, in format 1 (JSON), reads the same,
// and is rewritten in format 2 when it next changes.
func TestFormatOneRecordsAreRead(t *testing.T) {
	const v1 = `{"v":1,"tool":"send_email","state":1,"principal":"0102030000000000000000000000000000000000000000000000000000000000",` +
		`"fingerprint":"0000000000000000000000000000000000000000000000000000000000000009","owner":"o-1","token":7,` +
		`"lease_expiry":1780000060000000000,"attempts":1,"created":1780000000000000000,"updated":1780000000000000000}`
	path := filepath.Join(t.TempDir(), "keys.db")
	s, err := Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.DB().Update(func(tx *bolt.Tx) error {
		return tx.Bucket(recordsBucket).Put([]byte("send_email/old"), []byte(v1))
	}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	rec, err := s.Get(ctx, "send_email/old")
	if err != nil {
		t.Fatal(err)
	}
	if rec.State != agenttool.Pending || rec.Owner != "o-1" || rec.Token != 7 || rec.Principal != (agenttool.Digest{1, 2, 3}) ||
		rec.Fingerprint != (agenttool.Digest{31: 9}) || !rec.LeaseExpiry.Equal(time.Unix(1_780_000_060, 0)) {
		t.Fatalf("format-1 record read as %+v", rec)
	}
	err = s.Finish(ctx, storekit.FinishRequest{Key: "send_email/old", Token: 7, State: agenttool.Succeeded, Attempts: 1,
		Outcome: []byte(`{}`), Now: time.Unix(1_780_000_001, 0), TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	s.DB().View(func(tx *bolt.Tx) error {
		if _, v := find(tx.Bucket(recordsBucket), []byte("send_email/old")); len(v) == 0 || v[0] != formatBinary {
			t.Errorf("after Finish the record is %q, want format 3", v)
		}
		return nil
	})
	if rec, err = s.Get(ctx, "send_email/old"); err != nil || rec.State != agenttool.Succeeded || string(rec.Outcome) != `{}` {
		t.Errorf("after Finish: %+v, %v", rec, err)
	}
	s.Close()
}

// A record in format 2, written by the versions before definitions, is
// read as it was, with no definition; it is written in format 3, with
// its definition, when it next changes.
func TestFormat2RecordsAreRead(t *testing.T) {
	r := sampleRecord()
	r.Definition = 0
	v := encode(&r)
	if v[len(v)-1] != 0 {
		t.Fatalf("format 3 ends with the definition: %x", v[len(v)-1])
	}
	v2 := append([]byte{formatBinary2}, v[1:len(v)-1]...)
	got, err := decode([]byte(r.Key), v2)
	if err != nil {
		t.Fatal(err)
	}
	if again := encode(&got); !bytes.Equal(again, v) {
		t.Errorf("a format-2 record read and written again: %x; want %x", again, v)
	}
	r.Definition = 0xfeed
	back, err := decode([]byte(r.Key), encode(&r))
	if err != nil || back.Definition != 0xfeed {
		t.Errorf("a format-3 record's definition: %x, %v", back.Definition, err)
	}
}

func TestCorruptBinaryRecords(t *testing.T) {
	r, m := sampleRecord(), markedRecord(true)
	good, marked := encode(&r), encode(&m)
	flags := len(marked) - (1 + len(m.StandsFor)) - (1 + len(m.Input)) - 1 // the more flags' offset
	if marked[0] != formatMore || marked[flags] != moreInput|moreStandsFor {
		t.Fatalf("a marked record with an input encoded as format %d, more flags %d", marked[0], marked[flags])
	}
	cases := map[string][]byte{
		"unknown more flags": append(append(bytes.Clone(marked[:flags]), 4|moreInput|moreStandsFor), marked[flags+1:]...),
		"empty":              {},
		"unknown format":     append([]byte{9}, good[1:]...),
		"bad state":          append([]byte{formatBinary, 0}, good[2:]...),
		"unknown flags":      append([]byte{formatBinary, good[1], 0x80}, good[3:]...),
		"truncated":          good[:len(good)-3],
		"trailing bytes":     append(bytes.Clone(good), 0),
		"huge length":        append(bytes.Clone(good[:3+64+2]), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f),
	}
	for name, v := range cases {
		if _, err := decode([]byte("k"), v); !errors.Is(err, agenttool.ErrCorrupt) {
			t.Errorf("%s: decode = %v, want ErrCorrupt", name, err)
		}
	}
}

// FuzzDecode: no input makes decode panic, and a binary record that decodes
// encodes back to the same bytes.
func FuzzDecode(f *testing.F) {
	r := sampleRecord()
	f.Add(encode(&r))
	p := agenttool.Record{Tool: "t", State: agenttool.Pending, Owner: "o", Token: 3}
	f.Add(encode(&p))
	for _, input := range []bool{false, true} {
		m := markedRecord(input)
		f.Add(encode(&m))
	}
	f.Add([]byte(`{"v":1,"tool":"t","state":2,"token":1,"principal":"0102030000000000000000000000000000000000000000000000000000000000"}`))
	f.Fuzz(func(t *testing.T, v []byte) {
		rec, err := decode([]byte("k"), v)
		if err != nil || v[0] < formatBinary {
			return
		}
		if again := encode(&rec); !bytes.Equal(again, v) {
			// Varints have one shortest form; longer ones decode too but are
			// never written. Equal records are what must hold.
			back, err := decode([]byte("k"), again)
			if err != nil {
				t.Fatalf("re-encoding of a decoded record does not decode: %v", err)
			}
			sameRecord(t, back, rec)
		}
	})
}

// FuzzRecordRoundTrip: every record encodes and decodes to itself.
func FuzzRecordRoundTrip(f *testing.F) {
	f.Add("send_email", "owner-1", []byte(`{"a":1}`), uint64(5), 3, int64(1_780_000_000_000_000_000), int64(0), true, "applied", "op", "why")
	f.Fuzz(func(t *testing.T, tool, owner string, outcome []byte, token uint64, attempts int, created, lease int64, approved bool, verdict, by, why string) {
		if attempts < 0 || attempts > 1<<30 {
			return
		}
		r := agenttool.Record{Key: "k", Tool: tool, State: agenttool.Failed, Owner: owner, Outcome: outcome, Token: token,
			Attempts: attempts, Created: fromNanos(created), LeaseExpiry: fromNanos(lease), RetryApproved: approved}
		if len(r.Outcome) == 0 {
			r.Outcome = nil
		}
		if verdict != "" {
			r.Resolution = &agenttool.Resolution{Verdict: verdict, By: by, Why: why, At: fromNanos(created)}
		}
		if approved {
			r.Session = agenttool.Digest{byte(token), 7}
		}
		got, err := decode([]byte("k"), encode(&r))
		if err != nil {
			t.Fatal(err)
		}
		sameRecord(t, got, r)
	})
}

// A file of schema 1 (before the scope index) is upgraded at Open: its open
// records are indexed, so that the unknown fence finds them.
func TestSchemaOneFileIsUpgraded(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys.db")
	s, err := Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	old := sampleRecord()
	old.State, old.RetryApproved, old.Session = agenttool.Unknown, false, agenttool.Digest{}
	if err := s.DB().Update(func(tx *bolt.Tx) error {
		// As version 1 wrote it: no scope bucket, no session digest.
		if err := tx.DeleteBucket(scopeBucket); err != nil {
			return err
		}
		if err := tx.Bucket(metaBucket).Put(schemaKey, []byte("1")); err != nil {
			return err
		}
		if err := tx.Bucket(recordsBucket).Put([]byte(old.Key), encode(&old)); err != nil {
			return err
		}
		return tx.Bucket(openBucket).Put([]byte(old.Key), nil)
	}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if s, err = Open(path, nil); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	recs, err := s.ListUnknown(context.Background(), storekit.ListRequest{Tool: old.Tool, Principal: &old.Principal, Now: time.Now(), Limit: 10})
	if err != nil || len(recs) != 1 || recs[0].Key != old.Key {
		t.Fatalf("after the upgrade the scope lists %+v, %v; want %s", recs, err, old.Key)
	}
	s.DB().View(func(tx *bolt.Tx) error {
		if v := tx.Bucket(metaBucket).Get(schemaKey); string(v) != schemaVersion {
			t.Errorf("schema %q after the upgrade", v)
		}
		return nil
	})
}

// A settled outcome is kept for its whole lifetime, however long: a key
// lifetime that ends past the range of Unix nanoseconds (after 2262) must
// not read back as an expiry in the past, which would let the next claim
// of the key run the action again (I1).
func TestSettledRecordKeepsAFarLifetime(t *testing.T) {
	ctx := context.Background()
	s, err := Open(filepath.Join(t.TempDir(), "keys.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	now := time.Unix(1_780_000_000, 0)
	const ttl = 250 * 365 * 24 * time.Hour // accepted by agenttool.New: KeyTTL has no upper bound
	res, err := s.Claim(ctx, storekit.ClaimRequest{Key: "send_email/far", Tool: "send_email", Owner: "o", Now: now, Lease: time.Minute})
	if err != nil || !res.Claimed {
		t.Fatalf("claim: %+v %v", res, err)
	}
	if err := s.Finish(ctx, storekit.FinishRequest{Key: "send_email/far", Token: res.Record.Token, State: agenttool.Succeeded,
		Attempts: 1, Outcome: []byte(`{}`), Now: now, TTL: ttl}); err != nil {
		t.Fatal(err)
	}
	if rec, err := s.Get(ctx, "send_email/far"); err != nil || !rec.Expires.After(now) {
		t.Errorf("the record, settled to live %v from %v, reads back expiring at %v (%v)", ttl, now, rec.Expires, err)
	}
	again, err := s.Claim(ctx, storekit.ClaimRequest{Key: "send_email/far", Tool: "send_email", Owner: "o2", Now: now.Add(time.Hour), Lease: time.Minute})
	if err != nil || again.Claimed {
		t.Errorf("the same action an hour later: claimed %v (%v); want its outcome replayed, not a second attempt", again.Claimed, err)
	}
}

// A file of schema 8 indexed the records beside their session's slot by
// tool and session alone, which a claim fenced by principal cannot seek:
// it is upgraded at Open by building the index again, by principal too,
// from the pending records and the others, so that both fences find what
// an earlier version left running or unknown beside them.
func TestSchemaEightFileIsUpgradedToFindRecordsBesideBothFences(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "keys.db")
	s, err := Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_780_000_000, 0)
	principal := agenttool.Digest{7}
	off := func(key string, session agenttool.Digest) storekit.ClaimRequest {
		return storekit.ClaimRequest{Key: key, Tool: "send_email", Principal: principal, Session: session, Fingerprint: agenttool.Digest{1},
			Owner: "o", Now: now, Lease: time.Minute} // FenceOff: no fence scope
	}
	running := off("send_email/running", agenttool.Digest{1})
	if res, err := s.Claim(ctx, running); err != nil || !res.Claimed {
		t.Fatalf("claim: %+v, %v", res, err)
	}
	unknown := off("send_email/unknown", agenttool.Digest{2})
	res, err := s.Claim(ctx, unknown)
	if err != nil || !res.Claimed {
		t.Fatalf("claim: %+v, %v", res, err)
	}
	if err := s.Finish(ctx, storekit.FinishRequest{Key: unknown.Key, Token: res.Record.Token, State: agenttool.Unknown, Attempts: 1, Now: now}); err != nil {
		t.Fatal(err)
	}
	if err := s.DB().Update(func(tx *bolt.Tx) error {
		// As version 8 left it: its own index, by tool and session.
		if err := tx.DeleteBucket(besideBucket); err != nil {
			return err
		}
		old, err := tx.CreateBucket(oldBesideBucket)
		if err != nil {
			return err
		}
		if err := old.Put(append(append([]byte("send_email\x00"), running.Session[:]...), running.Key...), []byte{}); err != nil {
			return err
		}
		return tx.Bucket(metaBucket).Put(schemaKey, []byte("8"))
	}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if s, err = Open(path, nil); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.DB().View(func(tx *bolt.Tx) error {
		if v := tx.Bucket(metaBucket).Get(schemaKey); string(v) != schemaVersion || tx.Bucket(oldBesideBucket) != nil {
			t.Errorf("after the upgrade: schema %q, schema 8's index still there: %v", v, tx.Bucket(oldBesideBucket) != nil)
		}
		return nil
	})
	for _, c := range []struct {
		what    string
		session agenttool.Digest
		scope   agenttool.Digest
		want    string
	}{
		{"a write of the running action's session, fenced by session", running.Session, running.Session, running.Key},
		{"a write of the unknown action's session, fenced by session", unknown.Session, unknown.Session, unknown.Key},
		{"a write of a third session, fenced by principal", agenttool.Digest{3}, principal, running.Key},
	} {
		req := off("send_email/new-"+c.what, c.session)
		req.FenceScope, req.Now = c.scope, now.Add(time.Second)
		res, err := s.Claim(ctx, req)
		if err != nil || res.Claimed || res.Blocked == nil || res.Blocked.Key != c.want {
			t.Errorf("%s after the upgrade: %+v, %v; want held back by %s", c.what, res, err, c.want)
		}
	}
}
