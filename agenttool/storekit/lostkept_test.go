package storekit

// DecideLost decides a record the store kept as DecideClaim does — its
// checks of principal, tool and input, its marks, a settlement granted —
// and doubts only what a lost claim may have moved on from. (From a
// fresh-context review of an earlier, blunter rule.)

import (
	"testing"
	"time"
)

// keptXY is TestDecideLostDoubtsAKeptRecord's X (failed, replaced by
// Y) and Y (unknown, approved for one more attempt).
func keptXY() (since time.Time, x, y Record, req ClaimRequest) {
	since = time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	scope, principal, session := Digest{1}, Digest{2}, Digest{3}
	x = Record{Key: "send_email/X", Tool: "send_email", State: Failed, Principal: principal, Session: session,
		Fingerprint: Digest{4}, Attempts: 1, Created: since.Add(-10 * time.Minute), Updated: since.Add(-5 * time.Minute),
		Expires: since.Add(24 * time.Hour), FenceScope: scope, ReplacedBy: "send_email/Y"}
	y = Record{Key: "send_email/Y", Tool: "send_email", State: Unknown, RetryApproved: true, Principal: principal, Session: session,
		Fingerprint: Digest{5}, Attempts: 1, Created: since.Add(-5 * time.Minute), Updated: since.Add(-2 * time.Minute),
		Expires: since.Add(24 * time.Hour), LeaseExpiry: since.Add(-3 * time.Minute), FenceScope: scope, Replaces: "send_email/X"}
	req = ClaimRequest{Key: x.Key, Tool: x.Tool, Principal: principal, Session: session, Fingerprint: x.Fingerprint,
		Owner: "o", Now: since.Add(time.Second), Lease: 30 * time.Second, Unkeyed: true, FenceScope: scope, KeyTTL: 24 * time.Hour,
		Replace: &Replacement{Key: y.Key, Attempts: y.Attempts, TTL: 24 * time.Hour}}
	return
}

// I5: the replaced action X asked for again with other details (same key,
// another fingerprint) in Y's place is key_reused_with_different_input on
// a store that did not go back; within the failover window it must be too:
// no claim the old primary could have lost was made of X's key with
// another fingerprint while X's record lived.
func TestDecideLostGoesOnAgainChecksTheFingerprint(t *testing.T) {
	since, x, y, req := keptXY()
	req.Fingerprint = Digest{9}
	next := func() (uint64, error) { return 77, nil }
	for _, takeOver := range []bool{false, true} {
		r := req
		r.TakeOver = takeOver
		c, err := DecideClaim(&x, []Record{y}, r, next)
		if err != nil {
			t.Fatal(err)
		}
		if c.Result.Conflict != OtherInput || c.Write {
			t.Fatalf("takeOver=%v DecideClaim: conflict=%v write=%v, want OtherInput, nothing written", takeOver, c.Result.Conflict, c.Write)
		}
		d, err := DecideLost(since, &x, []Record{y}, r, next)
		if err != nil {
			t.Fatal(err)
		}
		if d.Result.Conflict != OtherInput || d.Write || len(d.Occupants) != 0 {
			t.Errorf("takeOver=%v DecideLost: conflict=%v claimed=%v tookOver=%v write=%v (record state %v fingerprint %v), occupants=%d: "+
				"want OtherInput and X untouched; the other input's claim was decided from a record built of the request, X's fingerprint overwritten, Y closed",
				takeOver, d.Result.Conflict, d.Result.Claimed, d.Result.TookOver, d.Write, d.Result.Record.State, d.Result.Record.Fingerprint, len(d.Occupants))
		}
	}
}

// The same for an approved retry (Record.Superseded), decided as lost
// since d6520d1 or earlier.
func TestDecideLostApprovedRetryChecksTheFingerprint(t *testing.T) {
	since, _, y, req := keptXY()
	req.Key, req.Replace, req.Fingerprint = y.Key, nil, Digest{9}
	next := func() (uint64, error) { return 77, nil }
	d, err := DecideLost(since, &y, nil, req, next)
	if err != nil {
		t.Fatal(err)
	}
	if d.Result.Conflict != OtherInput || d.Write {
		t.Errorf("DecideLost: conflict=%v write=%v record state %v approved=%v fingerprint %v: want OtherInput, the approved record untouched",
			d.Result.Conflict, d.Write, d.Result.Record.State, d.Result.Record.RetryApproved, d.Result.Record.Fingerprint)
	}
}

// A replaced action X closed keeping its mark (it stood in for an action
// proved applied), asked for again in Y's place by its own conversation,
// is held back by its own mark and tells the model: on a store that did
// not go back, X is written as it was, failed and replaced by Y, its mark
// shortened. Within the window the record written must not be another.
func TestDecideLostMarkedReplacedActionStaysClosed(t *testing.T) {
	since, x, y, req := keptXY()
	x.NoticeUntil, x.StandsFor = since.Add(time.Hour), "send_email/W"
	req.NoticeHold = time.Minute
	next := func() (uint64, error) { return 77, nil }
	for _, takeOver := range []bool{false, true} {
		r := req
		r.TakeOver = takeOver
		c, err := DecideClaim(&x, []Record{y}, r, next)
		if err != nil {
			t.Fatal(err)
		}
		if c.Result.Blocked == nil || !c.Write || c.Result.Record.State != Failed || c.Result.Record.ReplacedBy != y.Key {
			t.Fatalf("DecideClaim: %+v, want X held back by its own mark, written failed and replaced", c)
		}
		d, err := DecideLost(since, &x, []Record{y}, r, next)
		if err != nil {
			t.Fatal(err)
		}
		if d.Write {
			if rec := d.Result.Record; rec.State != Failed || rec.ReplacedBy != y.Key {
				t.Errorf("takeOver=%v DecideLost writes X as state=%v replacedBy=%q owner=%q token=%d lease=%v (blocked=%v): "+
					"want failed, replaced by %s, as the store has it: the presumed pending record was written",
					takeOver, rec.State, rec.ReplacedBy, rec.Owner, rec.Token, rec.LeaseExpiry, d.Result.Blocked != nil, y.Key)
			}
		}
	}
}

// Settling the replaced action X applied (SettleByAnswer) (Operator.settleApplied1:
// TakeOver false, Replace naming Y, no fence scope change, NoticeHold 0)
// claims X in Y's place to record it done. Within the window, on a store
// with AcceptAsyncStandbys (every Unkeyed claim is decided by DecideLost),
// the claim must still be granted: the person says it was done, nothing
// is to run. Before 853ded2 it was (DecideClaim's goes-on-again path).
func TestDecideLostSettlingAReplacedActionAppliedIsGranted(t *testing.T) {
	since, x, y, req := keptXY()
	req.TakeOver, req.NoticeHold = false, 0
	next := func() (uint64, error) { return 77, nil }
	c, err := DecideClaim(&x, []Record{y}, req, next)
	if err != nil {
		t.Fatal(err)
	}
	if !c.Result.Claimed {
		t.Fatalf("DecideClaim: %+v, want claimed", c.Result)
	}
	d, err := DecideLost(since, &x, []Record{y}, req, next)
	if err != nil {
		t.Fatal(err)
	}
	if !d.Result.Claimed {
		var occ []string
		for _, o := range d.Occupants {
			occ = append(occ, o.Key+":"+o.State.String()+" replacedBy="+o.ReplacedBy)
		}
		t.Errorf("DecideLost: claimed=%v, X written %v (write=%v), occupants written %v: the settling claim of the replaced action in Y's place is refused (operator: ErrNotUnknown), yet X is rewritten unknown and Y closed as replaced by it",
			d.Result.Claimed, d.Result.Record.State, d.Write, occ)
	}
}

// X, closed as replaced keeping a mark its model has heard of (its
// NoticeUntil past), asked for again in Y's place: the record that goes
// on carries no mark on a store that did not go back (the mark is carried
// only from an open record). Within the window it must not carry one
// either: StandsInForApplied would say the new attempt stands in for W.
func TestDecideLostGoesOnAgainDropsAHeardMark(t *testing.T) {
	since, x, y, req := keptXY()
	x.NoticeUntil, x.StandsFor = since.Add(-time.Minute), "send_email/W"
	req.NoticeHold = time.Minute
	next := func() (uint64, error) { return 77, nil }
	for _, takeOver := range []bool{true, false} {
		r := req
		r.TakeOver = takeOver
		c, err := DecideClaim(&x, []Record{y}, r, next)
		if err != nil {
			t.Fatal(err)
		}
		if !c.Result.Claimed || c.Result.Record.StandsInForApplied() {
			t.Fatalf("DecideClaim: %+v, want claimed, no mark", c.Result)
		}
		d, err := DecideLost(since, &x, []Record{y}, r, next)
		if err != nil {
			t.Fatal(err)
		}
		if rec := d.Result.Record; d.Write && (rec.StandsInForApplied() || rec.StandsFor != "") {
			t.Errorf("takeOver=%v DecideLost writes X %v with the heard mark (until %v, stands for %q): StandsInForApplied=%v; the normal path drops it",
				takeOver, rec.State, rec.NoticeUntil, rec.StandsFor, rec.StandsInForApplied())
		}
	}
}
