package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/storekit"
)

// The slot of the unknown fence (storekit.DecideClaim): at most one record
// of a tool and fence scope is pending, unknown, approved for a retry, or
// succeeded within its notice; a claim of another key in the scope is
// granted only when the slot is free, on every replica of a store alike
// and across a restart.

// slotted is a claim request of a new key in the slot of tool and scope.
func slotted(tool string, scope agenttool.Digest, now time.Time) storekit.ClaimRequest {
	req := claimReq(newKey(), now)
	req.Tool, req.Session, req.FenceScope = tool, scope, scope
	return req
}

func newSlot() (string, agenttool.Digest) {
	n := keyCount.Add(1)
	return fmt.Sprintf("slot-%d", n), agenttool.Digest{0x5e, byte(n), byte(n >> 8), byte(n >> 16)}
}

// blockedBy checks that res was refused for the record of key, in state.
func blockedBy(t *testing.T, what string, res storekit.ClaimResult, key string, state agenttool.State) {
	t.Helper()
	if res.Claimed || res.Blocked == nil || res.Blocked.Key != key || res.Blocked.State != state {
		t.Fatalf("%s: claimed %v, blocked by %+v; want refused, blocked by %s (%v)", what, res.Claimed, res.Blocked, key, state)
	}
}

func granted(t *testing.T, what string, res storekit.ClaimResult) storekit.ClaimResult {
	t.Helper()
	if !res.Claimed || res.Blocked != nil {
		t.Fatalf("%s: %+v; want granted", what, res)
	}
	return res
}

func testSlotOneWriteAtATime(t *testing.T, h Harness) {
	s := h.Open(t)
	other := twinOf(t, h, s)
	tool, scope := newSlot()
	first := granted(t, "first write", mustClaim(t, s, slotted(tool, scope, t0)))
	if got, _ := s.Get(bg, first.Record.Key); got.FenceScope != scope || !got.HoldsSlot() {
		t.Fatalf("the first write's record %+v does not hold its slot", got)
	}
	second := slotted(tool, scope, t0.Add(time.Second))
	blockedBy(t, "a second write while the first runs", mustClaim(t, other, second), first.Record.Key, agenttool.Pending)
	if _, err := s.Get(bg, second.Key); err == nil {
		t.Errorf("a refused claim left a record")
	}
	// Other scopes, other tools and tools without a fence are not held.
	otherTool, otherScope := newSlot()
	granted(t, "another scope", mustClaim(t, other, slotted(tool, otherScope, t0)))
	granted(t, "another tool", mustClaim(t, other, slotted(otherTool, scope, t0)))
	unfenced := slotted(tool, scope, t0)
	unfenced.FenceScope = agenttool.Digest{}
	u := granted(t, "a claim without a fence scope", mustClaim(t, other, unfenced))
	// (While it runs, it holds the session's new writes back: SlotBeside.)
	if err := other.Release(bg, unfenced.Key, u.Record.Token); err != nil {
		t.Fatal(err)
	}
	// The same key meets its own record, never its own slot.
	again := claimReq(first.Record.Key, t0.Add(time.Second))
	again.Tool, again.Session, again.FenceScope = tool, scope, scope
	if res := mustClaim(t, other, again); res.Claimed || res.Blocked != nil || res.Record.Token != first.Record.Token {
		t.Errorf("the same action again: %+v; want its running record", res)
	}
	// Once the first is done, the slot is free.
	if err := s.Finish(bg, finish(first.Record.Key, first.Record.Token, agenttool.Succeeded, t0.Add(time.Second))); err != nil {
		t.Fatal(err)
	}
	res := granted(t, "the second write after the first succeeded", mustClaim(t, other, second))
	// A released claim frees it too.
	if err := other.Release(bg, second.Key, res.Record.Token); err != nil {
		t.Fatal(err)
	}
	granted(t, "a write after a release", mustClaim(t, s, slotted(tool, scope, t0.Add(2*time.Second))))
}

func testSlotHeldByUnknownAndDeadHolders(t *testing.T, h Harness) {
	s := h.Open(t)
	other := twinOf(t, h, s)
	tool, scope := newSlot()
	dead := granted(t, "a write whose holder dies", mustClaim(t, s, slotted(tool, scope, t0)))
	// Its holder is gone: within the lease and after it, nothing else runs.
	blockedBy(t, "within the dead holder's lease", mustClaim(t, other, slotted(tool, scope, t0.Add(minute/2))), dead.Record.Key, agenttool.Pending)
	res := mustClaim(t, other, slotted(tool, scope, t0.Add(2*minute)))
	blockedBy(t, "after the dead holder's lease", res, dead.Record.Key, agenttool.Pending)
	if !res.Blocked.AwaitsReconciliation(t0.Add(2 * minute)) {
		t.Errorf("the lapsed record %+v does not await reconciliation", res.Blocked)
	}
	// Taken over, and found unknown: still held.
	take := claimReq(dead.Record.Key, t0.Add(2*minute))
	take.Tool, take.Session, take.FenceScope, take.TakeOver = tool, scope, scope, true
	took := mustClaim(t, other, take)
	if !took.Claimed || !took.TookOver {
		t.Fatalf("takeover of the dead holder's record: %+v", took)
	}
	if err := other.Finish(bg, finish(dead.Record.Key, took.Record.Token, agenttool.Unknown, t0.Add(2*minute))); err != nil {
		t.Fatal(err)
	}
	blockedBy(t, "while the action is unknown", mustClaim(t, s, slotted(tool, scope, t0.Add(3*minute))), dead.Record.Key, agenttool.Unknown)
	if h.Reopen != nil {
		s = h.Reopen(t, s)
		blockedBy(t, "after a restart", mustClaim(t, s, slotted(tool, scope, t0.Add(3*minute))), dead.Record.Key, agenttool.Unknown)
	}
}

func testSlotReplacement(t *testing.T, h Harness) {
	s := h.Open(t)
	other := twinOf(t, h, s)
	tool, scope := newSlot()
	e := granted(t, "the earlier action", mustClaim(t, s, slotted(tool, scope, t0)))
	key := e.Record.Key
	if err := s.Finish(bg, finish(key, e.Record.Token, agenttool.Unknown, t0)); err != nil {
		t.Fatal(err)
	}
	// The fence takes it over and finds it not applied.
	take := claimReq(key, t0.Add(minute))
	take.Tool, take.Session, take.FenceScope, take.TakeOver = tool, scope, scope, true
	held := mustClaim(t, other, take)
	r := slotted(tool, scope, t0.Add(minute))
	r.Replace = &storekit.Replacement{Key: key, Token: held.Record.Token + 1000, Outcome: []byte(`{"replaced":true}`), TTL: time.Hour}
	blockedBy(t, "a replacement under a token that does not hold it", mustClaim(t, s, r), key, agenttool.Pending)
	r.Replace.Token = held.Record.Token
	res := granted(t, "the call in place of the earlier action", mustClaim(t, s, r))
	if res.Record.Replaces != key || res.Record.FenceScope != scope {
		t.Errorf("the replacing record %+v does not say what it replaces", res.Record)
	}
	old, err := other.Get(bg, key)
	if err != nil || old.State != agenttool.Failed || old.ReplacedBy != r.Key || string(old.Outcome) != `{"replaced":true}` ||
		old.HoldsSlot() || !old.Expires.Equal(t0.Add(minute+time.Hour)) {
		t.Errorf("the replaced record: %+v, %v; want failed, replaced by %s, with its new outcome", old, err, r.Key)
	}
	// The replaced action's holder has lost it.
	if err := other.Finish(bg, finish(key, held.Record.Token, agenttool.Succeeded, t0.Add(minute))); err == nil {
		t.Errorf("the replaced action's holder could still finish it")
	}
	blockedBy(t, "a write beside the replacement", mustClaim(t, other, slotted(tool, scope, t0.Add(minute))), r.Key, agenttool.Pending)
}

// testSlotBeside: an open action of a tool and session claimed under
// another fence setting — none (FenceOff, or a version before slots) or
// its principal's — holds back the session's new writes of the tool, on
// every replica, though it holds no slot they ask for: while it runs and
// while it is unknown, until it is replaced in its place (or settled).
// Another session's writes, and another tool's, are not held back.
func testSlotBeside(t *testing.T, h Harness) {
	for _, kind := range []string{"none", "principal"} {
		t.Run(kind, func(t *testing.T) {
			s := h.Open(t)
			other := twinOf(t, h, s)
			tool, session := newSlot()
			old := claimReq(newKey(), t0)
			old.Tool, old.Session = tool, session
			if kind == "principal" {
				old.FenceScope = old.Principal
			}
			e := granted(t, "the action of the other setting", mustClaim(t, s, old))
			key := e.Record.Key
			blockedBy(t, "a write of the session beside a running action", mustClaim(t, other, slotted(tool, session, t0)), key, agenttool.Pending)
			if err := s.Finish(bg, finish(key, e.Record.Token, agenttool.Unknown, t0)); err != nil {
				t.Fatal(err)
			}
			blockedBy(t, "a write of the session beside an unknown action", mustClaim(t, other, slotted(tool, session, t0)), key, agenttool.Unknown)
			_, elsewhere := newSlot()
			granted(t, "a write of another session", mustClaim(t, other, slotted(tool, elsewhere, t0)))
			otherTool, _ := newSlot()
			granted(t, "a write of another tool", mustClaim(t, other, slotted(otherTool, session, t0)))

			// The fence takes it over, finds it not applied, and a write
			// goes on in its place: it closes the action and holds the
			// session's slot.
			take := old
			take.Now, take.TakeOver, take.Owner = t0.Add(minute), true, old.Owner+"-fence"
			held := granted(t, "the fence's takeover", mustClaim(t, other, take))
			r := slotted(tool, session, t0.Add(minute))
			r.Replace = &storekit.Replacement{Key: key, Token: held.Record.Token, Outcome: []byte(`{"replaced":true}`), TTL: time.Hour}
			res := granted(t, "the write in place of the action of the other setting", mustClaim(t, s, r))
			if res.Record.Replaces != key || res.Record.FenceScope != session {
				t.Errorf("the replacing record %+v does not say what it replaces", res.Record)
			}
			if got, err := other.Get(bg, key); err != nil || got.State != agenttool.Failed || got.ReplacedBy != r.Key || got.Beside() {
				t.Errorf("the replaced action: %+v, %v; want failed, replaced by %s", got, err, r.Key)
			}
			blockedBy(t, "a write beside the replacement", mustClaim(t, other, slotted(tool, session, t0.Add(minute))), r.Key, agenttool.Pending)

			// An action beside the slot holds back records entering the
			// slot, not a takeover of the record that holds it.
			_, third := newSlot()
			holder := slotted(tool, third, t0)
			h := granted(t, "the slot's holder", mustClaim(t, s, holder))
			if err := s.Finish(bg, finish(holder.Key, h.Record.Token, agenttool.Unknown, t0)); err != nil {
				t.Fatal(err)
			}
			next := old
			next.Key, next.Session, next.Owner = newKey(), third, "owner-beside"
			granted(t, "an action beside the held slot", mustClaim(t, s, next))
			again := holder
			again.Now, again.TakeOver, again.Owner = t0.Add(minute), true, holder.Owner+"-again"
			if res := mustClaim(t, other, again); !res.Claimed || !res.TookOver {
				t.Errorf("a takeover of the slot's holder beside another action: %+v; want taken over", res)
			}

			// An approved retry of the slot's holder is a new write: an
			// action beside the slot that awaits reconciliation holds it
			// back; one approved for a retry itself does not, and waits.
			unknown := func(what string, req storekit.ClaimRequest, approved bool) {
				t.Helper()
				e := granted(t, what, mustClaim(t, s, req))
				f := finish(req.Key, e.Record.Token, agenttool.Unknown, t0)
				f.RetryApproved = approved
				if err := s.Finish(bg, f); err != nil {
					t.Fatal(err)
				}
			}
			for _, besideApproved := range []bool{false, true} {
				_, sess := newSlot()
				hold := slotted(tool, sess, t0)
				unknown("a holder to approve", hold, true)
				u := old
				u.Key, u.Session, u.Owner, u.FenceScope = newKey(), sess, "owner-beside-approved", agenttool.Digest{} // the principal's slot is taken above
				unknown("an action beside the approved holder's slot", u, besideApproved)
				retry := hold
				retry.Now, retry.Owner = t0.Add(minute), hold.Owner+"-retry"
				res := mustClaim(t, other, retry)
				if !besideApproved {
					blockedBy(t, "the approved holder's retry beside an unknown action", res, u.Key, agenttool.Unknown)
					continue
				}
				granted(t, "the approved holder's retry beside an approved action", res)
				uRetry := u
				uRetry.Now, uRetry.Owner, uRetry.FenceScope = t0.Add(minute), u.Owner+"-retry", sess
				blockedBy(t, "the approved action's retry beside the holder's", mustClaim(t, other, uRetry), hold.Key, agenttool.Pending)
			}
		})
	}
}

// testSlotBesideOfPrincipal: under a principal's fence, an action of the
// tool and principal that holds no slot — claimed under FenceOff, by a
// version before slots, or settled applied aside from its scope — holds
// back the principal's new writes of the tool from every session, on
// every replica, as the slot's holder would: while it runs, while it is
// unknown, and settled applied within its notice. Another principal's
// writes and another tool's are not held back, nor is a takeover of the
// principal's slot holder, except that a takeover that answers a model
// (NoticeHold) waits for the model to hear of an action beside the slot
// proved applied.
func testSlotBesideOfPrincipal(t *testing.T, h Harness) {
	s := h.Open(t)
	other := twinOf(t, h, s)
	tool, s1 := newSlot()
	_, s2 := newSlot()
	fenced := func(tool string, principal, session agenttool.Digest, now time.Time) storekit.ClaimRequest {
		req := claimReq(newKey(), now)
		req.Tool, req.Principal, req.Session, req.FenceScope = tool, principal, session, principal
		return req
	}
	outside := func(tool string, session agenttool.Digest, now time.Time) storekit.ClaimRequest {
		req := claimReq(newKey(), now)
		req.Tool, req.Session = tool, session // no fence scope
		return req
	}
	// settleAside settles the action of req applied with a notice, as a
	// check that took it over does.
	settleAside := func(req storekit.ClaimRequest, at time.Time) {
		t.Helper()
		take := req
		take.Now, take.TakeOver, take.Owner = at, true, req.Owner+"-check"
		held := granted(t, "the check's takeover", mustClaim(t, s, take))
		done := finish(req.Key, held.Record.Token, agenttool.Succeeded, at)
		done.NoticeUntil = at.Add(10 * time.Second)
		if err := s.Finish(bg, done); err != nil {
			t.Fatal(err)
		}
	}

	off := outside(tool, s1, t0)
	e := granted(t, "an action of the principal outside any slot", mustClaim(t, s, off))
	blockedBy(t, "a write of another session beside a running action", mustClaim(t, other, fenced(tool, alice, s2, t0)), off.Key, agenttool.Pending)
	if err := s.Finish(bg, finish(off.Key, e.Record.Token, agenttool.Unknown, t0)); err != nil {
		t.Fatal(err)
	}
	blockedBy(t, "a write of another session beside an unknown action", mustClaim(t, other, fenced(tool, alice, s2, t0)), off.Key, agenttool.Unknown)
	granted(t, "a write of another principal", mustClaim(t, other, fenced(tool, bob, s2, t0)))
	otherTool, _ := newSlot()
	granted(t, "a write of another tool", mustClaim(t, other, fenced(otherTool, alice, s2, t0)))
	settleAside(off, t0.Add(minute))
	blockedBy(t, "a write of another session within the notice", mustClaim(t, other, fenced(tool, alice, s2, t0.Add(minute))), off.Key, agenttool.Succeeded)
	after := fenced(tool, alice, s2, t0.Add(minute+11*time.Second))
	res := granted(t, "a write of another session after the notice ended", mustClaim(t, other, after))
	if rec, err := s.Get(bg, off.Key); err != nil || rec.Beside() || rec.State != agenttool.Succeeded {
		t.Errorf("the action whose notice ended: %+v, %v; want succeeded, its notice cleared", rec, err)
	}
	blockedBy(t, "a write beside the new holder", mustClaim(t, s, fenced(tool, alice, s1, after.Now)), res.Record.Key, agenttool.Pending)

	// The principal's slot of a third tool, held by an unknown action,
	// and an action beside it settled applied within its notice.
	third, _ := newSlot()
	holder := fenced(third, alice, s2, t0)
	eh := granted(t, "the slot's holder", mustClaim(t, s, holder))
	if err := s.Finish(bg, finish(holder.Key, eh.Record.Token, agenttool.Unknown, t0)); err != nil {
		t.Fatal(err)
	}
	aside := outside(third, s1, t0)
	ea := granted(t, "an action outside the slot", mustClaim(t, s, aside))
	if err := s.Finish(bg, finish(aside.Key, ea.Record.Token, agenttool.Unknown, t0)); err != nil {
		t.Fatal(err)
	}
	settleAside(aside, t0.Add(minute))
	told := holder
	told.Now, told.TakeOver, told.Owner, told.NoticeHold = t0.Add(minute), true, holder.Owner+"-resend", 10*time.Second
	blockedBy(t, "a takeover of the holder that answers a model, within the notice of an action beside the slot", mustClaim(t, other, told), aside.Key, agenttool.Succeeded)
	person := told
	person.NoticeHold, person.Owner = 0, holder.Owner+"-person"
	if res := mustClaim(t, other, person); !res.Claimed || !res.TookOver {
		t.Errorf("a person's takeover of the holder beside an action within its notice: %+v; want taken over", res)
	}
}

// testSlotBesideTellsItsOwnSessionFirst: a claim fenced by principal
// held back by two actions of the principal settled applied aside, each
// within its notice — one of its own conversation, one of another — is
// held back by its own conversation's on every store, and tells its model
// of that one (whose notice then ends NoticeHold later), not of the
// other's: whatever order a store finds them in.
func testSlotBesideTellsItsOwnSessionFirst(t *testing.T, h Harness) {
	s := h.Open(t)
	tool, _ := newSlot()
	// Keys and sessions in opposite orders, so that neither order of a
	// store's finds the claim's own first by chance.
	mine, theirs := agenttool.Digest{0xa1, 0x02}, agenttool.Digest{0xa1, 0x01}
	aside := func(key string, session agenttool.Digest) {
		t.Helper()
		req := claimReq(key, t0)
		req.Tool, req.Session = tool, session // no fence scope
		res := granted(t, "an action outside any slot", mustClaim(t, s, req))
		done := finish(key, res.Record.Token, agenttool.Succeeded, t0)
		done.NoticeUntil = t0.Add(6 * time.Hour)
		if err := s.Finish(bg, done); err != nil {
			t.Fatal(err)
		}
	}
	own, other := newKey()+"-a", newKey()+"-b"
	aside(own, mine)
	aside(other, theirs)
	req := claimReq(newKey(), t0.Add(minute))
	req.Tool, req.Session, req.FenceScope, req.NoticeHold = tool, mine, req.Principal, 10*time.Second
	blockedBy(t, "a write of the principal within two notices", mustClaim(t, s, req), own, agenttool.Succeeded)
	if rec, err := s.Get(bg, own); err != nil || !rec.NoticeUntil.Equal(req.Now.Add(req.NoticeHold)) {
		t.Errorf("the notice of the conversation's own action: %v, %v; want told, ending NoticeHold later", rec.NoticeUntil, err)
	}
	if rec, err := s.Get(bg, other); err != nil || !rec.NoticeUntil.Equal(t0.Add(6*time.Hour)) {
		t.Errorf("the notice of the other conversation's action: %v, %v; want untold", rec.NoticeUntil, err)
	}
}

// testSlotStandsInForApplied: an open action marked as standing in for
// an action proved applied (Store.Mark: Record.NoticeUntil and StandsFor
// on an unknown record: it went on in that action's place) keeps its
// mark, its name and what it went on in place of, while it is open — taken over by a claim or by the sweeper,
// given back unknown, approved — and is kept while it lasts. A claim that
// answers a model is held back by it, its own and one in its place,
// until its model is told and NoticeHold passes; a claim that answers
// none passes it.
func testSlotStandsInForApplied(t *testing.T, h Harness) {
	s := h.Open(t)
	other := twinOf(t, h, s)
	tool, scope := newSlot()
	unknown := func(st agenttool.Store, req storekit.ClaimRequest, at time.Time, approved bool, mark time.Time) {
		t.Helper()
		res := mustClaim(t, st, req)
		if !res.Claimed {
			t.Fatalf("claim of %s: %+v; want granted", req.Key, res)
		}
		f := finish(req.Key, res.Record.Token, agenttool.Unknown, at)
		f.RetryApproved = approved
		if err := st.Finish(bg, f); err != nil {
			t.Fatal(err)
		}
		if mark.IsZero() {
			return
		}
		if _, err := st.Mark(bg, storekit.MarkRequest{Key: req.Key, Session: req.Session, Until: mark, For: tool + "/applied", Now: at}); err != nil {
			t.Fatal(err)
		}
	}
	a := slotted(tool, scope, t0)
	unknown(s, a, t0, true, time.Time{})
	b := slotted(tool, scope, t0)
	b.Replace = &storekit.Replacement{Key: a.Key, Attempts: 1, Outcome: []byte(`{"replaced":true}`), TTL: time.Hour}
	unknown(other, b, t0, false, time.Time{})

	// An operator marks it: taken over asking no model, in no scope,
	// given back unknown with the mark.
	op := b
	op.Replace, op.FenceScope, op.TakeOver, op.Owner, op.Now = nil, agenttool.Digest{}, true, "operator", t0.Add(minute)
	unknown(s, op, t0.Add(minute), false, storekit.UntilTold)
	marked := func(when string) agenttool.Record {
		t.Helper()
		rec, err := other.Get(bg, b.Key)
		if err != nil || !rec.StandsInForApplied() || !rec.NoticeUntil.Equal(storekit.UntilTold) || rec.Replaces != a.Key || !rec.HoldsSlot() || rec.StandsFor != tool+"/applied" {
			t.Fatalf("%s: %v mark %v standing for %q in place of %q holds the slot %v, %v; want marked until told, standing for %s/applied, in place of %s, in its slot",
				when, rec.State, rec.NoticeUntil, rec.StandsFor, rec.Replaces, rec.HoldsSlot(), err, tool, a.Key)
		}
		return rec
	}
	if rec := marked("marked"); !rec.Expires.IsZero() {
		t.Errorf("marked, unknown: expires %v; want kept until settled, as every unknown record", rec.Expires)
	}
	if uc, ok := s.(storekit.UnknownClaimer); ok {
		got, err := uc.ClaimUnknown(bg, storekit.ClaimUnknownRequest{Tools: []string{tool}, Owner: "sweeper",
			Now: t0.Add(2 * minute), Lease: minute, Limit: 1000, UpdatedBefore: t0.Add(2 * minute)})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range got {
			if r.Record.Key != b.Key {
				continue
			}
			if !r.Record.NoticeUntil.Equal(storekit.UntilTold) || r.Record.Replaces != a.Key {
				t.Errorf("taken over by the sweeper: mark %v in place of %q; want both kept", r.Record.NoticeUntil, r.Record.Replaces)
			}
			f := finish(b.Key, r.Record.Token, agenttool.Unknown, t0.Add(2*minute))
			f.RetryApproved = true // found not applied
			if err := s.Finish(bg, f); err != nil {
				t.Fatal(err)
			}
		}
	}
	sweep := op
	sweep.Owner, sweep.Now = "sweeper-2", t0.Add(2*minute)
	if res := mustClaim(t, other, sweep); res.Claimed {
		f := finish(b.Key, res.Record.Token, agenttool.Unknown, t0.Add(2*minute))
		f.RetryApproved = true
		if err := other.Finish(bg, f); err != nil {
			t.Fatal(err)
		}
	}
	rec := marked("approved, given back by the sweeper")
	if !rec.RetryApproved || !rec.SweepAt().Equal(storekit.UntilTold) || !rec.Expires.Equal(t0.Add(2*minute+time.Hour)) {
		t.Errorf("approved and marked: approved %v, expires %v, swept from %v; want approved, its own lifetime, kept while the mark lasts", rec.RetryApproved, rec.Expires, rec.SweepAt())
	}

	// Held back for a model: its own call, and a write in its place.
	at := t0.Add(3 * minute)
	own := b
	own.Replace, own.Owner, own.Now, own.NoticeHold = nil, "resend", at, 10*time.Second
	res := mustClaim(t, s, own)
	if res.Claimed || res.Blocked == nil || res.Blocked.Key != b.Key {
		t.Fatalf("its own call for a model: %+v; want held back by its own record", res)
	}
	if rec, err := other.Get(bg, b.Key); err != nil || !rec.NoticeUntil.Equal(at.Add(10*time.Second)) || !rec.RetryApproved {
		t.Errorf("after its model was told: mark %v approved %v, %v; want the mark ending NoticeHold later, still approved", rec.NoticeUntil, rec.RetryApproved, err)
	}
	in := slotted(tool, scope, at.Add(time.Second))
	in.Replace = &storekit.Replacement{Key: b.Key, Attempts: 1, Outcome: []byte(`{"replaced":true}`), TTL: time.Hour}
	in.NoticeHold = 10 * time.Second
	blockedBy(t, "a write in its place for a model, within NoticeHold", mustClaim(t, other, in), b.Key, agenttool.Unknown)
	in.Now = at.Add(11 * time.Second)
	granted(t, "a write in its place once NoticeHold has passed", mustClaim(t, other, in))
	if rec, err := s.Get(bg, b.Key); err != nil || rec.State != agenttool.Failed || rec.ReplacedBy != in.Key || rec.StandsInForApplied() ||
		!rec.NoticeUntil.Equal(at.Add(10*time.Second)) || rec.StandsFor != tool+"/applied" {
		t.Errorf("the marked action after a write went on in its place: %v replaced by %q, mark %v standing for %q, %v; want failed, replaced, its mark and its name kept",
			rec.State, rec.ReplacedBy, rec.NoticeUntil, rec.StandsFor, err)
	}
}

// testSlotBesideEveryOpenAction: every open action of a tool and session
// beside its session's slot holds back the session's new writes, not only
// the one a write goes on in place of: with one unknown and another
// running, a write that replaces the unknown one is held back by the
// running one.
func testSlotBesideEveryOpenAction(t *testing.T, h Harness) {
	s := h.Open(t)
	other := twinOf(t, h, s)
	tool, session := newSlot()
	beside := func(now time.Time) storekit.ClaimRequest {
		req := claimReq(newKey(), now)
		req.Tool, req.Session = tool, session
		return req
	}
	u := beside(t0)
	e := granted(t, "an action of the other setting", mustClaim(t, s, u))
	if err := s.Finish(bg, finish(u.Key, e.Record.Token, agenttool.Unknown, t0)); err != nil {
		t.Fatal(err)
	}
	running := beside(t0.Add(minute / 2))
	granted(t, "another action of the other setting, running", mustClaim(t, other, running))
	take := u
	take.Now, take.TakeOver, take.Owner = t0.Add(minute), true, u.Owner+"-fence"
	held := granted(t, "the fence's takeover of the unknown one", mustClaim(t, other, take))
	c := slotted(tool, session, t0.Add(minute))
	c.Replace = &storekit.Replacement{Key: u.Key, Token: held.Record.Token, Outcome: []byte(`{"replaced":true}`), TTL: time.Hour}
	blockedBy(t, "a write in place of the unknown action while another runs beside the slot", mustClaim(t, s, c), running.Key, agenttool.Pending)
}

// testSlotBesideAfterANotice: a slot's holder whose notice has ended, and
// an open action beside the slot: a write that goes on in place of that
// action clears the holder's notice, so that one record holds the slot.
func testSlotBesideAfterANotice(t *testing.T, h Harness) {
	s := h.Open(t)
	other := twinOf(t, h, s)
	tool2, session2 := newSlot()
	hreq := slotted(tool2, session2, t0)
	hold := granted(t, "the slot's holder", mustClaim(t, s, hreq))
	done := finish(hreq.Key, hold.Record.Token, agenttool.Succeeded, t0)
	done.NoticeUntil = t0.Add(10 * time.Second)
	if err := s.Finish(bg, done); err != nil {
		t.Fatal(err)
	}
	u2 := claimReq(newKey(), t0)
	u2.Tool, u2.Session = tool2, session2
	e2 := granted(t, "an action of the other setting", mustClaim(t, s, u2))
	if err := s.Finish(bg, finish(u2.Key, e2.Record.Token, agenttool.Unknown, t0)); err != nil {
		t.Fatal(err)
	}
	blockedBy(t, "a write of the session after the holder's notice, beside an unknown action", mustClaim(t, other, slotted(tool2, session2, t0.Add(minute))), u2.Key, agenttool.Unknown)
	take2 := u2
	take2.Now, take2.TakeOver, take2.Owner = t0.Add(minute), true, u2.Owner+"-fence"
	held2 := granted(t, "the fence's takeover", mustClaim(t, other, take2))
	c2 := slotted(tool2, session2, t0.Add(minute))
	c2.Replace = &storekit.Replacement{Key: u2.Key, Token: held2.Record.Token, Outcome: []byte(`{"replaced":true}`), TTL: time.Hour}
	res, err := s.Claim(bg, c2)
	if err != nil || !res.Claimed {
		t.Fatalf("the write in place of the action beside the slot, after the holder's notice: %+v, %v; want granted", res, err)
	}
	if rec, err := other.Get(bg, hreq.Key); err != nil || rec.HoldsSlot() {
		t.Errorf("the slot's former holder after a write entered the slot: %+v, %v; want its notice cleared", rec, err)
	}
	blockedBy(t, "a write beside the replacement", mustClaim(t, other, slotted(tool2, session2, t0.Add(minute))), c2.Key, agenttool.Pending)
}

func testSlotApprovedRetry(t *testing.T, h Harness) {
	s := h.Open(t)
	other := twinOf(t, h, s)
	tool, scope := newSlot()
	e := granted(t, "the earlier action", mustClaim(t, s, slotted(tool, scope, t0)))
	key := e.Record.Key
	approve := finish(key, e.Record.Token, agenttool.Unknown, t0)
	approve.RetryApproved = true
	if err := s.Finish(bg, approve); err != nil {
		t.Fatal(err)
	}
	// Approved for one more attempt: it holds the slot until that attempt runs.
	r := slotted(tool, scope, t0.Add(time.Second))
	blockedBy(t, "a new write beside an approved retry", mustClaim(t, other, r), key, agenttool.Unknown)
	r.Replace = &storekit.Replacement{Key: key, Attempts: 2, Outcome: []byte(`{}`), TTL: time.Hour}
	blockedBy(t, "a replacement bound to another outcome", mustClaim(t, other, r), key, agenttool.Unknown)
	r.Replace.Attempts = 1
	granted(t, "a new write that takes the approved attempt", mustClaim(t, other, r))
	// The approval is consumed: the earlier action's own resend replays.
	resend := claimReq(key, t0.Add(2*time.Second))
	resend.Tool, resend.Session, resend.FenceScope = tool, scope, scope
	res := mustClaim(t, s, resend)
	if res.Claimed || res.Record.State != agenttool.Failed || res.Record.ReplacedBy != r.Key {
		t.Errorf("the earlier action's resend: %+v; want its failed record, replaced by %s", res, r.Key)
	}

	// The other order: the approved action's own resend runs, and holds
	// the slot as it did.
	tool2, scope2 := newSlot()
	e2 := granted(t, "another earlier action", mustClaim(t, s, slotted(tool2, scope2, t0)))
	approve = finish(e2.Record.Key, e2.Record.Token, agenttool.Unknown, t0)
	approve.RetryApproved = true
	if err := s.Finish(bg, approve); err != nil {
		t.Fatal(err)
	}
	resend = claimReq(e2.Record.Key, t0.Add(time.Second))
	resend.Tool, resend.Session, resend.FenceScope = tool2, scope2, scope2
	granted(t, "the approved retry", mustClaim(t, other, resend))
	blockedBy(t, "a new write beside the approved retry", mustClaim(t, s, slotted(tool2, scope2, t0.Add(time.Second))), e2.Record.Key, agenttool.Pending)
}

func testSlotNotice(t *testing.T, h Harness) {
	s := h.Open(t)
	other := twinOf(t, h, s)
	tool, scope := newSlot()
	e := granted(t, "an action", mustClaim(t, s, slotted(tool, scope, t0)))
	done := finish(e.Record.Key, e.Record.Token, agenttool.Succeeded, t0)
	done.NoticeUntil = t0.Add(10 * time.Second)
	if err := s.Finish(bg, done); err != nil {
		t.Fatal(err)
	}
	blockedBy(t, "a new write within the notice", mustClaim(t, other, slotted(tool, scope, t0.Add(5*time.Second))), e.Record.Key, agenttool.Succeeded)
	if h.Reopen != nil {
		s = h.Reopen(t, s)
		other = twinOf(t, h, s)
		blockedBy(t, "a new write within the notice, after a restart", mustClaim(t, s, slotted(tool, scope, t0.Add(5*time.Second))), e.Record.Key, agenttool.Succeeded)
	}
	granted(t, "a new write after the notice", mustClaim(t, other, slotted(tool, scope, t0.Add(10*time.Second))))
	if rec, _ := s.Get(bg, e.Record.Key); !rec.NoticeUntil.IsZero() || rec.State != agenttool.Succeeded {
		t.Errorf("the noticed record after its notice was cleared: %+v", rec)
	}
	// A success without a notice does not hold the slot.
	tool2, scope2 := newSlot()
	e2 := granted(t, "an action", mustClaim(t, s, slotted(tool2, scope2, t0)))
	if err := s.Finish(bg, finish(e2.Record.Key, e2.Record.Token, agenttool.Succeeded, t0)); err != nil {
		t.Fatal(err)
	}
	granted(t, "a new write after a plain success", mustClaim(t, other, slotted(tool2, scope2, t0)))
}

// testSlotDefinition: the definition a claim was made under is kept with
// its record, through its outcome, and shown to a claim it holds back.
func testSlotDefinition(t *testing.T, h Harness) {
	s := h.Open(t)
	other := twinOf(t, h, s)
	tool, scope := newSlot()
	req := slotted(tool, scope, t0)
	req.Definition = 0x1234_5678_9abc_def1
	e := granted(t, "an action", mustClaim(t, s, req))
	if e.Record.Definition != req.Definition {
		t.Errorf("the claim's record has definition %x; want %x", e.Record.Definition, req.Definition)
	}
	if err := s.Finish(bg, finish(e.Record.Key, e.Record.Token, agenttool.Unknown, t0)); err != nil {
		t.Fatal(err)
	}
	if rec, err := other.Get(bg, e.Record.Key); err != nil || rec.Definition != req.Definition {
		t.Errorf("the unknown record: definition %x, %v; want %x", rec.Definition, err, req.Definition)
	}
	next := slotted(tool, scope, t0.Add(time.Second))
	next.Definition = 0x0fed_cba9_8765_4321
	res := mustClaim(t, other, next)
	if res.Blocked == nil || res.Blocked.Definition != req.Definition {
		t.Errorf("a claim under another definition: %+v; want it held back by the unknown action, whose definition it sees", res)
	}
}

// testSlotNoticeTold: a notice that told no call (a settlement by a
// sweeper or an operator, kept for hours) ends NoticeHold after a call
// that answers a model is told of it — held back by it, or answered with
// the noticed action itself; a claim that answers no model tells nothing.
func testSlotNoticeTold(t *testing.T, h Harness) {
	s := h.Open(t)
	other := twinOf(t, h, s)
	for _, how := range []string{"held back", "answered with the action"} {
		tool, scope := newSlot()
		e := granted(t, "an action", mustClaim(t, s, slotted(tool, scope, t0)))
		done := finish(e.Record.Key, e.Record.Token, agenttool.Succeeded, t0)
		done.NoticeUntil, done.TTL = t0.Add(6*time.Hour), 24*time.Hour
		if err := s.Finish(bg, done); err != nil {
			t.Fatal(err)
		}
		// A takeover's claim answers no model: the notice stands.
		blockedBy(t, "a claim that tells nothing", mustClaim(t, other, slotted(tool, scope, t0.Add(time.Minute))), e.Record.Key, agenttool.Succeeded)
		if rec, _ := s.Get(bg, e.Record.Key); !rec.NoticeUntil.Equal(t0.Add(6 * time.Hour)) {
			t.Fatalf("%s: a claim that tells nothing changed the notice to %v", how, rec.NoticeUntil)
		}
		at := t0.Add(time.Hour)
		var tell storekit.ClaimRequest
		switch how {
		case "held back":
			tell = slotted(tool, scope, at)
			tell.NoticeHold = 10 * time.Second
			blockedBy(t, "a new write told of the notice", mustClaim(t, other, tell), e.Record.Key, agenttool.Succeeded)
		case "answered with the action":
			tell = claimReq(e.Record.Key, at)
			tell.Tool, tell.Session, tell.FenceScope, tell.NoticeHold = tool, scope, scope, 10*time.Second
			res := mustClaim(t, other, tell)
			if res.Claimed || res.Record.State != agenttool.Succeeded {
				t.Fatalf("the noticed action asked again: %+v; want it replayed", res)
			}
		}
		if rec, _ := s.Get(bg, e.Record.Key); !rec.NoticeUntil.Equal(at.Add(10 * time.Second)) {
			t.Errorf("%s: the notice ends at %v; want NoticeHold after the call was told (%v)", how, rec.NoticeUntil, at.Add(10*time.Second))
		}
		blockedBy(t, "another write of the same turn", mustClaim(t, s, slotted(tool, scope, at.Add(5*time.Second))), e.Record.Key, agenttool.Succeeded)
		granted(t, "a new write once NoticeHold has passed", mustClaim(t, s, slotted(tool, scope, at.Add(10*time.Second))))
	}
}

// testSlotNoticeKeepsWhatItHeldBack: a new write that answers a model,
// held back by the notice of an action proved applied (the slot's holder
// within its notice, or a mark of its session), is kept under its own
// key — closed as failed, standing for that action, with the claim's
// KeyTTL — in the claim's transaction: asked for again, word for word,
// after the notice has ended, on another replica or after a restart, it
// is found so and never granted. So is a claim whose call found done the
// action that held it back (ClaimRequest.FoundApplied), whatever holds
// the slot by then. A claim that answers no model, or gives no KeyTTL, or
// that an unknown action holds back, writes nothing.
func testSlotNoticeKeepsWhatItHeldBack(t *testing.T, h Harness) {
	s := h.Open(t)
	other := twinOf(t, h, s)
	const hold, ttl = 10 * time.Second, time.Hour
	told := func(tool string, scope agenttool.Digest, now time.Time) storekit.ClaimRequest {
		req := slotted(tool, scope, now)
		req.NoticeHold, req.KeyTTL = hold, ttl
		return req
	}
	tool, scope := newSlot()
	x := granted(t, "an action", mustClaim(t, s, slotted(tool, scope, t0)))
	done := finish(x.Record.Key, x.Record.Token, agenttool.Succeeded, t0)
	done.NoticeUntil = t0.Add(6 * time.Hour) // settled untold
	if err := s.Finish(bg, done); err != nil {
		t.Fatal(err)
	}
	at := t0.Add(time.Minute)
	k := told(tool, scope, at)
	res := mustClaim(t, other, k)
	blockedBy(t, "a copy that answers a model", res, x.Record.Key, agenttool.Succeeded)
	heldBack := func(what string, rec agenttool.Record) {
		t.Helper()
		if !rec.HeldBack() || rec.Key != k.Key || rec.StandsFor != x.Record.Key || rec.State != agenttool.Failed ||
			rec.HoldsSlot() || rec.Beside() || rec.Token != 0 || !rec.Expires.Equal(at.Add(ttl)) || rec.Fingerprint != k.Fingerprint || rec.Session != k.Session {
			t.Errorf("%s: %+v; want %s closed as failed, standing for %s, holding no slot, for %v", what, rec, k.Key, x.Record.Key, ttl)
		}
	}
	heldBack("the claim's answer", res.Record)
	rec, err := s.Get(bg, k.Key)
	if err != nil {
		t.Fatalf("the copy held back has no record: %v", err)
	}
	heldBack("its record", rec)
	if n, _ := s.Get(bg, x.Record.Key); !n.NoticeUntil.Equal(at.Add(hold)) {
		t.Errorf("the notice ends at %v; want NoticeHold after the copy was told (%v)", n.NoticeUntil, at.Add(hold))
	}
	// A person's claim, and one with no lifetime to give: held back, kept nowhere.
	for what, req := range map[string]storekit.ClaimRequest{"a claim that answers no model": slotted(tool, scope, at.Add(time.Second)),
		"a claim with no KeyTTL": func() storekit.ClaimRequest { r := told(tool, scope, at.Add(time.Second)); r.KeyTTL = 0; return r }()} {
		blockedBy(t, what, mustClaim(t, other, req), x.Record.Key, agenttool.Succeeded)
		if _, err := s.Get(bg, req.Key); !errors.Is(err, agenttool.ErrNotFound) {
			t.Errorf("%s, held back: its key has a record (%v); want none", what, err)
		}
	}
	// A mark leaves it as it is: its answer named the action done.
	if m, err := s.Mark(bg, storekit.MarkRequest{Key: k.Key, Session: k.Session, Until: storekit.UntilTold, For: "another", Now: at}); err != nil || !m.HeldBack() || m.StandsFor != x.Record.Key {
		t.Errorf("a mark of the copy held back: %+v, %v; want it unchanged", m, err)
	}
	if h.Reopen != nil {
		s = h.Reopen(t, s)
		other = twinOf(t, h, s)
	}
	// The notice has ended: a new write goes; the copy asked for again is
	// found as it was, on either replica, and not granted.
	after := at.Add(hold + time.Minute)
	for i, st := range []agenttool.Store{s, other} {
		again := k
		again.Now, again.Owner = after.Add(time.Duration(i)*time.Second), fmt.Sprintf("again-%d", i)
		res := mustClaim(t, st, again)
		if res.Claimed || res.Blocked != nil {
			t.Fatalf("the copy held back, asked for again after the notice: %+v; want its record, not granted", res)
		}
		heldBack("asked for again", res.Record)
	}
	// Another input under its key is refused as any other key's would be.
	otherInput := k
	otherInput.Now, otherInput.Fingerprint = after, inputB
	if res := mustClaim(t, other, otherInput); res.Conflict != storekit.OtherInput {
		t.Errorf("the held-back key with another input: %+v; want OtherInput", res)
	}
	granted(t, "a new write after the notice", mustClaim(t, other, told(tool, scope, after)))
	// Past its lifetime it is swept, and its key is new again.
	if rec, _ := s.Get(bg, k.Key); !rec.Sweepable(at.Add(ttl)) || rec.Sweepable(at.Add(ttl-time.Second)) {
		t.Errorf("the copy held back is sweepable at %v; want at the end of its lifetime, %v", rec.SweepAt(), at.Add(ttl))
	}

	// Held back by the mark of its session: it stands for the action the mark names.
	tool2, scope2 := newSlot()
	m := granted(t, "an action", mustClaim(t, s, slotted(tool2, scope2, t0)))
	if _, err := s.Mark(bg, storekit.MarkRequest{Key: m.Record.Key, Session: scope2, Until: storekit.UntilTold, For: tool2 + "/applied", Now: t0}); err != nil {
		t.Fatal(err)
	}
	k2 := told(tool2, scope2, at)
	res = mustClaim(t, other, k2)
	blockedBy(t, "a new write of the marked action's session", res, m.Record.Key, agenttool.Pending)
	if rec, err := s.Get(bg, k2.Key); err != nil || !rec.HeldBack() || rec.StandsFor != tool2+"/applied" {
		t.Errorf("the write a mark held back: %+v, %v; want it kept, standing for the action the mark names", rec, err)
	}

	// A claim whose call found done the action that held it back
	// (FoundApplied) is kept held back whatever holds the slot by then:
	// nothing (the notice ended), or another write running.
	for _, by := range []string{"the ended notice", "another write", "nothing"} {
		tool4, scope4 := newSlot()
		y := granted(t, "an action", mustClaim(t, s, slotted(tool4, scope4, t0)))
		fin := finish(y.Record.Key, y.Record.Token, agenttool.Succeeded, t0)
		fin.NoticeUntil = t0.Add(time.Second)
		if err := s.Finish(bg, fin); err != nil {
			t.Fatal(err)
		}
		late := t0.Add(time.Minute)
		if by != "the ended notice" {
			g := granted(t, "another write after the notice", mustClaim(t, s, told(tool4, scope4, late)))
			if by == "nothing" { // it is done: the slot is free
				if err := s.Finish(bg, finish(g.Record.Key, g.Record.Token, agenttool.Succeeded, late)); err != nil {
					t.Fatal(err)
				}
			}
		}
		k4 := told(tool4, scope4, late.Add(time.Second))
		k4.FoundApplied = y.Record.Key
		res := mustClaim(t, other, k4)
		if res.Claimed || res.Blocked == nil || res.Blocked.Key != k4.Key || !res.Blocked.HeldBack() || res.Record.Key != k4.Key {
			t.Fatalf("held back by what its call found done, the slot holding %s: %+v; want not granted, its own record kept held back", by, res)
		}
		if rec, err := s.Get(bg, k4.Key); err != nil || !rec.HeldBack() || rec.StandsFor != y.Record.Key {
			t.Errorf("the slot holding %s: its record %+v, %v; want held back, standing for %s", by, rec, err, y.Record.Key)
		}
	}

	// Held back by an action whose outcome is unknown: nothing is kept.
	tool3, scope3 := newSlot()
	u := granted(t, "an action", mustClaim(t, s, slotted(tool3, scope3, t0)))
	if err := s.Finish(bg, finish(u.Record.Key, u.Record.Token, agenttool.Unknown, t0)); err != nil {
		t.Fatal(err)
	}
	k3 := told(tool3, scope3, at)
	blockedBy(t, "a new write while the slot's action is unknown", mustClaim(t, other, k3), u.Record.Key, agenttool.Unknown)
	if _, err := s.Get(bg, k3.Key); !errors.Is(err, agenttool.ErrNotFound) {
		t.Errorf("a write an unknown action held back has a record (%v); want none: it runs once that action is settled", err)
	}
}

// testSlotConcurrentWrites: many new writes of one scope at once, split
// between two instances of the store where it has them: exactly one is
// granted.
func testSlotConcurrentWrites(t *testing.T, h Harness) {
	s := h.Open(t)
	other := twinOf(t, h, s)
	for round := range 5 {
		tool, scope := newSlot()
		var wg sync.WaitGroup
		var mu sync.Mutex
		var won []string
		for i := range 32 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				st := s
				if i%2 == 1 {
					st = other
				}
				res, err := st.Claim(bg, slotted(tool, scope, t0))
				if err != nil {
					t.Error(err)
					return
				}
				if res.Claimed {
					mu.Lock()
					won = append(won, res.Record.Key)
					mu.Unlock()
				} else if res.Blocked == nil {
					t.Errorf("a refused claim names no occupant: %+v", res)
				}
			}()
		}
		wg.Wait()
		if len(won) != 1 {
			t.Errorf("round %d: %d of 32 concurrent writes of one scope were granted (%v); want 1", round, len(won), won)
		}
	}
}

// twinOf returns a second instance of the store over the same data (a
// replica), or s itself.
func twinOf(t *testing.T, h Harness, s agenttool.Store) agenttool.Store {
	if h.Twin == nil {
		return s
	}
	return h.Twin(t, s)
}

// testSlotReplacedActionTakenBackUnfenced: an action replaced in its slot,
// whose replacement failed, is taken back by a claim without a fence
// scope (a tool whose fence was turned off meanwhile, or an operator
// settling it aside) while a later write holds the slot: it is claimed
// outside the slot, the later write keeps the slot untouched, and one
// record at most holds the slot.
func testSlotReplacedActionTakenBackUnfenced(t *testing.T, h Harness) {
	s := h.Open(t)
	other := twinOf(t, h, s)
	tool, scope := newSlot()
	x := slotted(tool, scope, t0)
	e := granted(t, "the earlier action", mustClaim(t, s, x))
	if err := s.Finish(bg, finish(x.Key, e.Record.Token, agenttool.Unknown, t0)); err != nil {
		t.Fatal(err)
	}
	take := x
	take.Now, take.TakeOver, take.Owner = t0.Add(minute), true, x.Owner+"-fence"
	held := granted(t, "the fence's takeover", mustClaim(t, other, take))
	r := slotted(tool, scope, t0.Add(minute))
	r.Replace = &storekit.Replacement{Key: x.Key, Token: held.Record.Token, Outcome: []byte(`{"replaced":true}`), TTL: time.Hour}
	rr := granted(t, "the write in place of the earlier action", mustClaim(t, s, r))
	if err := s.Finish(bg, finish(r.Key, rr.Record.Token, agenttool.Failed, t0.Add(minute))); err != nil {
		t.Fatal(err)
	}
	z := slotted(tool, scope, t0.Add(2*minute))
	granted(t, "a later write of the slot", mustClaim(t, other, z))

	// The fence is turned off; the earlier action is asked for again and
	// goes on in place of its failed replacement.
	back := claimReq(x.Key, t0.Add(3*minute))
	back.Tool, back.Session = tool, scope
	back.Replace = &storekit.Replacement{Key: r.Key, Attempts: 1, Outcome: []byte(`{"replaced":true}`), TTL: time.Hour}
	res, err := s.Claim(bg, back)
	if err != nil {
		t.Fatalf("the earlier action taken back without a fence: %v", err)
	}
	if !res.Claimed || res.Blocked != nil || res.Record.FenceScope != (agenttool.Digest{}) || res.Record.Replaces != "" {
		t.Errorf("the earlier action taken back without a fence: %+v; want claimed outside any slot, closing nothing", res)
	}
	if rec, err := other.Get(bg, z.Key); err != nil || rec.State != agenttool.Pending || !rec.HoldsSlot() {
		t.Errorf("the slot's holder after the earlier action was taken back outside it: %+v, %v; want it pending in the slot", rec, err)
	}
	var holders []string
	for _, k := range []string{x.Key, r.Key, z.Key} {
		rec, err := other.Get(bg, k)
		if err != nil {
			t.Fatal(err)
		}
		if rec.HoldsSlot() && rec.Slot() == (storekit.Slot{Tool: tool, Scope: scope}) {
			holders = append(holders, k)
		}
	}
	if len(holders) > 1 {
		t.Errorf("after the earlier action was taken back without a fence (%+v): %d records hold one slot (%v); want at most one", res, len(holders), holders)
	}
}

// testSlotBesideNoticeAndReplaced: two actions beside a session's slot,
// one settled applied whose notice has ended and one unknown: a write in
// place of the unknown one clears the other's notice and closes the
// unknown one, and then alone holds the slot.
func testSlotBesideNoticeAndReplaced(t *testing.T, h Harness) {
	s := h.Open(t)
	other := twinOf(t, h, s)
	tool, session := newSlot()
	beside := func() storekit.ClaimRequest {
		req := claimReq(newKey(), t0)
		req.Tool, req.Session = tool, session
		return req
	}
	n := beside()
	en := granted(t, "an action of the other setting", mustClaim(t, s, n))
	done := finish(n.Key, en.Record.Token, agenttool.Succeeded, t0)
	done.NoticeUntil = t0.Add(10 * time.Second)
	if err := s.Finish(bg, done); err != nil {
		t.Fatal(err)
	}
	u := beside()
	eu := granted(t, "another action of the other setting", mustClaim(t, other, u))
	if err := other.Finish(bg, finish(u.Key, eu.Record.Token, agenttool.Unknown, t0)); err != nil {
		t.Fatal(err)
	}
	take := u
	take.Now, take.TakeOver, take.Owner = t0.Add(minute), true, u.Owner+"-fence"
	held := granted(t, "the fence's takeover", mustClaim(t, s, take))
	c := slotted(tool, session, t0.Add(minute))
	c.Replace = &storekit.Replacement{Key: u.Key, Token: held.Record.Token, Outcome: []byte(`{"replaced":true}`), TTL: time.Hour}
	granted(t, "the write in place of the unknown action", mustClaim(t, other, c))
	if rec, err := s.Get(bg, n.Key); err != nil || rec.Beside() || rec.State != agenttool.Succeeded {
		t.Errorf("the action whose notice ended: %+v, %v; want succeeded, its notice cleared", rec, err)
	}
	if rec, err := s.Get(bg, u.Key); err != nil || rec.State != agenttool.Failed || rec.ReplacedBy != c.Key {
		t.Errorf("the replaced action: %+v, %v; want failed, replaced by %s", rec, err, c.Key)
	}
	blockedBy(t, "a write beside the replacement", mustClaim(t, s, slotted(tool, session, t0.Add(2*minute))), c.Key, agenttool.Pending)
}

// testSlotBesideOwnKey: an action beside its session's slot does not hold
// back its own key asked for again under the session's fence: taken over,
// it moves into the slot, and holds the session's other writes back there;
// an action beside the slot that is released holds nothing back.
func testSlotBesideOwnKey(t *testing.T, h Harness) {
	s := h.Open(t)
	other := twinOf(t, h, s)
	tool, session := newSlot()
	r := claimReq(newKey(), t0)
	r.Tool, r.Session = tool, session
	er := granted(t, "an action of the other setting", mustClaim(t, s, r))
	if err := s.Release(bg, r.Key, er.Record.Token); err != nil {
		t.Fatal(err)
	}
	c := slotted(tool, session, t0)
	ec := granted(t, "a write of the session after the action beside it was released", mustClaim(t, other, c))
	if err := other.Release(bg, c.Key, ec.Record.Token); err != nil {
		t.Fatal(err)
	}

	x := claimReq(newKey(), t0)
	x.Tool, x.Session = tool, session
	ex := granted(t, "an action of the other setting", mustClaim(t, s, x))
	if err := s.Finish(bg, finish(x.Key, ex.Record.Token, agenttool.Unknown, t0)); err != nil {
		t.Fatal(err)
	}
	again := x
	again.Now, again.TakeOver, again.FenceScope, again.Owner = t0.Add(minute), true, session, x.Owner+"-again"
	res := mustClaim(t, other, again)
	if !res.Claimed || !res.TookOver || res.Record.FenceScope != session {
		t.Fatalf("the action asked for again under the session's fence: %+v; want taken over, in the session's slot", res)
	}
	if rec, err := s.Get(bg, x.Key); err != nil || rec.Beside() || !rec.HoldsSlot() {
		t.Errorf("the action after it moved into the slot: %+v, %v; want holding the slot, not beside it", rec, err)
	}
	blockedBy(t, "a write of the session beside the action that moved into the slot", mustClaim(t, s, slotted(tool, session, t0.Add(minute))), x.Key, agenttool.Pending)
}

// testMark: a mark (storekit.DecideMark) is set on a write of the applied
// action's conversation whoever holds it — here a live call, on one
// replica, marked from another — and everything written after keeps it,
// and the name of the action it stands for: the holder's unknown outcome,
// an approval (its own lifetime, kept while the mark lasts), a takeover,
// a replacement; and a refused write. A succeeded write, another
// conversation's, one past its lifetime or a missing key are left as they
// are; a succeeded outcome clears the mark. A mark with no end or no name, and an outcome other
// than succeeded with a notice, are refused.
func testMark(t *testing.T, h Harness) {
	s := h.Open(t)
	other := twinOf(t, h, s)
	tool, scope := newSlot()
	applied := tool + "/applied"
	mark := func(st agenttool.Store, key string, session agenttool.Digest, now time.Time) agenttool.Record {
		t.Helper()
		rec, err := st.Mark(bg, storekit.MarkRequest{Key: key, Session: session, Until: storekit.UntilTold, For: applied, Now: now})
		if err != nil {
			t.Fatalf("Mark(%s): %v", key, err)
		}
		return rec
	}
	names := func(what string, rec agenttool.Record) {
		t.Helper()
		if rec.StandsFor != applied {
			t.Errorf("%s: stands for %q; want %q, the action the mark names", what, rec.StandsFor, applied)
		}
	}
	get := func(key string) agenttool.Record {
		t.Helper()
		rec, err := s.Get(bg, key)
		if err != nil {
			t.Fatal(err)
		}
		return rec
	}

	// A live call holds B: marked from the other replica all the same.
	b := slotted(tool, scope, t0)
	held := mustClaim(t, s, b)
	if rec := mark(other, b.Key, scope, t0); rec.State != agenttool.Pending || !rec.NoticeUntil.Equal(storekit.UntilTold) || rec.Token != held.Record.Token {
		t.Fatalf("marked while held: %v mark %v token %d; want pending, marked until told, still held by %d", rec.State, rec.NoticeUntil, rec.Token, held.Record.Token)
	} else {
		names("marked while held", rec)
	}
	f := finish(b.Key, held.Record.Token, agenttool.Unknown, t0.Add(time.Second))
	f.NoticeUntil = t0.Add(time.Hour)
	if err := s.Finish(bg, f); !errors.Is(err, agenttool.ErrInvalidRequest) {
		t.Errorf("an unknown outcome with a notice: %v; want ErrInvalidRequest (only Mark marks an open record)", err)
	}
	f = finish(b.Key, held.Record.Token, agenttool.Unknown, t0.Add(time.Second))
	if err := s.Finish(bg, f); err != nil {
		t.Fatalf("the holder's outcome after the mark: %v; want written (a mark is not a takeover)", err)
	}
	if rec := get(b.Key); rec.State != agenttool.Unknown || !rec.StandsInForApplied() || !rec.NoticeUntil.Equal(storekit.UntilTold) || !rec.HoldsSlot() {
		t.Fatalf("its outcome unknown: %v mark %v, holds the slot %v; want the mark kept, in its slot", rec.State, rec.NoticeUntil, rec.HoldsSlot())
	} else {
		names("its outcome unknown", rec)
	}
	// Taken over (a sweeper), then approved for one more attempt.
	take := b
	take.TakeOver, take.Owner, take.Now = true, "sweeper", t0.Add(2*time.Second)
	took := mustClaim(t, other, take)
	if !took.Claimed || !took.Record.NoticeUntil.Equal(storekit.UntilTold) {
		t.Fatalf("taken over: claimed %v, mark %v; want the mark kept", took.Claimed, took.Record.NoticeUntil)
	}
	names("taken over", took.Record)
	f = finish(b.Key, took.Record.Token, agenttool.Unknown, t0.Add(3*time.Second))
	f.RetryApproved = true
	if err := other.Finish(bg, f); err != nil {
		t.Fatal(err)
	}
	if rec := get(b.Key); !rec.RetryApproved || !rec.StandsInForApplied() || !rec.Expires.Equal(t0.Add(3*time.Second+time.Hour)) || !rec.SweepAt().Equal(storekit.UntilTold) {
		t.Fatalf("approved: approved %v, mark %v, expires %v, swept from %v; want its own lifetime, kept while the mark lasts", rec.RetryApproved, rec.NoticeUntil, rec.Expires, rec.SweepAt())
	} else {
		names("approved", rec)
	}
	if n, err := storekit.SweepAll(bg, s, t0.Add(48*time.Hour), 0, nil); err != nil || get(b.Key).State != agenttool.Unknown {
		t.Fatalf("a sweep two days later (%d deleted, %v) dropped the approved marked record", n, err)
	}

	// Marked once approved: kept while the mark lasts, its lifetime its own.
	c := slotted(tool, agenttool.Digest{0xc0, 1}, t0)
	cres := mustClaim(t, s, c)
	f = finish(c.Key, cres.Record.Token, agenttool.Unknown, t0)
	f.RetryApproved = true
	if err := s.Finish(bg, f); err != nil {
		t.Fatal(err)
	}
	if rec := mark(other, c.Key, c.Session, t0.Add(time.Minute)); !rec.StandsInForApplied() || !rec.Expires.Equal(t0.Add(time.Hour)) || !rec.SweepAt().Equal(storekit.UntilTold) {
		t.Errorf("approved, then marked: mark %v, expires %v, swept from %v; want its own lifetime, kept until told", rec.NoticeUntil, rec.Expires, rec.SweepAt())
	}
	if rec := get(c.Key); !rec.Expires.Equal(t0.Add(time.Hour)) || !rec.NoticeUntil.Equal(storekit.UntilTold) {
		t.Errorf("approved, then marked, read back: mark %v, expires %v", rec.NoticeUntil, rec.Expires)
	}

	// Closed as replaced: marked, and kept while the mark lasts.
	d := slotted(tool, agenttool.Digest{0xd0, 1}, t0)
	dres := mustClaim(t, s, d)
	f = finish(d.Key, dres.Record.Token, agenttool.Unknown, t0)
	f.RetryApproved = true
	if err := s.Finish(bg, f); err != nil {
		t.Fatal(err)
	}
	e := slotted(tool, d.Session, t0.Add(time.Second))
	e.Replace = &storekit.Replacement{Key: d.Key, Attempts: 1, Outcome: []byte(`{"replaced":true}`), TTL: time.Hour}
	if res := mustClaim(t, s, e); !res.Claimed || res.Record.Replaces != d.Key {
		t.Fatalf("the write in D's place: %+v", res)
	}
	if rec := mark(other, d.Key, d.Session, t0.Add(2*time.Second)); rec.State != agenttool.Failed || rec.ReplacedBy != e.Key || !rec.NoticeUntil.Equal(storekit.UntilTold) ||
		!rec.Expires.Equal(t0.Add(time.Second+time.Hour)) || !rec.SweepAt().Equal(storekit.UntilTold) {
		t.Errorf("replaced, then marked: %v by %q, mark %v, expires %v, swept from %v; want marked, its own lifetime, kept until told, naming E",
			rec.State, rec.ReplacedBy, rec.NoticeUntil, rec.Expires, rec.SweepAt())
	}
	names("replaced, then marked", get(d.Key))

	// Its approved attempt succeeds: settled, it stands in for nothing.
	// (Its notice is its own.)
	again := c
	again.Owner, again.Now = "approved-attempt", t0.Add(2*time.Minute)
	ares := granted(t, "the approved attempt of C, for no model", mustClaim(t, other, again))
	names("C's approved attempt", ares.Record)
	f = finish(c.Key, ares.Record.Token, agenttool.Succeeded, t0.Add(2*time.Minute))
	f.NoticeUntil = t0.Add(3 * time.Minute)
	if err := other.Finish(bg, f); err != nil {
		t.Fatal(err)
	}
	if rec := get(c.Key); rec.StandsFor != "" || rec.StandsInForApplied() || !rec.NoticeUntil.Equal(f.NoticeUntil) {
		t.Errorf("C succeeded: stands for %q, mark %v (stands in %v); want its own notice, standing for nothing", rec.StandsFor, rec.NoticeUntil, rec.StandsInForApplied())
	}

	// Left as they are.
	for _, tc := range []struct {
		what    string
		state   agenttool.State
		session agenttool.Digest
		at      time.Time
	}{
		{"succeeded", agenttool.Succeeded, agenttool.Digest{0xe0, 1}, t0},
		{"another conversation's", agenttool.Unknown, agenttool.Digest{0xe0, 3}, t0},
		{"past its lifetime", agenttool.Failed, agenttool.Digest{0xe0, 4}, t0.Add(2 * time.Hour)},
	} {
		r := slotted(tool, tc.session, t0)
		res := mustClaim(t, s, r)
		if err := s.Finish(bg, finish(r.Key, res.Record.Token, tc.state, t0)); err != nil {
			t.Fatal(err)
		}
		session := tc.session
		if tc.what == "another conversation's" {
			session = scope
		}
		before := get(r.Key)
		if rec := mark(other, r.Key, session, tc.at); !rec.NoticeUntil.Equal(before.NoticeUntil) || !rec.Expires.Equal(before.Expires) {
			t.Errorf("%s, marked: mark %v expires %v; want left as it was (mark %v, expires %v)", tc.what, rec.NoticeUntil, rec.Expires, before.NoticeUntil, before.Expires)
		}
		if rec := get(r.Key); !rec.NoticeUntil.Equal(before.NoticeUntil) || !rec.Expires.Equal(before.Expires) {
			t.Errorf("%s, marked, read back: mark %v expires %v; want left as it was", tc.what, rec.NoticeUntil, rec.Expires)
		}
	}
	// A refused write is marked as one closed as replaced is: its model
	// heard only that it did nothing.
	refused := slotted(tool, agenttool.Digest{0xe0, 2}, t0)
	rres := mustClaim(t, s, refused)
	if err := s.Finish(bg, finish(refused.Key, rres.Record.Token, agenttool.Failed, t0)); err != nil {
		t.Fatal(err)
	}
	if rec := mark(other, refused.Key, refused.Session, t0); rec.State != agenttool.Failed || !rec.NoticeUntil.Equal(storekit.UntilTold) || !rec.Beside() {
		t.Errorf("refused, then marked: %v, mark %v, beside its slot %v; want marked until told, beside its slot", rec.State, rec.NoticeUntil, rec.Beside())
	}
	names("refused, then marked", get(refused.Key))
	if _, err := s.Mark(bg, storekit.MarkRequest{Key: newKey(), Until: storekit.UntilTold, For: applied, Now: t0}); !errors.Is(err, agenttool.ErrNotFound) {
		t.Errorf("Mark of a missing key: %v; want ErrNotFound", err)
	}
	if _, err := s.Mark(bg, storekit.MarkRequest{Key: b.Key, Session: scope, For: applied, Now: t0}); !errors.Is(err, agenttool.ErrInvalidRequest) {
		t.Errorf("Mark with no end: %v; want ErrInvalidRequest", err)
	}
	if _, err := s.Mark(bg, storekit.MarkRequest{Key: b.Key, Session: scope, Until: storekit.UntilTold, Now: t0}); !errors.Is(err, agenttool.ErrInvalidRequest) {
		t.Errorf("Mark naming no action: %v; want ErrInvalidRequest", err)
	}
}

// testMarkClosedByAnotherConversation: under a principal's fence, a write
// closed as replaced by another conversation's, then marked, holds back
// its own conversation's next claim that answers a model — with the
// slot free, so a store's fast path for new keys finds it too — until its
// model is told, and NoticeHold passes; it holds back no other
// conversation's claim, nor one that answers no model.
func testMarkClosedByAnotherConversation(t *testing.T, h Harness) {
	s := h.Open(t)
	other := twinOf(t, h, s)
	tool, _ := newSlot()
	s9, s10 := agenttool.Digest{0x59, 9}, agenttool.Digest{0x59, 10}
	principal := func(session agenttool.Digest, now time.Time, hold time.Duration) storekit.ClaimRequest {
		req := claimReq(newKey(), now)
		req.Tool, req.Session, req.FenceScope, req.NoticeHold = tool, session, alice, hold
		return req
	}
	settle := func(st agenttool.Store, res storekit.ClaimResult, state agenttool.State, at time.Time, approve bool) {
		t.Helper()
		f := finish(res.Record.Key, res.Record.Token, state, at)
		f.RetryApproved = approve
		if err := st.Finish(bg, f); err != nil {
			t.Fatal(err)
		}
	}
	c := principal(s9, t0, 10*time.Second)
	settle(s, granted(t, "C, conversation 9", mustClaim(t, s, c)), agenttool.Unknown, t0, true)
	x := principal(s10, t0.Add(time.Second), 10*time.Second)
	x.Replace = &storekit.Replacement{Key: c.Key, Attempts: 1, Outcome: []byte(`{"replaced":true}`), TTL: time.Hour}
	settle(other, granted(t, "X, conversation 10, in C's place", mustClaim(t, other, x)), agenttool.Failed, t0.Add(2*time.Second), false)
	if rec, err := other.Mark(bg, storekit.MarkRequest{Key: c.Key, Session: s9, Until: storekit.UntilTold, For: tool + "/applied", Now: t0.Add(3 * time.Second)}); err != nil || !rec.AwaitsNotice(t0.Add(3*time.Second)) {
		t.Fatalf("C marked: %v awaits notice %v, %v", rec.State, rec.AwaitsNotice(t0.Add(3*time.Second)), err)
	}
	at := t0.Add(time.Minute)
	settle(s, granted(t, "conversation 10's write, the slot free", mustClaim(t, s, principal(s10, at, 10*time.Second))), agenttool.Succeeded, at, false)
	settle(other, granted(t, "conversation 9's write for no model", mustClaim(t, other, principal(s9, at, 0))), agenttool.Failed, at, false)
	d := principal(s9, at, 10*time.Second)
	blockedBy(t, "conversation 9's write for a model, the slot free", mustClaim(t, s, d), c.Key, agenttool.Failed)
	if rec, err := other.Get(bg, c.Key); err != nil || !rec.NoticeUntil.Equal(at.Add(10*time.Second)) {
		t.Errorf("C after its model was told: mark %v, %v; want ending NoticeHold later", rec.NoticeUntil, err)
	}
	d.Now = at.Add(5 * time.Second)
	blockedBy(t, "conversation 9's write within NoticeHold", mustClaim(t, other, d), c.Key, agenttool.Failed)
	d.Now = at.Add(11 * time.Second)
	granted(t, "conversation 9's write once NoticeHold has passed", mustClaim(t, s, d))
	life := t0.Add(time.Second + time.Hour) // closed as replaced at t0+1s, for an hour
	if rec, err := other.Get(bg, c.Key); err != nil || !rec.NoticeUntil.IsZero() || rec.StandsFor != "" || rec.Beside() || !rec.Expires.Equal(life) {
		t.Errorf("C once its model heard and NoticeHold passed: mark %v for %q, beside %v, expires %v, %v; want the mark ended, C kept for its lifetime (a late answer about it may come), until %v",
			rec.NoticeUntil, rec.StandsFor, rec.Beside(), rec.Expires, err, life)
	}
	// Kept for its lifetime, and no longer: the mark it carried until
	// 2262 while its model had not heard kept it then, not after.
	if _, err := storekit.SweepAll(bg, s, life.Add(-time.Second), 0, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Get(bg, c.Key); err != nil {
		t.Errorf("C swept within its lifetime: %v", err)
	}
	if _, err := storekit.SweepAll(bg, other, life.Add(time.Hour), 0, nil); err != nil { // (a store may keep it a while after its lifetime)
		t.Fatal(err)
	}
	if rec, err := s.Get(bg, c.Key); !errors.Is(err, agenttool.ErrNotFound) {
		t.Errorf("C once its lifetime ended, its mark ended before: %v (mark %v, expires %v, swept from %v), %v; want swept", rec.State, rec.NoticeUntil, rec.Expires, rec.SweepAt(), err)
	}
}

// testMarkKeepsTheRecordForItsLifetime: a marked record is kept while its
// mark lasts — until its model is told, however long that takes, and
// NoticeHold after — and then for what is left of its own lifetime, no
// longer: the mark does not become the record's lifetime.
func testMarkKeepsTheRecordForItsLifetime(t *testing.T, h Harness) {
	s := h.Open(t)
	other := twinOf(t, h, s)
	tool, scope := newSlot()
	c := slotted(tool, scope, t0)
	res := granted(t, "C", mustClaim(t, s, c))
	f := finish(c.Key, res.Record.Token, agenttool.Unknown, t0)
	f.RetryApproved = true // for an hour (finish's lifetime)
	if err := s.Finish(bg, f); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Mark(bg, storekit.MarkRequest{Key: c.Key, Session: c.Session, Until: storekit.UntilTold, For: tool + "/applied", Now: t0.Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	kept := func(what string, st agenttool.Store, at time.Time) {
		t.Helper()
		if _, err := storekit.SweepAll(bg, st, at, 0, nil); err != nil {
			t.Fatal(err)
		}
		if rec, err := s.Get(bg, c.Key); err != nil || !rec.RetryApproved || rec.StandsFor != tool+"/applied" {
			t.Fatalf("%s: %v approved %v standing for %q, %v; want kept, approved and marked", what, rec.State, rec.RetryApproved, rec.StandsFor, err)
		}
	}
	kept("a sweep a day after its lifetime, its model not told", s, t0.Add(25*time.Hour))
	told := c
	told.Owner, told.Now, told.NoticeHold = "resend", t0.Add(26*time.Hour), 10*time.Second
	blockedBy(t, "its own call for a model, a day later", mustClaim(t, other, told), c.Key, agenttool.Unknown)
	kept("a sweep within NoticeHold of its model being told", other, told.Now.Add(9*time.Second))
	if _, err := storekit.SweepAll(bg, s, told.Now.Add(10*time.Second), 0, nil); err != nil {
		t.Fatal(err)
	}
	if rec, err := other.Get(bg, c.Key); !errors.Is(err, agenttool.ErrNotFound) {
		t.Errorf("a sweep once NoticeHold passed, its lifetime over: %v (mark %v, expires %v, swept from %v), %v; want swept", rec.State, rec.NoticeUntil, rec.Expires, rec.SweepAt(), err)
	}
}

// testMarkClosedUnderTheSessionFenceToldWithItsConversation: under the
// default fence, by session, a write closed as replaced by its own
// conversation's next and then marked is beside its session's slot: the
// claim held back and told by the mark of the write in its place tells it
// too: a model is told of an action once.
func testMarkClosedUnderTheSessionFenceToldWithItsConversation(t *testing.T, h Harness) {
	s := h.Open(t)
	other := twinOf(t, h, s)
	tool, session := newSlot()
	applied := tool + "/applied"
	b := slotted(tool, session, t0)
	bres := granted(t, "B", mustClaim(t, s, b))
	f := finish(b.Key, bres.Record.Token, agenttool.Unknown, t0)
	f.RetryApproved = true // found not applied
	if err := s.Finish(bg, f); err != nil {
		t.Fatal(err)
	}
	c := slotted(tool, session, t0.Add(time.Second))
	c.Replace = &storekit.Replacement{Key: b.Key, Attempts: 1, Outcome: []byte(`{"replaced":true}`), TTL: time.Hour}
	cres := granted(t, "C, in B's place", mustClaim(t, other, c))
	if err := other.Finish(bg, finish(c.Key, cres.Record.Token, agenttool.Unknown, t0.Add(2*time.Second))); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{b.Key, c.Key} {
		if _, err := s.Mark(bg, storekit.MarkRequest{Key: key, Session: session, Until: storekit.UntilTold, For: applied, Now: t0.Add(3 * time.Second)}); err != nil {
			t.Fatal(err)
		}
	}
	at := t0.Add(time.Minute)
	again := c
	again.Replace, again.Owner, again.Now, again.NoticeHold = nil, "resend", at, 10*time.Second
	blockedBy(t, "C sent again for its model", mustClaim(t, s, again), c.Key, agenttool.Unknown)
	for _, key := range []string{b.Key, c.Key} {
		if rec, err := other.Get(bg, key); err != nil || !rec.NoticeUntil.Equal(at.Add(10*time.Second)) || rec.StandsFor != applied {
			t.Errorf("%s after its model was told of %s: mark %v for %q, %v; want ending NoticeHold later (told once, with C)", key, applied, rec.NoticeUntil, rec.StandsFor, err)
		}
	}
}

// testMarkKeptByAFailedAttempt: a write marked while its attempt runs
// (it stands in for an action proved applied meanwhile) keeps its mark
// when the attempt fails — its model, told that this write did nothing,
// has not heard of the action that was done — and holds back its
// conversation's next write for a model, in the slot it left free, until
// that model is told. A mark ends by being told, never by a settlement.
func testMarkKeptByAFailedAttempt(t *testing.T, h Harness) {
	s := h.Open(t)
	other := twinOf(t, h, s)
	tool, session := newSlot()
	applied := tool + "/applied"
	b := slotted(tool, session, t0)
	held := granted(t, "B", mustClaim(t, s, b))
	if _, err := other.Mark(bg, storekit.MarkRequest{Key: b.Key, Session: session, Until: storekit.UntilTold, For: applied, Now: t0.Add(time.Second)}); err != nil {
		t.Fatal(err)
	}
	if err := s.Finish(bg, finish(b.Key, held.Record.Token, agenttool.Failed, t0.Add(2*time.Second))); err != nil {
		t.Fatal(err)
	}
	if rec, err := other.Get(bg, b.Key); err != nil || rec.State != agenttool.Failed || !rec.NoticeUntil.Equal(storekit.UntilTold) || rec.StandsFor != applied {
		t.Fatalf("B, failed after it was marked: %v, mark %v for %q, %v; want failed, its mark kept", rec.State, rec.NoticeUntil, rec.StandsFor, err)
	}
	at := t0.Add(7 * time.Hour)
	c := slotted(tool, session, at)
	c.NoticeHold = 10 * time.Second
	blockedBy(t, "the conversation's next write for a model, hours later", mustClaim(t, other, c), b.Key, agenttool.Failed)
	if rec, err := s.Get(bg, b.Key); err != nil || !rec.NoticeUntil.Equal(at.Add(10*time.Second)) {
		t.Errorf("B once its model was told: mark %v, %v; want ending NoticeHold later", rec.NoticeUntil, err)
	}
	granted(t, "a write for no model", mustClaim(t, s, slotted(tool, session, at)))
}
