package storekit

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"
)

// PendingPolicy says what [Copy] does with a pending record: one whose call
// held the key when the source was read.
type PendingPolicy uint8

const (
	// RefusePending leaves pending records out and reports each
	// ([CopyPending]): its call may still be running, and would record its
	// outcome in the source, not in the copy. Stop the application (every
	// process that writes to the source), then copy again: calls that
	// ended have recorded their outcomes by then.
	RefusePending PendingPolicy = iota
	// PendingAsUnknown copies a pending record as an unknown outcome, as a
	// claim that finds its holder gone records it ([DecideClaim]): no
	// owner, the holder's attempt counted, and the end of its lease kept as
	// the time until which that attempt may have been in flight. For the
	// records still pending once the application is stopped: their calls
	// died mid-way (a crash, a kill), and whether their effect happened is
	// unknown. The target then reconciles them before any new write of
	// their tool in their scope.
	PendingAsUnknown
)

// CopyOptions configure [Copy]. A nil *CopyOptions means all defaults, and
// so does every zero field.
type CopyOptions struct {
	// Batch is the records read from the source and written to the target
	// at a time: what Copy holds in memory. 0 means 500.
	Batch int
	// Pending says what becomes of pending records; the zero value refuses
	// them ([RefusePending]).
	Pending PendingPolicy
	// Now decides which records have expired (they are not copied: a claim
	// treats them as absent). nil means time.Now.
	Now func() time.Time
	// Issue, if set, is called for every record Copy did not copy and an
	// operator should look at, as it meets them.
	Issue func(CopyIssue)
	// Progress, if set, is called after each page with the counts so far.
	Progress func(CopyReport)
}

// CopyReport counts what [Copy] did with the records of the source.
type CopyReport struct {
	Read       int // records read from the source (readable ones)
	Copied     int // written to the target
	Identical  int // in the target already, the same: left as they are
	Expired    int // past their lifetime: not copied, as a claim treats them as absent
	Differ     int // in the target already, not the same: left as they are, reported
	Pending    int // pending and refused (RefusePending): not copied, reported
	AsUnknown  int // pending and copied as unknown outcomes (PendingAsUnknown); counted in Copied too
	Beside     int // copied beside the fence's slot they held, which another record holds (CopyMovedBeside): reported; counted in Copied too
	Unreadable int // unreadable in the source or in the target, or refused by the target's Import: reported
}

// Complete reports whether every record of the source that had not expired
// is in the target now: none differed, was refused or could not be read.
func (r CopyReport) Complete() bool {
	return r.Differ == 0 && r.Pending == 0 && r.Unreadable == 0
}

// CopyProblem is why [Copy] left a record out, or copied it otherwise than
// as the source holds it.
type CopyProblem uint8

const (
	// CopyDiffers: the target holds another record under the key. Copy
	// never overwrites one: the target's may be newer (the application may
	// already run on it).
	CopyDiffers CopyProblem = iota + 1
	// CopyPending: the record is pending in the source, and Copy was asked
	// to refuse pending records ([RefusePending]).
	CopyPending
	// CopyUnreadable: the record cannot be read in the source or in the
	// target, or the target refused to import it.
	CopyUnreadable
	// CopyMovedBeside: the record holds a slot of the fence (an unknown
	// outcome, or a success within its notice: [Record.HoldsSlot]) that a
	// record of the target holds, or an earlier record of the copy (two
	// sources copied into one target). A slot has one holder
	// ([SlotHeldError]), so the record is copied without its fence scope:
	// beside the slot ([Record.Beside]), where it still holds back every
	// new write of its tool in its session, and a principal-wide fence's
	// writes of its principal, until it is settled — as an action claimed
	// under another fence setting does. Nothing is lost; the report says
	// which records moved.
	CopyMovedBeside
)

func (p CopyProblem) String() string {
	switch p {
	case CopyDiffers:
		return "differs"
	case CopyPending:
		return "pending"
	case CopyUnreadable:
		return "unreadable"
	case CopyMovedBeside:
		return "moved beside its slot"
	}
	return fmt.Sprintf("CopyProblem(%d)", uint8(p))
}

// CopyIssue is a record [Copy] left out, and why.
type CopyIssue struct {
	Key     string
	Problem CopyProblem
	Detail  string // what differs, or the error
}

// DefaultCopyBatch is the records [Copy] moves at a time when not told.
const DefaultCopyBatch = 500

// Copy copies every record of from (an [Exporter]) into to (an
// [Importer]), a page at a time: to move an application from one store to
// another (boltstore to pgstore, when it grows to several replicas), with
// the application stopped. Records are copied whole, every field as the
// source holds it, tokens too (to's later claims get tokens above them).
//
// It is idempotent: a record whose key the target holds already is not
// written again — counted as identical when it is the same record
// (field by field, times to the microsecond, the precision of
// PostgreSQL), reported as differing ([CopyDiffers]) when not, and left
// as it is either way. Running Copy twice, or again after a run that
// stopped part-way, copies what is missing and nothing else.
//
// Records past their lifetime are not copied. Pending records are refused
// or copied as unknown, as opts.Pending says. Records that cannot be read
// are reported and the copy goes on. Copy returns an error, with the
// report so far, only when it cannot go on (a store fails, ctx ends): run
// it again to finish. The report says whether the copy is complete
// ([CopyReport.Complete]).
func Copy(ctx context.Context, from, to Store, opts *CopyOptions) (CopyReport, error) {
	var o CopyOptions
	if opts != nil {
		o = *opts
	}
	if o.Batch <= 0 {
		o.Batch = DefaultCopyBatch
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	var rep CopyReport
	ex, ok := from.(Exporter)
	if !ok {
		return rep, fmt.Errorf("agenttool: copying: the source (%T) cannot list its records (storekit.Exporter): %w", from, errors.ErrUnsupported)
	}
	im, ok := to.(Importer)
	if !ok {
		return rep, fmt.Errorf("agenttool: copying: the target (%T) cannot import records (storekit.Importer): %w", to, errors.ErrUnsupported)
	}
	issue := func(key string, p CopyProblem, detail string) {
		switch p {
		case CopyDiffers:
			rep.Differ++
		case CopyPending:
			rep.Pending++
		case CopyUnreadable:
			rep.Unreadable++
		case CopyMovedBeside:
			rep.Beside++
		}
		if o.Issue != nil {
			o.Issue(CopyIssue{Key: key, Problem: p, Detail: detail})
		}
	}
	after := ""
	for {
		recs, next, err := ex.Export(ctx, after, o.Batch)
		if err != nil && len(CorruptKeys(err)) == 0 {
			return rep, fmt.Errorf("agenttool: copying: reading the source after %q: %w", after, err)
		}
		for _, k := range CorruptKeys(err) {
			issue(k, CopyUnreadable, "unreadable in the source")
		}
		now := o.Now()
		batch := make([]Record, 0, len(recs))
		var converted map[string]bool // pending records of the page made unknown
		for _, r := range recs {
			rep.Read++
			switch {
			case r.Sweepable(now):
				rep.Expired++
				continue
			case r.State == Pending && o.Pending != PendingAsUnknown:
				issue(r.Key, CopyPending, pendingDetail(&r, now))
				continue
			case r.State == Pending:
				r = asUnknown(r)
				if converted == nil {
					converted = map[string]bool{}
				}
				converted[r.Key] = true
			}
			if err := ValidateImport(&r); err != nil {
				issue(r.Key, CopyUnreadable, err.Error())
				continue
			}
			batch = append(batch, r)
		}
		if err := copyPage(ctx, to, im, batch, converted, &rep, issue); err != nil {
			return rep, err
		}
		if o.Progress != nil {
			o.Progress(rep)
		}
		if next == "" {
			return rep, nil
		}
		after = next
	}
}

// copyPage imports batch into to: at once, when the target holds none of
// its keys (one write, the common case of a first run); else record by
// record, leaving out the keys the target holds. converted names the
// records that were pending in the source.
func copyPage(ctx context.Context, to Store, im Importer, batch []Record, converted map[string]bool, rep *CopyReport, issue func(string, CopyProblem, string)) error {
	if len(batch) == 0 {
		return nil
	}
	copied := func(recs []Record) {
		rep.Copied += len(recs)
		for _, r := range recs {
			if converted[r.Key] {
				rep.AsUnknown++
			}
		}
	}
	err := im.Import(ctx, batch)
	if err == nil {
		copied(batch)
		return nil
	}
	if !errors.Is(err, ErrInvalidRequest) {
		return fmt.Errorf("agenttool: copying: writing %d records to the target, from %s: %w", len(batch), batch[0].Key, err)
	}
	// A key the target holds (the records are valid): Import wrote none of
	// them. Look each up.
	missing := batch[:0]
	for _, r := range batch {
		have, err := to.Get(ctx, r.Key)
		switch {
		case errors.Is(err, ErrNotFound):
			missing = append(missing, r)
		case errors.Is(err, ErrCorrupt):
			issue(r.Key, CopyUnreadable, "unreadable in the target, left as it is: "+err.Error())
		case err != nil:
			return fmt.Errorf("agenttool: copying: reading %s in the target: %w", r.Key, err)
		default:
			// A record copied beside its slot by an earlier run is the same.
			if diff := Differences(r, have); len(diff) > 0 && !(r.HoldsSlot() && len(Differences(movedBeside(r), have)) == 0) {
				issue(r.Key, CopyDiffers, "the target holds another record, left as it is; it differs in "+strings.Join(diff, ", "))
			} else {
				rep.Identical++
			}
		}
	}
	if len(missing) == 0 {
		return nil
	}
	// Each round moves one record beside the slot it would share, so
	// there are at most as many rounds as records; they are reported once
	// the import is written.
	var moved []CopyIssue
	for {
		err := im.Import(ctx, missing)
		if err == nil {
			break
		}
		var held *SlotHeldError
		i := -1
		if errors.As(err, &held) {
			i = slices.IndexFunc(missing, func(r Record) bool { return r.Key == held.Key && r.HoldsSlot() })
		}
		if i < 0 {
			return fmt.Errorf("agenttool: copying: writing %d records to the target, from %s (is something else writing to it?): %w", len(missing), missing[0].Key, err)
		}
		holder := "another record"
		if held.Holder != "" {
			holder = held.Holder
		}
		moved = append(moved, CopyIssue{held.Key, CopyMovedBeside, fmt.Sprintf("it held the fence's slot of %s in its scope, which %s holds in the target; copied beside the slot, where it still holds back new writes of %s in its session until it is settled",
			held.Tool, holder, held.Tool)})
		missing[i] = movedBeside(missing[i])
	}
	for _, m := range moved {
		issue(m.Key, m.Problem, m.Detail)
	}
	copied(missing)
	return nil
}

// movedBeside is r as [Copy] writes it beside its slot ([CopyMovedBeside]):
// without its fence scope.
func movedBeside(r Record) Record {
	r.FenceScope = Digest{}
	return r
}

// pendingDetail says of a pending record what an operator needs to decide.
func pendingDetail(r *Record, now time.Time) string {
	until := r.LeaseExpiry.UTC().Format(time.RFC3339)
	if now.Before(r.LeaseExpiry) {
		return "held by a call whose lease runs until " + until + ": it may still be running"
	}
	return "its holder's lease lapsed at " + until + ": the call died mid-way (or its process is paused), and whether its effect happened is unknown"
}

// asUnknown is the pending record r as a claim that finds its holder gone,
// and does not take it over, records it ([DecideClaim]): unknown, with no
// owner, the holder's attempt counted, and its lease's end kept as the
// time until which that attempt may have been in flight. Its token and
// its Updated stay as they were, so that the same record is made from the
// same source every time (a second Copy finds it identical).
func asUnknown(r Record) Record {
	r.State, r.Owner, r.TakenOver, r.RetryApproved, r.Expires = Unknown, "", false, false, time.Time{}
	r.Attempts++
	return r
}

// Differences returns the names of the fields in which a and b differ, as
// two stores keep one record: times are compared to the microsecond (what
// PostgreSQL keeps), whatever their location, and a nil byte slice equals
// an empty one. Every field of [Record] is compared, those added later too
// (by reflection), and the fields of what they point to. nil if none
// differs.
func Differences(a, b Record) []string {
	var out []string
	va, vb := reflect.ValueOf(a), reflect.ValueOf(b)
	for i := range va.NumField() {
		if !sameValue(va.Field(i), vb.Field(i)) {
			out = append(out, va.Type().Field(i).Name)
		}
	}
	return out
}

var timeType = reflect.TypeFor[time.Time]()

func sameValue(a, b reflect.Value) bool {
	if a.Type() == timeType {
		ta, tb := a.Interface().(time.Time), b.Interface().(time.Time)
		if ta.IsZero() || tb.IsZero() {
			return ta.IsZero() == tb.IsZero()
		}
		d := ta.Sub(tb)
		return d < time.Microsecond && d > -time.Microsecond
	}
	switch a.Kind() {
	case reflect.Pointer, reflect.Interface:
		if a.IsNil() || b.IsNil() {
			return a.IsNil() == b.IsNil()
		}
		return sameValue(a.Elem(), b.Elem())
	case reflect.Struct:
		for i := range a.NumField() {
			if !a.Type().Field(i).IsExported() {
				return reflect.DeepEqual(a.Interface(), b.Interface())
			}
			if !sameValue(a.Field(i), b.Field(i)) {
				return false
			}
		}
		return true
	case reflect.Slice:
		if a.Type().Elem().Kind() == reflect.Uint8 {
			return bytes.Equal(a.Bytes(), b.Bytes())
		}
		if a.Len() != b.Len() {
			return false
		}
		for i := range a.Len() {
			if !sameValue(a.Index(i), b.Index(i)) {
				return false
			}
		}
		return true
	}
	return reflect.DeepEqual(a.Interface(), b.Interface())
}
