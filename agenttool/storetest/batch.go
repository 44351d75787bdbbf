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

// Group commit: concurrent claims and outcomes on one store may share round
// trips and commits (boltstore's and pgstore's group commits); each caller
// still gets its own answer, its own token and its own error, and a batch
// that goes wrong loses nothing and lies to no one.

// RunGroupCommit runs the suite's checks of writes that share batches (Run
// runs them too): 64 concurrent claims and outcomes, and, where the harness
// can gather a batch, batches with faults injected.
func RunGroupCommit(t *testing.T, h Harness) {
	t.Run("ConcurrentClaimsAndOutcomes", func(t *testing.T) { testConcurrentClaimsAndOutcomes(t, h.Open(t)) })
	t.Run("GatheredBatches", func(t *testing.T) {
		if h.Gather == nil {
			t.Skip("the harness cannot gather this store's writes into a batch")
		}
		for _, f := range []Fault{NoFault, RowRefused, LostBeforeCommit, LostAfterCommit} {
			t.Run("Claims"+f.String(), func(t *testing.T) { testGatheredClaims(t, h, f) })
			t.Run("Outcomes"+f.String(), func(t *testing.T) { testGatheredOutcomes(t, h, f) })
		}
	})
}

// Writes names a kind of write a store gathers into shared batches.
type Writes int

const (
	// Claims are claims of keys (Store.Claim).
	Claims Writes = iota + 1
	// Outcomes are outcomes recorded (Store.Finish).
	Outcomes
)

func (w Writes) String() string {
	if w == Claims {
		return "claims"
	}
	return "outcomes"
}

// Fault is what goes wrong with a gathered batch (Harness.Gather).
type Fault int

const (
	// NoFault: the batch is written.
	NoFault Fault = iota
	// RowRefused: the database refuses one row of the batch, and with it
	// the batch's whole statement.
	RowRefused
	// LostBeforeCommit: the connection carrying the batch is lost before
	// the batch reaches the database.
	LostBeforeCommit
	// LostAfterCommit: the batch commits, and the connection is lost before
	// its reply is read.
	LostAfterCommit
)

func (f Fault) String() string {
	return [...]string{"NoFault", "RowRefused", "LostBeforeCommit", "LostAfterCommit"}[f]
}

// testConcurrentClaimsAndOutcomes: 64 callers claim at once, then record
// their outcomes at once, in rounds. In each group of four, two claim one
// key (one is granted, the other finds the first's pending record) and two
// claim distinct keys of one slot (one is granted, the other is blocked by
// it). Every granted claim has a token of its own, the one its record
// holds; every outcome is recorded under its token; an outcome under a
// token that does not hold its record is fenced, whatever batch it shares.
func testConcurrentClaimsAndOutcomes(t *testing.T, s agenttool.Store) {
	const callers = 64
	tokens := map[uint64]string{}
	for round := range 3 {
		reqs := make([]storekit.ClaimRequest, callers)
		for g := 0; g < callers; g += 4 {
			tool, scope := newSlot()
			own, ownScope := newSlot()
			reqs[g] = slotted(own, ownScope, t0)
			reqs[g+3] = reqs[g]
			reqs[g+3].Owner += "-twin"
			reqs[g+1] = slotted(tool, scope, t0)
			reqs[g+2] = slotted(tool, scope, t0)
		}
		res := make([]storekit.ClaimResult, callers)
		errs := make([]error, callers)
		together(callers, func(i int) { res[i], errs[i] = s.Claim(bg, reqs[i]) })
		for i, err := range errs {
			if err != nil {
				t.Fatalf("round %d: claim %d (%s): %v", round, i, reqs[i].Key, err)
			}
		}
		for g := 0; g < callers; g += 4 {
			// One key, two claims.
			a, b := res[g], res[g+3]
			if a.Claimed == b.Claimed {
				t.Fatalf("round %d: two claims of %s: granted %v and %v; want exactly one", round, reqs[g].Key, a.Claimed, b.Claimed)
			}
			if b.Claimed {
				a, b = b, a
			}
			if b.Record.State != agenttool.Pending || b.Record.Token != a.Record.Token || b.Blocked != nil {
				t.Errorf("round %d: the refused claim of %s saw %+v; want the granted one's pending record (token %d)", round, reqs[g].Key, b, a.Record.Token)
			}
			// One slot, two keys.
			c, d := res[g+1], res[g+2]
			if c.Claimed == d.Claimed {
				t.Fatalf("round %d: two writes of one slot: granted %v and %v; want exactly one", round, c.Claimed, d.Claimed)
			}
			if d.Claimed {
				c, d = d, c
			}
			blockedBy(t, fmt.Sprintf("round %d: the second write of a slot", round), d, c.Record.Key, agenttool.Pending)
		}
		// The outcomes, at once: each granted claim's under its token, and
		// for each refused claim of a key, one under a token that does not
		// hold it.
		type fin struct {
			req     storekit.FinishRequest
			fenced  bool
			granted storekit.ClaimResult
		}
		var fins []fin
		for i, r := range res {
			if r.Claimed {
				if other, dup := tokens[r.Record.Token]; dup {
					t.Fatalf("token %d granted to %s and to %s", r.Record.Token, other, r.Record.Key)
				}
				tokens[r.Record.Token] = r.Record.Key
				f := finish(r.Record.Key, r.Record.Token, agenttool.Succeeded, t0.Add(time.Second))
				f.Outcome = []byte(fmt.Sprintf(`{"caller":%d,"round":%d}`, i, round))
				fins = append(fins, fin{req: f, granted: r})
			} else if r.Blocked == nil {
				fins = append(fins, fin{req: finish(r.Record.Key, r.Record.Token+1<<40, agenttool.Failed, t0.Add(time.Second)), fenced: true})
			}
		}
		ferrs := make([]error, len(fins))
		together(len(fins), func(i int) { ferrs[i] = s.Finish(bg, fins[i].req) })
		for i, f := range fins {
			switch {
			case f.fenced && !errors.Is(ferrs[i], storekit.ErrFenced):
				t.Errorf("round %d: an outcome of %s under a token that does not hold it: %v; want ErrFenced", round, f.req.Key, ferrs[i])
			case !f.fenced && ferrs[i] != nil:
				t.Errorf("round %d: the outcome of %s: %v", round, f.req.Key, ferrs[i])
			case !f.fenced:
				rec, err := s.Get(bg, f.req.Key)
				if err != nil || rec.State != agenttool.Succeeded || rec.Token != f.granted.Record.Token || string(rec.Outcome) != string(f.req.Outcome) ||
					rec.Owner != "" || !rec.Expires.Equal(t0.Add(time.Second+time.Hour)) {
					t.Errorf("round %d: %s after its outcome: %+v, %v; want succeeded under token %d with outcome %s",
						round, f.req.Key, rec, err, f.granted.Record.Token, f.req.Outcome)
				}
			}
		}
	}
}

// together runs fn(0) … fn(n-1) on n goroutines released at once, and
// waits for them.
func together(n int, fn func(i int)) {
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			fn(i)
		})
	}
	close(start)
	wg.Wait()
}

// testGatheredClaims: nine claims written as one batch (Harness.Gather),
// with f inflicted on it: four of new keys in slots of their own, two of
// new keys in one slot, one of a key already settled, one of a new key in a
// slot another record holds, one of a key another owner holds pending.
// Each gets its own answer, as it would alone.
func testGatheredClaims(t *testing.T, h Harness, f Fault) {
	s := h.Open(t)
	settled := mustClaim(t, s, claimReq(newKey(), t0))
	if err := s.Finish(bg, finish(settled.Record.Key, settled.Record.Token, agenttool.Succeeded, t0)); err != nil {
		t.Fatal(err)
	}
	heldTool, heldScope := newSlot()
	holder := granted(t, "the slot's holder", mustClaim(t, s, slotted(heldTool, heldScope, t0)))
	pairTool, pairScope := newSlot()
	var reqs []storekit.ClaimRequest
	for range 4 {
		tool, scope := newSlot()
		reqs = append(reqs, slotted(tool, scope, t0))
	}
	reqs = append(reqs, slotted(pairTool, pairScope, t0), slotted(pairTool, pairScope, t0))
	again := claimReq(settled.Record.Key, t0.Add(time.Second))
	again.Owner += "-again"
	reqs = append(reqs, again, slotted(heldTool, heldScope, t0))
	// A key another owner holds pending, its lease live: after a lost
	// reply, its pending record is not this claim's.
	busy := granted(t, "the busy key's holder", mustClaim(t, s, claimReq(newKey(), t0)))
	busyAgain := claimReq(busy.Record.Key, t0.Add(time.Second))
	busyAgain.Owner += "-again"
	reqs = append(reqs, busyAgain)

	h.Gather(t, s, Claims, len(reqs), f)
	res := make([]storekit.ClaimResult, len(reqs))
	errs := make([]error, len(reqs))
	together(len(reqs), func(i int) { res[i], errs[i] = s.Claim(bg, reqs[i]) })
	for i, err := range errs {
		if err != nil {
			t.Fatalf("claim %d of the batch (%s): %v; the database is up: each caller gets its own answer", i, reqs[i].Key, err)
		}
	}
	seen := map[uint64]bool{settled.Record.Token: true, holder.Record.Token: true, busy.Record.Token: true}
	grantedOne := func(i int) {
		t.Helper()
		r := granted(t, fmt.Sprintf("claim %d of the batch", i), res[i])
		rec, err := s.Get(bg, reqs[i].Key)
		if err != nil || rec.State != agenttool.Pending || rec.Token != r.Record.Token || rec.Owner != reqs[i].Owner || seen[r.Record.Token] {
			t.Errorf("claim %d of the batch was granted token %d; its record is %+v, %v; want it pending under that token, which no one else holds",
				i, r.Record.Token, rec, err)
		}
		seen[r.Record.Token] = true
	}
	for i := range 4 {
		grantedOne(i)
	}
	first, second := 4, 5
	if !res[first].Claimed {
		first, second = second, first
	}
	grantedOne(first)
	blockedBy(t, "the second claim of one slot in the batch", res[second], reqs[first].Key, agenttool.Pending)
	if _, err := s.Get(bg, reqs[second].Key); !errors.Is(err, agenttool.ErrNotFound) {
		t.Errorf("the blocked claim of the batch left a record: %v", err)
	}
	if r := res[6]; r.Claimed || r.Record.State != agenttool.Succeeded || r.Record.Token != settled.Record.Token {
		t.Errorf("a claim of a settled key in the batch: %+v; want its settled record for replay", r)
	}
	blockedBy(t, "a claim of a held slot in the batch", res[7], holder.Record.Key, agenttool.Pending)
	if r := res[8]; r.Claimed || r.Record.State != agenttool.Pending || r.Record.Token != busy.Record.Token {
		t.Errorf("a claim of a key another owner holds, in the batch: %+v; want not granted, the holder's pending record", r)
	}
}

// testGatheredOutcomes: eight outcomes written as one batch
// (Harness.Gather), with f inflicted on it: succeeded, failed, unknown
// (with a resolution), approved for a retry, succeeded with a notice, and
// one under a token that does not hold its record. Each is recorded, or
// fenced, as it would be alone.
func testGatheredOutcomes(t *testing.T, h Harness, f Fault) {
	s := h.Open(t)
	now := t0.Add(time.Second)
	var reqs []storekit.FinishRequest
	for i := range 8 {
		res := mustClaim(t, s, claimReq(newKey(), t0))
		req := finish(res.Record.Key, res.Record.Token, agenttool.Succeeded, now)
		req.Outcome = []byte(fmt.Sprintf(`{"outcome":%d}`, i))
		switch i {
		case 1:
			req.State = agenttool.Failed
		case 2:
			req.State, req.HeldUntil = agenttool.Unknown, t0.Add(30*time.Second)
			req.Resolution = &storekit.Resolution{Verdict: "pending", By: "reconciler", Why: "the destination does not know yet", At: now}
		case 3:
			req.State, req.RetryApproved = agenttool.Unknown, true
		case 4:
			req.NoticeUntil = now.Add(time.Minute)
		case 7:
			req.Token += 1 << 40
		}
		reqs = append(reqs, req)
	}
	h.Gather(t, s, Outcomes, len(reqs), f)
	errs := make([]error, len(reqs))
	together(len(reqs), func(i int) { errs[i] = s.Finish(bg, reqs[i]) })
	for i, req := range reqs {
		rec, err := s.Get(bg, req.Key)
		if err != nil {
			t.Fatal(err)
		}
		if i == 7 {
			if !errors.Is(errs[i], storekit.ErrFenced) || rec.State != agenttool.Pending {
				t.Errorf("an outcome under a token that does not hold its record: %v, and the record is %v; want ErrFenced, and still pending", errs[i], rec.State)
			}
			continue
		}
		if errs[i] != nil {
			t.Errorf("outcome %d of the batch (%s): %v; the database is up: each caller gets its own answer", i, req.Key, errs[i])
			continue
		}
		want := req.State
		if rec.State != want || rec.Token != req.Token || string(rec.Outcome) != string(req.Outcome) || rec.RetryApproved != req.RetryApproved ||
			!rec.NoticeUntil.Equal(req.NoticeUntil) || (req.State == agenttool.Unknown && !rec.LeaseExpiry.Equal(req.HeldUntil)) ||
			(req.Resolution != nil && (rec.Resolution == nil || rec.Resolution.Why != req.Resolution.Why)) {
			t.Errorf("outcome %d of the batch: the record is %+v; want %v under token %d with outcome %s", i, rec, want, req.Token, req.Outcome)
		}
	}
}
