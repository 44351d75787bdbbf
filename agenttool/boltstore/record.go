package boltstore

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/retrysafe/retrysafe/agenttool/storekit"
)

// Records are written in a binary format, format 3:
//
//	byte     3 (the format)
//	byte     state
//	byte     flags: 1 retry approved, 2 has a resolution, 4 has a session digest, 8 taken over, 16 has a label,
//	         32 has a fence scope, 64 has a replacement, 128 has a notice
//	[32]byte principal digest
//	[32]byte fingerprint
//	[32]byte session digest, if flag 4
//	[32]byte fence scope, if flag 32
//	uvarint  token
//	uvarint  attempts
//	varint   lease expiry, created, updated, expires (Unix nanoseconds; 0 is the zero time)
//	bytes    tool, owner, outcome (each a uvarint length, then the bytes)
//	if a resolution: bytes verdict, by, why; varint at
//	if a label: bytes label
//	if a replacement: bytes replaces, replaced by
//	if a notice: varint notice until
//	uvarint  definition (0: none)
//
// Format 4 is format 3 with one more field at its end, bytes input (the
// action's input as the tool's codec encoded it, Record.Input): written
// for a record that keeps one and names no action it stands in for.
// Format 5 is format 3 followed by
//
//	byte     more flags: 1 has an input, 2 stands in for an action
//	bytes    input, if more flag 1
//	bytes    stands for (Record.StandsFor), if more flag 2
//
// written for a marked record that names the action it stands in for.
// Format 3 is written for every other record. Format 2 is format 3
// without the definition; format 1, JSON, was written by earlier
// versions. All are still read, and a record is rewritten in format 3, 4
// or 5 when it next changes. A record in none of these formats, or with
// bytes left over, is corrupt: it fails closed.
const (
	formatJSON    = 1
	formatBinary2 = 2
	formatBinary  = 3
	formatInput   = 4
	formatMore    = 5
)

// The more flags of format 5.
const (
	moreInput     = 1
	moreStandsFor = 2
)

const (
	flagApproved   = 1
	flagResolution = 2
	flagSession    = 4
	flagTakenOver  = 8
	flagLabel      = 16
	flagFenceScope = 32
	flagReplaced   = 64
	flagNotice     = 128
)

// maxField bounds a stored string or outcome, so that a corrupt length
// cannot ask for an absurd allocation.
const maxField = 1 << 30

// appendRecord appends r's format-2 encoding to b.
func appendRecord(b []byte, r *storekit.Record) []byte {
	var flags byte
	if r.RetryApproved {
		flags |= flagApproved
	}
	if r.Resolution != nil {
		flags |= flagResolution
	}
	if r.Session != (storekit.Digest{}) {
		flags |= flagSession
	}
	if r.TakenOver {
		flags |= flagTakenOver
	}
	if r.Label != "" {
		flags |= flagLabel
	}
	if r.FenceScope != (storekit.Digest{}) {
		flags |= flagFenceScope
	}
	if r.Replaces != "" || r.ReplacedBy != "" {
		flags |= flagReplaced
	}
	if !r.NoticeUntil.IsZero() {
		flags |= flagNotice
	}
	format := byte(formatBinary)
	switch {
	case r.StandsFor != "":
		format = formatMore
	case r.Input != nil:
		format = formatInput
	}
	b = append(b, format, byte(r.State), flags)
	b = append(b, r.Principal[:]...)
	b = append(b, r.Fingerprint[:]...)
	if flags&flagSession != 0 {
		b = append(b, r.Session[:]...)
	}
	if flags&flagFenceScope != 0 {
		b = append(b, r.FenceScope[:]...)
	}
	b = binary.AppendUvarint(b, r.Token)
	b = binary.AppendUvarint(b, uint64(r.Attempts))
	b = binary.AppendVarint(b, nanos(r.LeaseExpiry))
	b = binary.AppendVarint(b, nanos(r.Created))
	b = binary.AppendVarint(b, nanos(r.Updated))
	b = binary.AppendVarint(b, nanos(r.Expires))
	b = appendField(b, r.Tool)
	b = appendField(b, r.Owner)
	b = appendField(b, r.Outcome)
	if res := r.Resolution; res != nil {
		b = appendField(b, res.Verdict)
		b = appendField(b, res.By)
		b = appendField(b, res.Why)
		b = binary.AppendVarint(b, nanos(res.At))
	}
	if r.Label != "" {
		b = appendField(b, r.Label)
	}
	if flags&flagReplaced != 0 {
		b = appendField(b, r.Replaces)
		b = appendField(b, r.ReplacedBy)
	}
	if flags&flagNotice != 0 {
		b = binary.AppendVarint(b, nanos(r.NoticeUntil))
	}
	b = binary.AppendUvarint(b, r.Definition)
	switch format {
	case formatInput:
		b = appendField(b, r.Input)
	case formatMore:
		more := byte(moreStandsFor)
		if r.Input != nil {
			more |= moreInput
		}
		b = append(b, more)
		if r.Input != nil {
			b = appendField(b, r.Input)
		}
		b = appendField(b, r.StandsFor)
	}
	return b
}

func appendField[T string | []byte](b []byte, s T) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

// recordSize is an upper bound on the length of r's encoding.
func recordSize(r *storekit.Record) int {
	// Header and digests; token, attempts, definition, five times and eight lengths.
	n := 3 + 128 + 16*binary.MaxVarintLen64 + len(r.Tool) + len(r.Owner) + len(r.Outcome) + len(r.Label) + len(r.Replaces) + len(r.ReplacedBy) + len(r.Input) + 1 + len(r.StandsFor)
	if res := r.Resolution; res != nil {
		n += 4*binary.MaxVarintLen64 + len(res.Verdict) + len(res.By) + len(res.Why)
	}
	return n
}

func encode(r *storekit.Record) []byte {
	return appendRecord(make([]byte, 0, recordSize(r)), r)
}

// decode reads a record of either format. The record's key is key.
func decode(key, v []byte) (storekit.Record, error) {
	var (
		rec storekit.Record
		err error
	)
	switch {
	case len(v) > 0 && (v[0] == formatBinary || v[0] == formatBinary2 || v[0] == formatInput || v[0] == formatMore):
		rec, err = decodeBinary(v)
	case len(v) > 0 && v[0] == '{':
		rec, err = decodeJSON(v)
	default:
		err = errors.New("unknown record format")
	}
	if err == nil && !rec.State.Valid() {
		err = fmt.Errorf("state %d", rec.State)
	}
	if err != nil {
		return storekit.Record{}, fmt.Errorf("boltstore: record %s: %w: %w", key, storekit.ErrCorrupt, err)
	}
	rec.Key = string(key)
	return rec, nil
}

// reader reads a format-2 record; the first error sticks.
type reader struct {
	b   []byte
	err error
}

func (r *reader) fail(what string) {
	if r.err == nil {
		r.err = fmt.Errorf("truncated or invalid %s", what)
	}
}

func (r *reader) bytes(n int, what string) []byte {
	if r.err != nil || n > len(r.b) {
		r.fail(what)
		return nil
	}
	out := r.b[:n]
	r.b = r.b[n:]
	return out
}

func (r *reader) uvarint(what string) uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail(what)
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) time(what string) time.Time {
	if r.err != nil {
		return time.Time{}
	}
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.fail(what)
		return time.Time{}
	}
	r.b = r.b[n:]
	return fromNanos(v)
}

func (r *reader) field(what string) []byte {
	n := r.uvarint(what)
	if n > maxField {
		r.fail(what)
		return nil
	}
	return r.bytes(int(n), what)
}

func decodeBinary(v []byte) (storekit.Record, error) {
	r := reader{b: v}
	head := r.bytes(3, "header")
	if r.err != nil {
		return storekit.Record{}, r.err
	}
	var rec storekit.Record
	rec.State = storekit.State(head[1])
	flags := head[2]

	rec.RetryApproved = flags&flagApproved != 0
	rec.TakenOver = flags&flagTakenOver != 0
	copy(rec.Principal[:], r.bytes(32, "principal"))
	copy(rec.Fingerprint[:], r.bytes(32, "fingerprint"))
	if flags&flagSession != 0 {
		copy(rec.Session[:], r.bytes(32, "session"))
	}
	if flags&flagFenceScope != 0 {
		copy(rec.FenceScope[:], r.bytes(32, "fence scope"))
	}
	rec.Token = r.uvarint("token")
	attempts := r.uvarint("attempts")
	if attempts > math.MaxInt32 {
		r.fail("attempts")
	}
	rec.Attempts = int(attempts)
	rec.LeaseExpiry = r.time("lease expiry")
	rec.Created = r.time("created")
	rec.Updated = r.time("updated")
	rec.Expires = r.time("expires")
	rec.Tool = string(r.field("tool"))
	rec.Owner = string(r.field("owner"))
	if out := r.field("outcome"); len(out) > 0 {
		rec.Outcome = append([]byte(nil), out...) // v belongs to the transaction
	}
	if flags&flagResolution != 0 {
		res := &storekit.Resolution{}
		res.Verdict = string(r.field("verdict"))
		res.By = string(r.field("by"))
		res.Why = string(r.field("why"))
		res.At = r.time("resolution time")
		rec.Resolution = res
	}
	if flags&flagLabel != 0 {
		rec.Label = string(r.field("label"))
	}
	if flags&flagReplaced != 0 {
		rec.Replaces = string(r.field("replaces"))
		rec.ReplacedBy = string(r.field("replaced by"))
	}
	if flags&flagNotice != 0 {
		rec.NoticeUntil = r.time("notice")
	}
	if head[0] != formatBinary2 {
		rec.Definition = r.uvarint("definition")
	}
	more := byte(0)
	switch head[0] {
	case formatInput:
		more = moreInput
	case formatMore:
		if m := r.bytes(1, "more flags"); m != nil {
			more = m[0]
		}
		if more&^(moreInput|moreStandsFor) != 0 {
			r.fail("more flags")
		}
	}
	if more&moreInput != 0 {
		rec.Input = append([]byte{}, r.field("input")...) // v belongs to the transaction
	}
	if more&moreStandsFor != 0 {
		rec.StandsFor = string(r.field("stands for"))
	}
	if r.err == nil && len(r.b) > 0 {
		r.err = fmt.Errorf("%d bytes after the record", len(r.b))
	}
	return rec, r.err
}

// diskRecord is a record in format 1: JSON.
type diskRecord struct {
	V           int             `json:"v"`
	Tool        string          `json:"tool"`
	State       storekit.State  `json:"state"`
	Principal   storekit.Digest `json:"principal"`
	Fingerprint storekit.Digest `json:"fingerprint"`
	Owner       string          `json:"owner,omitempty"`
	Token       uint64          `json:"token"`
	LeaseExpiry int64           `json:"lease_expiry,omitempty"`
	Attempts    int             `json:"attempts"`
	Outcome     []byte          `json:"outcome,omitempty"`
	Created     int64           `json:"created"`
	Updated     int64           `json:"updated"`
	Expires     int64           `json:"expires,omitempty"`
	Approved    bool            `json:"retry_approved,omitempty"`
	Resolution  *diskResolution `json:"resolution,omitempty"`
}

type diskResolution struct {
	Verdict string `json:"verdict"`
	By      string `json:"by"`
	Why     string `json:"why,omitempty"`
	At      int64  `json:"at"`
}

func decodeJSON(v []byte) (storekit.Record, error) {
	var d diskRecord
	if err := json.Unmarshal(v, &d); err != nil {
		return storekit.Record{}, err
	}
	if d.V != formatJSON {
		return storekit.Record{}, fmt.Errorf("format %d", d.V)
	}
	rec := storekit.Record{
		Tool: d.Tool, State: d.State, Principal: d.Principal, Fingerprint: d.Fingerprint,
		Owner: d.Owner, Token: d.Token, LeaseExpiry: fromNanos(d.LeaseExpiry), Attempts: d.Attempts,
		Outcome: d.Outcome, Created: fromNanos(d.Created), Updated: fromNanos(d.Updated), Expires: fromNanos(d.Expires),
		RetryApproved: d.Approved,
	}
	if res := d.Resolution; res != nil {
		rec.Resolution = &storekit.Resolution{Verdict: res.Verdict, By: res.By, Why: res.Why, At: fromNanos(res.At)}
	}
	return rec, nil
}

// nanos is t in Unix nanoseconds, 0 for the zero time. A time past the
// range of int64 nanoseconds (after 2262, or before 1678) is stored as the
// range's end: a lifetime that long reads back as ending in 2262, never
// wrapped into the past.
func nanos(t time.Time) int64 {
	switch {
	case t.IsZero():
		return 0
	case t.After(maxNanos):
		return maxNanos.UnixNano()
	case t.Before(minNanos):
		return minNanos.UnixNano()
	}
	return t.UnixNano()
}

var (
	maxNanos = time.Unix(0, math.MaxInt64)
	minNanos = time.Unix(0, math.MinInt64+1)
)

func fromNanos(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n)
}
