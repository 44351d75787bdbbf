package storekit_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe/agenttool/memstore"
	"github.com/retrysafe/retrysafe/agenttool/storekit"
)

var (
	t0  = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	bg  = context.Background()
	ana = storekit.Digest{0xa1}
)

// at is the clock of the copies here.
func at() time.Time { return t0.Add(time.Hour) }

// settled returns a settled record of key in state.
func settled(key string, state storekit.State) storekit.Record {
	r := storekit.Record{Key: key, Tool: "send_email", State: state, Principal: ana, Session: storekit.Digest{2},
		Fingerprint: storekit.Digest{3}, Token: 40, Attempts: 1, Outcome: []byte(`{"status":"` + state.String() + `"}`),
		Created: t0, Updated: t0.Add(time.Second), Expires: t0.Add(24 * time.Hour), Label: "Ana · ticket 9"}
	if state == storekit.Unknown {
		r.Expires, r.LeaseExpiry = time.Time{}, t0.Add(time.Minute)
	}
	return r
}

// source returns a memory store holding n settled records, keys
// copy/000 … in order, of every settled state.
func source(t *testing.T, n int) (*memstore.Store, []string) {
	t.Helper()
	s := memstore.New()
	var keys []string
	var recs []storekit.Record
	for i := range n {
		k := fmt.Sprintf("copy/%03d", i)
		keys = append(keys, k)
		recs = append(recs, settled(k, []storekit.State{storekit.Succeeded, storekit.Failed, storekit.Unknown}[i%3]))
	}
	if err := s.Import(bg, recs); err != nil {
		t.Fatal(err)
	}
	return s, keys
}

// sameStores fails t unless a and b hold the same records.
func sameStores(t *testing.T, a, b *memstore.Store) {
	t.Helper()
	ra, _, err := a.Export(bg, "", 100000)
	if err != nil {
		t.Fatal(err)
	}
	rb, _, err := b.Export(bg, "", 100000)
	if err != nil {
		t.Fatal(err)
	}
	if len(ra) != len(rb) {
		t.Fatalf("%d records, and %d in the copy", len(ra), len(rb))
	}
	for i := range ra {
		if d := storekit.Differences(ra[i], rb[i]); ra[i].Key != rb[i].Key || len(d) > 0 {
			t.Errorf("%s copied as %s, differing in %v", ra[i].Key, rb[i].Key, d)
		}
	}
}

func TestCopyIsIdempotent(t *testing.T) {
	from, keys := source(t, 25)
	to := memstore.New()
	rep, err := storekit.Copy(bg, from, to, &storekit.CopyOptions{Batch: 4, Now: at})
	if err != nil || rep.Copied != 25 || rep.Read != 25 || !rep.Complete() {
		t.Fatalf("first copy: %+v, %v", rep, err)
	}
	sameStores(t, from, to)
	rep, err = storekit.Copy(bg, from, to, &storekit.CopyOptions{Batch: 4, Now: at})
	if err != nil || rep.Copied != 0 || rep.Identical != len(keys) || !rep.Complete() {
		t.Fatalf("second copy: %+v, %v; want every record found identical, none copied", rep, err)
	}
	sameStores(t, from, to)
}

func TestCopyGoesOnAfterAPartialRun(t *testing.T) {
	from, _ := source(t, 25)
	to := memstore.New()
	ctx, stop := context.WithCancel(bg)
	pages := 0
	rep, err := storekit.Copy(ctx, from, to, &storekit.CopyOptions{Batch: 4, Now: at, Progress: func(storekit.CopyReport) {
		if pages++; pages == 3 {
			stop() // the operator's Ctrl-C, after the third page
		}
	}})
	if !errors.Is(err, context.Canceled) || rep.Copied != 12 || to.Len() != 12 {
		t.Fatalf("interrupted copy: %+v, %v, %d records in the target; want 12 copied, then context.Canceled", rep, err, to.Len())
	}
	rep, err = storekit.Copy(bg, from, to, &storekit.CopyOptions{Batch: 5, Now: at})
	if err != nil || rep.Copied != 13 || rep.Identical != 12 || !rep.Complete() {
		t.Fatalf("copy after the interrupted one: %+v, %v; want the 13 missing copied, the 12 there found identical", rep, err)
	}
	sameStores(t, from, to)
}

func TestCopyNeverOverwrites(t *testing.T) {
	from, keys := source(t, 6)
	to := memstore.New()
	// The application already runs on the target: one action there was
	// settled since, and one record there has another key's content.
	newer := settled(keys[2], storekit.Succeeded) // unknown in the source
	newer.Attempts, newer.Resolution = 2, &storekit.Resolution{Verdict: "applied", By: "reconciler", At: t0.Add(time.Hour)}
	if err := to.Import(bg, []storekit.Record{newer}); err != nil {
		t.Fatal(err)
	}
	var issues []storekit.CopyIssue
	rep, err := storekit.Copy(bg, from, to, &storekit.CopyOptions{Now: at, Issue: func(is storekit.CopyIssue) { issues = append(issues, is) }})
	if err != nil || rep.Copied != 5 || rep.Differ != 1 || rep.Complete() {
		t.Fatalf("copy: %+v, %v; want 5 copied and 1 reported as differing", rep, err)
	}
	if len(issues) != 1 || issues[0].Key != keys[2] || issues[0].Problem != storekit.CopyDiffers ||
		issues[0].Detail != "the target holds another record, left as it is; it differs in State, LeaseExpiry, Attempts, Outcome, Expires, Resolution" {
		t.Errorf("issues %+v; want %s reported with the fields that differ", issues, keys[2])
	}
	if got, _ := to.Get(bg, keys[2]); len(storekit.Differences(got, newer)) > 0 {
		t.Errorf("the target's record was overwritten: %+v", got)
	}
}

func TestCopyPendingRecords(t *testing.T) {
	from, _ := source(t, 3)
	// A call held this key when the application stopped (or still holds it).
	held, err := from.Claim(bg, storekit.ClaimRequest{Key: "copy/held", Tool: "send_email", Principal: ana,
		Fingerprint: storekit.Digest{3}, Owner: "o-1", Now: t0, Lease: time.Minute})
	if err != nil || !held.Claimed {
		t.Fatal(held, err)
	}
	to := memstore.New()
	var issues []storekit.CopyIssue
	rep, err := storekit.Copy(bg, from, to, &storekit.CopyOptions{Now: at, Issue: func(is storekit.CopyIssue) { issues = append(issues, is) }})
	if err != nil || rep.Copied != 3 || rep.Pending != 1 || rep.Complete() {
		t.Fatalf("copy refusing pending records: %+v, %v", rep, err)
	}
	if len(issues) != 1 || issues[0].Key != "copy/held" || issues[0].Problem != storekit.CopyPending ||
		issues[0].Detail != "its holder's lease lapsed at 2026-11-29T12:01:00Z: the call died mid-way (or its process is paused), and whether its effect happened is unknown" {
		t.Errorf("issues %+v; want copy/held reported as pending, its lease lapsed", issues)
	}
	if _, err := to.Get(bg, "copy/held"); !errors.Is(err, storekit.ErrNotFound) {
		t.Errorf("a refused pending record is in the target: %v", err)
	}

	opts := &storekit.CopyOptions{Pending: storekit.PendingAsUnknown, Now: at}
	rep, err = storekit.Copy(bg, from, to, opts)
	if err != nil || rep.Copied != 1 || rep.AsUnknown != 1 || rep.Identical != 3 || !rep.Complete() {
		t.Fatalf("copy with pending records as unknown: %+v, %v", rep, err)
	}
	got, err := to.Get(bg, "copy/held")
	if err != nil || got.State != storekit.Unknown || got.Owner != "" || got.Attempts != 1 || !got.LeaseExpiry.Equal(t0.Add(time.Minute)) || !got.Expires.IsZero() {
		t.Fatalf("the pending record copied as %+v, %v; want unknown, its holder's attempt counted, held until its lease's end", got, err)
	}
	// The copy reconciles it, as the source would have: a keyed claim
	// takes it over, learning until when the dead holder's attempt may
	// have been in flight.
	res, err := to.Claim(bg, storekit.ClaimRequest{Key: "copy/held", Tool: "send_email", Principal: ana,
		Fingerprint: storekit.Digest{3}, Owner: "o-2", Now: t0.Add(time.Hour), Lease: time.Minute, TakeOver: true})
	if err != nil || !res.Claimed || !res.TookOver || !res.HeldUntil.Equal(t0.Add(time.Minute)) || res.Record.Token <= held.Record.Token {
		t.Errorf("claiming the copied record: %+v, %v; want a takeover with a token above %d", res, err, held.Record.Token)
	}
	if rep, err := storekit.Copy(bg, from, memstore.New(), opts); err != nil || rep.AsUnknown != 1 {
		t.Fatal(rep, err)
	}
	fresh := memstore.New()
	storekit.Copy(bg, from, fresh, opts)
	if rep, err := storekit.Copy(bg, from, fresh, opts); err != nil || rep.AsUnknown != 0 || rep.Identical != 4 {
		t.Errorf("a second copy with pending records as unknown: %+v, %v; want the record made unknown found identical, not copied again", rep, err)
	}
}

func TestCopyLeavesExpiredRecordsOut(t *testing.T) {
	from, keys := source(t, 3) // succeeded, failed, unknown; the first two expire at t0+24h
	to := memstore.New()
	rep, err := storekit.Copy(bg, from, to, &storekit.CopyOptions{Now: func() time.Time { return t0.Add(25 * time.Hour) }})
	if err != nil || rep.Expired != 2 || rep.Copied != 1 || !rep.Complete() {
		t.Fatalf("copy: %+v, %v; want the two expired records left out, the unknown one (which never expires) copied", rep, err)
	}
	if _, err := to.Get(bg, keys[2]); err != nil {
		t.Error(err)
	}
}

// corruptSource is a store whose export reports one record it cannot read.
type corruptSource struct {
	*memstore.Store
	bad string
}

func (c corruptSource) Export(ctx context.Context, after string, limit int) ([]storekit.Record, string, error) {
	recs, next, err := c.Store.Export(ctx, after, limit)
	if after < c.bad && (next == "" || c.bad <= next) {
		err = errors.Join(err, &storekit.CorruptRecordError{Key: c.bad, Err: errors.New("checksum")})
	}
	return recs, next, err
}

func TestCopyReportsUnreadableRecordsAndGoesOn(t *testing.T) {
	from, _ := source(t, 9)
	to := memstore.New()
	var issues []storekit.CopyIssue
	rep, err := storekit.Copy(bg, corruptSource{from, "copy/0045"}, to, &storekit.CopyOptions{Batch: 2, Now: at,
		Issue: func(is storekit.CopyIssue) { issues = append(issues, is) }})
	if err != nil || rep.Copied != 9 || rep.Unreadable != 1 || rep.Complete() {
		t.Fatalf("copy: %+v, %v; want every readable record copied and one reported", rep, err)
	}
	if len(issues) != 1 || issues[0].Key != "copy/0045" || issues[0].Problem != storekit.CopyUnreadable {
		t.Errorf("issues %+v", issues)
	}
}

// batchCounter is a target that records the size of each import.
type batchCounter struct {
	*memstore.Store
	sizes []int
}

func (b *batchCounter) Import(ctx context.Context, recs []storekit.Record) error {
	b.sizes = append(b.sizes, len(recs))
	return b.Store.Import(ctx, recs)
}

func TestCopyMovesAPageAtATime(t *testing.T) {
	from, _ := source(t, 23)
	to := &batchCounter{Store: memstore.New()}
	if rep, err := storekit.Copy(bg, from, to, &storekit.CopyOptions{Batch: 5, Now: at}); err != nil || rep.Copied != 23 {
		t.Fatal(rep, err)
	}
	if !slices.Equal(to.sizes, []int{5, 5, 5, 5, 3}) {
		t.Errorf("imports of %v records; want pages of 5", to.sizes)
	}
	if _, err := storekit.Copy(bg, memstore.New(), struct{ storekit.Store }{to}, nil); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("copy into a store that cannot import: %v", err)
	}
}

// TestDifferencesSeesEveryField changes each field of a record in turn —
// those added to Record later too — and checks that Differences names it,
// and that what two stores may keep differently of one record is not a
// difference.
func TestDifferencesSeesEveryField(t *testing.T) {
	base := settled("copy/diff", storekit.Unknown)
	base.Resolution = &storekit.Resolution{Verdict: "applied", By: "operator:ana", Why: "seen", At: t0}
	rt := reflect.TypeFor[storekit.Record]()
	for i := range rt.NumField() {
		changed := base
		changed.Resolution = &storekit.Resolution{}
		*changed.Resolution = *base.Resolution
		f := reflect.ValueOf(&changed).Elem().Field(i)
		if !alter(f) {
			t.Errorf("the test cannot change field %s (%s): teach alter its kind", rt.Field(i).Name, f.Type())
			continue
		}
		if d := storekit.Differences(base, changed); !slices.Equal(d, []string{rt.Field(i).Name}) {
			t.Errorf("changing %s: Differences = %v", rt.Field(i).Name, d)
		}
	}
	same := base
	same.Created = base.Created.Add(999 * time.Nanosecond).In(time.FixedZone("elsewhere", 3600))
	same.Outcome = append([]byte{}, base.Outcome...)
	same.Resolution = &storekit.Resolution{Verdict: "applied", By: "operator:ana", Why: "seen", At: t0}
	if d := storekit.Differences(base, same); d != nil {
		t.Errorf("a record as another store keeps it (times to the microsecond, another location, an equal copy of each pointer) differs in %v", d)
	}
	noOutcome, emptyOutcome := base, base
	noOutcome.Outcome, emptyOutcome.Outcome = nil, []byte{}
	if d := storekit.Differences(noOutcome, emptyOutcome); d != nil {
		t.Errorf("a nil and an empty outcome differ in %v", d)
	}
}

// alter changes v, a field of a record, to another value.
func alter(v reflect.Value) bool {
	if v.Type() == reflect.TypeFor[time.Time]() {
		v.Set(reflect.ValueOf(v.Interface().(time.Time).Add(time.Millisecond)))
		return true
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(v.String() + "!")
	case reflect.Bool:
		v.SetBool(!v.Bool())
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(v.Int() + 1)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(v.Uint() + 1)
	case reflect.Array:
		return alter(v.Index(v.Len() - 1))
	case reflect.Slice:
		v.Set(reflect.Append(v, reflect.Zero(v.Type().Elem())))
	case reflect.Pointer:
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
			return true
		}
		return alter(v.Elem().Field(v.Elem().NumField() - 1))
	default:
		return false
	}
	return true
}

// TestCopyMovesASecondHolderOfASlotBesideIt copies an unknown action whose
// fence slot a record of the target holds (two sources copied into one
// target, or a target the application already ran on): a slot has one
// holder, so it is copied beside the slot, reported, and still holds back
// the next write of its tool in its session — and a second run finds it
// the same.
func TestCopyMovesASecondHolderOfASlotBesideIt(t *testing.T) {
	session := storekit.Digest{2}
	unknown := settled("copy/unknown", storekit.Unknown)
	unknown.FenceScope = session
	from := memstore.New()
	if err := from.Import(bg, []storekit.Record{unknown, settled("copy/plain", storekit.Succeeded)}); err != nil {
		t.Fatal(err)
	}
	// The target's action of the same tool and session succeeded after an
	// unknown outcome, and its notice has ended: it holds the slot until
	// the next claim clears it.
	noticed := settled("copy/noticed", storekit.Succeeded)
	noticed.FenceScope, noticed.NoticeUntil = session, t0.Add(time.Minute)
	to := memstore.New()
	if err := to.Import(bg, []storekit.Record{noticed}); err != nil {
		t.Fatal(err)
	}
	var issues []storekit.CopyIssue
	rep, err := storekit.Copy(bg, from, to, &storekit.CopyOptions{Now: at, Issue: func(is storekit.CopyIssue) { issues = append(issues, is) }})
	if err != nil || rep.Copied != 2 || rep.Beside != 1 || !rep.Complete() {
		t.Fatalf("copy: %+v, %v; want both copied, one beside its slot, complete", rep, err)
	}
	if len(issues) != 1 || issues[0].Key != unknown.Key || issues[0].Problem != storekit.CopyMovedBeside ||
		!strings.Contains(issues[0].Detail, "which copy/noticed holds in the target") {
		t.Errorf("issues %+v; want the unknown action reported as moved beside the slot copy/noticed holds", issues)
	}
	got, err := to.Get(bg, unknown.Key)
	if err != nil || got.FenceScope != (storekit.Digest{}) || !got.Beside() || got.State != storekit.Unknown {
		t.Fatalf("the copied unknown action: %+v, %v; want it unknown, beside its slot", got, err)
	}
	// A new write of the tool in the session: the ended notice is cleared,
	// and the unknown action beside the slot holds it back.
	res, err := to.Claim(bg, storekit.ClaimRequest{Key: "copy/new", Tool: unknown.Tool, Principal: ana, Session: session, FenceScope: session,
		Fingerprint: storekit.Digest{9}, Owner: "o", Now: at(), Lease: time.Minute})
	if err != nil || res.Claimed || res.Blocked == nil || res.Blocked.Key != unknown.Key {
		t.Errorf("a new write after the copy: %+v, %v; want it held back by %s", res, err, unknown.Key)
	}
	again, err := storekit.Copy(bg, from, to, &storekit.CopyOptions{Now: at})
	if err != nil || again.Copied != 0 || again.Identical != 2 || again.Differ != 0 {
		t.Errorf("a second copy: %+v, %v; want both found identical", again, err)
	}
}
