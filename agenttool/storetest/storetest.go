// Package storetest is the conformance suite every agenttool.Store passes,
// in the manner of testing/fstest. A store runs it from its own tests:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, storetest.Harness{
//			Open: func(t *testing.T) agenttool.Store { return mystore.New(...) },
//			Kill: func(t *testing.T, s agenttool.Store) { s.(*mystore.Store).Close() },
//		})
//	}
//
// The suite checks atomic claims under heavy concurrency, claims and
// outcomes sharing batches (with faults injected into a batch, where the
// harness can gather one), fencing, lease
// expiry and takeover, every state transition, replay, fingerprint and
// principal conflicts, sweeping that never drops unknown records, sweeper
// passes that check unknown outcomes beside (never behind) their deletions,
// deletion steps that grow with a backlog, listing of
// what awaits reconciliation, context cancellation, and behaviour when the
// backing database is gone.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/storekit"
)

// Harness tells the suite how to make and break a store.
type Harness struct {
	// Open returns a new, empty store. The harness closes it when the test
	// ends (t.Cleanup).
	Open func(t *testing.T) agenttool.Store
	// Kill makes the store's backing database unreachable, as a crash or an
	// outage would. If nil, the outage test is skipped.
	Kill func(t *testing.T, s agenttool.Store)
	// Reopen closes s and opens the same data again, as a restart would.
	// If nil, the restart checks are skipped.
	Reopen func(t *testing.T, s agenttool.Store) agenttool.Store
	// Twin opens a second instance of the store over the same data, as
	// another replica would (two pools on one PostgreSQL database); the
	// harness closes it when the test ends. If nil, the checks that a
	// promise holds across replicas run on s alone.
	Twin func(t *testing.T, s agenttool.Store) agenttool.Store
	// Gather, if set, makes s write the next n writes of kind w together,
	// as one batch of its group commit (as concurrent callers' writes are
	// under load), and inflicts f on that batch. The database stays up:
	// every caller in the batch must still get its own answer, token and
	// error. If nil, the checks of faults in batches are skipped (the
	// checks of concurrent claims and outcomes run on every store).
	Gather func(t *testing.T, s agenttool.Store, w Writes, n int, f Fault)
}

var (
	t0       = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	alice    = agenttool.Digest{0xa1}
	bob      = agenttool.Digest{0xb0}
	inputA   = agenttool.Digest{0x01}
	inputB   = agenttool.Digest{0x02}
	minute   = time.Minute
	bg       = context.Background()
	keyCount atomic.Int64
)

// newKey returns a key not used before in this process; keys sort in the
// order they were made (a test that sweeps oldest first may rely on it).
func newKey() string { return fmt.Sprintf("conformance/%09d", keyCount.Add(1)) }

func claimReq(key string, now time.Time) storekit.ClaimRequest {
	return storekit.ClaimRequest{Key: key, Tool: "conformance", Principal: alice, Fingerprint: inputA,
		Owner: "owner-" + key, Now: now, Lease: minute}
}

func mustClaim(t *testing.T, s agenttool.Store, req storekit.ClaimRequest) storekit.ClaimResult {
	t.Helper()
	res, err := s.Claim(bg, req)
	if err != nil {
		t.Fatalf("Claim(%s): %v", req.Key, err)
	}
	return res
}

func finish(key string, token uint64, state agenttool.State, now time.Time) storekit.FinishRequest {
	return storekit.FinishRequest{Key: key, Token: token, State: state, Attempts: 1,
		Outcome: []byte(`{"outcome":"` + state.String() + `"}`), Now: now, TTL: time.Hour}
}

// Run runs the suite.
func Run(t *testing.T, h Harness) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s agenttool.Store)
	}{
		{"ClaimCreatesPending", testClaimCreatesPending},
		{"AnInvalidClaimWritesNothing", testInvalidClaim},
		{"ConcurrentClaimsOneWinner", testConcurrentClaims},
		{"TokensAreUnique", testTokensUnique},
		{"FinishStates", testFinishStates},
		{"FencingAfterTakeover", testFencing},
		{"ExpiredLeaseWithoutTakeoverBecomesUnknown", testExpiredBecomesUnknown},
		{"UnknownTakeover", testUnknownTakeover},
		{"TakeoverOnlyUnderTheActionsDefinition", testTakeoverOnlyUnderItsDefinition},
		{"AnAttemptIsRecordedAsItIsSent", testAttemptRecordedAsSent},
		{"RetryApprovalIsConsumedOnce", testRetryApproval},
		{"FingerprintMismatch", testFingerprintMismatch},
		{"PrincipalIsolation", testPrincipalIsolation},
		{"ToolIsolation", testToolIsolation},
		{"ReleaseFreesTheKey", testRelease},
		{"RenewExtendsTheLease", testRenew},
		{"SweepNeverDropsUnknown", testSweep},
		{"ExpiredRecordIsClaimedAfresh", testExpiredClaimedAfresh},
		{"ListUnknown", testListUnknown},
		{"LabelStaysWithTheRecord", testLabel},
		{"InputIsKeptWhileUnknown", testInput},
		{"CountsByToolAndState", testCount},
		{"SweepInSteps", testSweepSteps},
		{"SweepStepsGrowWithBacklog", testSweepStepsGrowWithBacklog},
		{"SweepChecksBesideDeletions", testSweepChecksBesideDeletions},
		{"ImportSettledRecords", testImport},
		{"ImportGivesASlotOneHolder", testImportSlotOneHolder},
		{"ExportEveryRecordInPages", testExport},
		{"CancelledContext", testCancelled},
		{"InvalidRequests", testInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.fn(t, h.Open(t)) })
	}
	t.Run("OpenRecordsOfAScope", func(t *testing.T) { testScope(t, h) })
	t.Run("SlotOneWriteAtATime", func(t *testing.T) { testSlotOneWriteAtATime(t, h) })
	t.Run("SlotHeldByUnknownAndDeadHolders", func(t *testing.T) { testSlotHeldByUnknownAndDeadHolders(t, h) })
	t.Run("SlotReplacement", func(t *testing.T) { testSlotReplacement(t, h) })
	t.Run("SlotBeside", func(t *testing.T) { testSlotBeside(t, h) })
	t.Run("SlotBesideOfPrincipal", func(t *testing.T) { testSlotBesideOfPrincipal(t, h) })
	t.Run("SlotStandsInForApplied", func(t *testing.T) { testSlotStandsInForApplied(t, h) })
	t.Run("MarkWhoeverHoldsTheRecord", func(t *testing.T) { testMark(t, h) })
	t.Run("MarkClosedByAnotherConversationHoldsBackItsOwn", func(t *testing.T) { testMarkClosedByAnotherConversation(t, h) })
	t.Run("MarkKeepsTheRecordForItsLifetime", func(t *testing.T) { testMarkKeepsTheRecordForItsLifetime(t, h) })
	t.Run("MarkKeptByAFailedAttempt", func(t *testing.T) { testMarkKeptByAFailedAttempt(t, h) })
	t.Run("MarkClosedUnderTheSessionFenceToldWithItsConversation", func(t *testing.T) { testMarkClosedUnderTheSessionFenceToldWithItsConversation(t, h) })
	t.Run("SlotBesideTellsItsOwnSessionFirst", func(t *testing.T) { testSlotBesideTellsItsOwnSessionFirst(t, h) })
	t.Run("SlotBesideEveryOpenAction", func(t *testing.T) { testSlotBesideEveryOpenAction(t, h) })
	t.Run("SlotBesideAfterANotice", func(t *testing.T) { testSlotBesideAfterANotice(t, h) })
	t.Run("SlotReplacedActionTakenBackUnfenced", func(t *testing.T) { testSlotReplacedActionTakenBackUnfenced(t, h) })
	t.Run("SlotBesideNoticeAndReplaced", func(t *testing.T) { testSlotBesideNoticeAndReplaced(t, h) })
	t.Run("SlotBesideOwnKey", func(t *testing.T) { testSlotBesideOwnKey(t, h) })
	t.Run("SlotApprovedRetry", func(t *testing.T) { testSlotApprovedRetry(t, h) })
	t.Run("SlotNotice", func(t *testing.T) { testSlotNotice(t, h) })
	t.Run("SlotNoticeTold", func(t *testing.T) { testSlotNoticeTold(t, h) })
	t.Run("SlotNoticeKeepsWhatItHeldBack", func(t *testing.T) { testSlotNoticeKeepsWhatItHeldBack(t, h) })
	t.Run("SlotDefinition", func(t *testing.T) { testSlotDefinition(t, h) })
	t.Run("SlotConcurrentWrites", func(t *testing.T) { testSlotConcurrentWrites(t, h) })
	RunGroupCommit(t, h)
	t.Run("DatabaseGone", func(t *testing.T) {
		if h.Kill == nil {
			t.Skip("the harness cannot kill this store")
		}
		testDatabaseGone(t, h)
	})
}

func testClaimCreatesPending(t *testing.T, s agenttool.Store) {
	key := newKey()
	res := mustClaim(t, s, claimReq(key, t0))
	if !res.Claimed || res.TookOver || res.Record.State != agenttool.Pending || res.Record.Token == 0 {
		t.Fatalf("first claim: %+v", res)
	}
	rec, err := s.Get(bg, key)
	if err != nil {
		t.Fatal(err)
	}
	if rec.State != agenttool.Pending || rec.Token != res.Record.Token || rec.Principal != alice || rec.Fingerprint != inputA ||
		!rec.LeaseExpiry.Equal(t0.Add(minute)) || rec.Owner != "owner-"+key || rec.Tool != "conformance" || !rec.Created.Equal(t0) {
		t.Errorf("stored record %+v", rec)
	}
	again := mustClaim(t, s, claimReq(key, t0.Add(time.Second)))
	if again.Claimed || again.Record.State != agenttool.Pending || again.Record.Token != res.Record.Token {
		t.Errorf("second claim during a live lease: %+v", again)
	}
	if _, err := s.Get(bg, newKey()); !errors.Is(err, agenttool.ErrNotFound) {
		t.Errorf("Get of a missing key: %v, want ErrNotFound", err)
	}
}

// A claim no store can decide — a lease that is not positive, a
// replacement with no lifetime — is refused with ErrInvalidRequest,
// whatever the key holds, and writes nothing: the key is then claimed as
// if it had never been asked for.
func testInvalidClaim(t *testing.T, s agenttool.Store) {
	key := newKey()
	noLease := claimReq(key, t0)
	noLease.Lease = 0
	noLife := claimReq(key, t0)
	noLife.Replace = &storekit.Replacement{Key: newKey()}
	for name, req := range map[string]storekit.ClaimRequest{"no lease": noLease, "a replacement with no lifetime": noLife} {
		if res, err := s.Claim(bg, req); !errors.Is(err, agenttool.ErrInvalidRequest) || res.Claimed {
			t.Errorf("a claim with %s: %+v, %v; want ErrInvalidRequest", name, res, err)
		}
	}
	if _, err := s.Get(bg, key); !errors.Is(err, agenttool.ErrNotFound) {
		t.Errorf("after invalid claims, Get: %v; want ErrNotFound", err)
	}
	if res := mustClaim(t, s, claimReq(key, t0)); !res.Claimed || res.Record.Attempts != 0 {
		t.Errorf("the claim after them: %+v", res)
	}
	if res, err := s.Claim(bg, noLease); !errors.Is(err, agenttool.ErrInvalidRequest) || res.Claimed {
		t.Errorf("a claim with no lease of a key that is held: %+v, %v; want ErrInvalidRequest", res, err)
	}
}

func testConcurrentClaims(t *testing.T, s agenttool.Store) {
	key := newKey()
	const n = 64
	var wins atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			req := claimReq(key, t0)
			req.Owner = fmt.Sprintf("g%d", i)
			res, err := s.Claim(bg, req)
			if err != nil {
				errs <- err
				return
			}
			if res.Claimed {
				wins.Add(1)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("concurrent Claim: %v", err)
	}
	if wins.Load() != 1 {
		t.Fatalf("%d of %d concurrent claims won, want exactly 1", wins.Load(), n)
	}
}

func testTokensUnique(t *testing.T, s agenttool.Store) {
	seen := map[uint64]bool{}
	key := newKey()
	for i := range 5 {
		res := mustClaim(t, s, claimReq(key, t0.Add(time.Duration(i)*2*minute)))
		if !res.Claimed {
			t.Fatalf("claim %d after its lease expired was refused: %+v", i, res)
		}
		if seen[res.Record.Token] {
			t.Fatalf("token %d handed out twice", res.Record.Token)
		}
		seen[res.Record.Token] = true
		if err := s.Release(bg, key, res.Record.Token); err != nil {
			t.Fatal(err)
		}
	}
}

func testFinishStates(t *testing.T, s agenttool.Store) {
	for _, state := range []agenttool.State{agenttool.Succeeded, agenttool.Failed, agenttool.Unknown} {
		key := newKey()
		res := mustClaim(t, s, claimReq(key, t0))
		if err := s.Finish(bg, finish(key, res.Record.Token, state, t0.Add(time.Second))); err != nil {
			t.Fatalf("Finish %v: %v", state, err)
		}
		rec, err := s.Get(bg, key)
		if err != nil {
			t.Fatal(err)
		}
		if rec.State != state || string(rec.Outcome) != `{"outcome":"`+state.String()+`"}` || rec.Attempts != 1 || rec.Owner != "" {
			t.Errorf("after Finish %v: %+v", state, rec)
		}
		wantExpiry := state != agenttool.Unknown
		if rec.Expires.IsZero() == wantExpiry {
			t.Errorf("%v record expires at %v", state, rec.Expires)
		}
		if err := s.Finish(bg, finish(key, res.Record.Token, agenttool.Succeeded, t0)); !errors.Is(err, storekit.ErrFenced) {
			t.Errorf("second Finish of a %v record: %v, want ErrFenced", state, err)
		}
		// A final record is returned for replay; an unknown one is returned too.
		again := mustClaim(t, s, claimReq(key, t0.Add(2*time.Second)))
		if again.Claimed || again.Record.State != state || string(again.Record.Outcome) != string(rec.Outcome) {
			t.Errorf("claim of a %v record: %+v", state, again)
		}
	}
}

func testFencing(t *testing.T, s agenttool.Store) {
	key := newKey()
	old := mustClaim(t, s, claimReq(key, t0))
	req := claimReq(key, t0.Add(2*minute))
	req.TakeOver, req.Owner = true, "new-owner"
	cur := mustClaim(t, s, req)
	if !cur.Claimed || !cur.TookOver || cur.Record.Token == old.Record.Token {
		t.Fatalf("takeover of an expired lease: %+v", cur)
	}
	if cur.Record.Attempts != 1 {
		t.Errorf("takeover of a dead holder's claim counts %d attempts, want its 1", cur.Record.Attempts)
	}
	if err := s.Finish(bg, finish(key, old.Record.Token, agenttool.Succeeded, t0)); !errors.Is(err, storekit.ErrFenced) {
		t.Errorf("old holder's Finish: %v, want ErrFenced", err)
	}
	if err := s.Release(bg, key, old.Record.Token); !errors.Is(err, storekit.ErrFenced) {
		t.Errorf("old holder's Release: %v, want ErrFenced", err)
	}
	if err := s.Renew(bg, storekit.RenewRequest{Key: key, Token: old.Record.Token, Until: t0.Add(time.Hour), Now: t0}); !errors.Is(err, storekit.ErrFenced) {
		t.Errorf("old holder's Renew: %v, want ErrFenced", err)
	}
	rec, _ := s.Get(bg, key)
	if rec.State != agenttool.Pending || rec.Token != cur.Record.Token || rec.Owner != "new-owner" {
		t.Errorf("record after the old holder's attempts: %+v", rec)
	}
	if err := s.Finish(bg, finish(key, cur.Record.Token, agenttool.Succeeded, t0.Add(3*minute))); err != nil {
		t.Errorf("new holder's Finish: %v", err)
	}
}

func testExpiredBecomesUnknown(t *testing.T, s agenttool.Store) {
	key := newKey()
	old := mustClaim(t, s, claimReq(key, t0))
	res := mustClaim(t, s, claimReq(key, t0.Add(minute))) // exactly at expiry: expired
	if res.Claimed || res.Record.State != agenttool.Unknown {
		t.Fatalf("claim after a lease expired, without takeover: %+v; want the record turned unknown", res)
	}
	rec, _ := s.Get(bg, key)
	if rec.State != agenttool.Unknown || !rec.Expires.IsZero() {
		t.Errorf("stored: %+v", rec)
	}
	if err := s.Finish(bg, finish(key, old.Record.Token, agenttool.Succeeded, t0)); !errors.Is(err, storekit.ErrFenced) {
		t.Errorf("dead holder's Finish after its record turned unknown: %v, want ErrFenced", err)
	}
	// The dead holder's lease end stays with the record, through a takeover
	// and a write back as unknown: every later takeover learns until when
	// that holder's attempt may have been in flight.
	lapsed := t0.Add(minute)
	req := claimReq(key, t0.Add(2*minute))
	req.TakeOver = true
	took := mustClaim(t, s, req)
	if !took.TookOver || !took.HeldUntil.Equal(lapsed) {
		t.Fatalf("takeover of a lapsed lease: %+v; want HeldUntil %v", took, lapsed)
	}
	back := finish(key, took.Record.Token, agenttool.Unknown, t0.Add(2*minute))
	back.HeldUntil = took.HeldUntil
	if err := s.Finish(bg, back); err != nil {
		t.Fatal(err)
	}
	req.Now = t0.Add(3 * minute)
	again := mustClaim(t, s, req)
	if !again.TookOver || !again.HeldUntil.Equal(lapsed) {
		t.Errorf("second takeover: HeldUntil %v, want %v", again.HeldUntil, lapsed)
	}
}

func testUnknownTakeover(t *testing.T, s agenttool.Store) {
	key := newKey()
	res := mustClaim(t, s, claimReq(key, t0))
	if err := s.Finish(bg, finish(key, res.Record.Token, agenttool.Unknown, t0)); err != nil {
		t.Fatal(err)
	}
	if r := mustClaim(t, s, claimReq(key, t0.Add(time.Hour))); r.Claimed || r.Record.State != agenttool.Unknown {
		t.Errorf("claim of an unknown record without takeover: %+v", r)
	}
	req := claimReq(key, t0.Add(time.Hour))
	req.TakeOver = true
	r := mustClaim(t, s, req)
	if !r.Claimed || !r.TookOver || r.Record.State != agenttool.Pending || r.Record.Attempts != 1 {
		t.Errorf("takeover of an unknown record: %+v", r)
	}
	if r.TookApproval() {
		t.Errorf("a takeover of an unknown record reads as taking an approval: %+v", r)
	}
}

// testTakeoverOnlyUnderItsDefinition: a call's takeover — a keyed resend,
// a reconcilable tool's check — is granted only by a definition that
// sends the action as it was sent (storekit.SentAlike: its class, where
// it handed the destination the key); under another, an unknown record is
// answered as it is and a lapsed pending one turns unknown, nothing else
// changed. An operator's claim (no definition), one under the action's
// own definition, and one under a definition that sends alike (another
// fence, say) take it over.
func testTakeoverOnlyUnderItsDefinition(t *testing.T, s agenttool.Store) {
	const made, changed, refenced = 0x1111_2222_3333_4446, 0x5555_6666_3333_4446, 0x1111_2222_7777_888a
	if !storekit.SentAlike(made, refenced) || storekit.SentAlike(made, changed) {
		t.Fatal("the test's definitions do not say what it tests")
	}
	under := func(key string, def uint64, at time.Time) storekit.ClaimRequest {
		req := claimReq(key, at)
		req.TakeOver, req.Definition, req.Owner = true, def, fmt.Sprintf("owner-%x-%v", def, at.Unix())
		return req
	}
	unknown := newKey()
	first := under(unknown, made, t0)
	res := mustClaim(t, s, first)
	if err := s.Finish(bg, finish(unknown, res.Record.Token, agenttool.Unknown, t0)); err != nil {
		t.Fatal(err)
	}
	if r := mustClaim(t, s, under(unknown, changed, t0.Add(time.Hour))); r.Claimed || r.Record.State != agenttool.Unknown || r.Record.Definition != made {
		t.Errorf("a takeover of an unknown record under another definition: %+v; want it answered unknown, as made", r)
	}
	if rec, _ := s.Get(bg, unknown); rec.State != agenttool.Unknown || rec.Token != res.Record.Token || rec.Owner != "" || rec.Attempts != 1 {
		t.Errorf("the unknown record after a takeover under another definition: %+v; want it as it was", rec)
	}
	res = mustClaim(t, s, under(unknown, made, t0.Add(time.Hour)))
	if !res.Claimed || !res.TookOver || res.Record.Definition != made {
		t.Errorf("a takeover under the action's own definition: %+v; want taken over", res)
	}
	if err := s.Finish(bg, finish(unknown, res.Record.Token, agenttool.Unknown, t0.Add(time.Hour))); err != nil {
		t.Fatal(err)
	}
	if r := mustClaim(t, s, under(unknown, refenced, t0.Add(2*time.Hour))); !r.Claimed || !r.TookOver || r.Record.Definition != made {
		t.Errorf("a takeover under a definition that sends alike: %+v; want taken over, its definition kept", r)
	}

	lapsed := newKey()
	res = mustClaim(t, s, under(lapsed, made, t0))
	r := mustClaim(t, s, under(lapsed, changed, t0.Add(2*minute)))
	if r.Claimed || r.Record.State != agenttool.Unknown || r.Record.Attempts != 1 || r.Record.Definition != made {
		t.Errorf("a takeover of a lapsed pending record under another definition: %+v; want it turned unknown, one attempt counted", r)
	}
	if rec, _ := s.Get(bg, lapsed); rec.State != agenttool.Unknown || rec.Owner != "" {
		t.Errorf("the lapsed record after a takeover under another definition: %+v; want it unknown", rec)
	}
	if err := s.Finish(bg, finish(lapsed, res.Record.Token, agenttool.Succeeded, t0.Add(2*minute))); !errors.Is(err, storekit.ErrFenced) {
		t.Errorf("the dead holder's finish after its record turned unknown: %v; want ErrFenced", err)
	}
	if r := mustClaim(t, s, under(lapsed, 0, t0.Add(3*minute))); !r.Claimed || !r.TookOver || r.Record.Definition != made {
		t.Errorf("an operator's takeover (no definition): %+v; want taken over, its definition kept", r)
	}
}

// testAttemptRecordedAsSent: a record says how its action's latest
// attempts handed the destination the reference (Record.Definition). An
// approved retry is a new attempt, sent as the claim's definition sends
// it: its record takes that definition, so that, left unknown, it is
// taken over (resent, checked) only alike to it — not by the definition
// whose earlier attempt was found not applied. So does a takeover of a
// record that cannot say (0, or an earlier version's one digest): from it
// on, the action is sent the claim's way. A takeover alike keeps the
// record's own, and so does a claim with no definition (an operator's).
func testAttemptRecordedAsSent(t *testing.T, s agenttool.Store) {
	const made, changed = 0x1111_2222_3333_4446, 0x5555_6666_3333_4446
	under := func(key string, def uint64, at time.Time) storekit.ClaimRequest {
		req := claimReq(key, at)
		req.TakeOver, req.Definition, req.Owner = true, def, fmt.Sprintf("owner-%x-%v", def, at.Unix())
		return req
	}
	key := newKey()
	res := mustClaim(t, s, under(key, made, t0))
	approve := finish(key, res.Record.Token, agenttool.Unknown, t0)
	approve.RetryApproved = true
	if err := s.Finish(bg, approve); err != nil {
		t.Fatal(err)
	}
	res = mustClaim(t, s, under(key, changed, t0.Add(time.Minute)))
	if !res.Claimed || res.TookOver || res.Record.Definition != changed {
		t.Errorf("an approved retry under another definition: %+v; want claimed, recorded under the retry's definition %x", res, uint64(changed))
	}
	if err := s.Finish(bg, finish(key, res.Record.Token, agenttool.Unknown, t0.Add(time.Minute))); err != nil {
		t.Fatal(err)
	}
	if r := mustClaim(t, s, under(key, made, t0.Add(time.Hour))); r.Claimed {
		t.Errorf("a takeover, under the definition whose attempt was found not applied, of the retry sent another way: %+v; want it answered unknown", r)
	}
	if r := mustClaim(t, s, under(key, changed, t0.Add(2*time.Hour))); !r.Claimed || !r.TookOver || r.Record.Definition != changed {
		t.Errorf("a takeover under the definition that sent the retry: %+v; want taken over", r)
	}

	for _, cannotSay := range []uint64{0, 0x5555_6666_3333_4447} {
		key := newKey()
		res := mustClaim(t, s, under(key, cannotSay, t0))
		if err := s.Finish(bg, finish(key, res.Record.Token, agenttool.Unknown, t0)); err != nil {
			t.Fatal(err)
		}
		res = mustClaim(t, s, under(key, made, t0.Add(time.Hour)))
		if !res.Claimed || !res.TookOver || res.Record.Definition != made {
			t.Errorf("a takeover of a record of definition %x by one that says how it sends: %+v; want taken over, recorded under %x", cannotSay, res, uint64(made))
		}
		if err := s.Finish(bg, finish(key, res.Record.Token, agenttool.Unknown, t0.Add(time.Hour))); err != nil {
			t.Fatal(err)
		}
		if r := mustClaim(t, s, under(key, changed, t0.Add(2*time.Hour))); r.Claimed {
			t.Errorf("a takeover under another definition of a record resent under %x: %+v; want it answered unknown", uint64(made), r)
		}
		if r := mustClaim(t, s, under(key, 0, t0.Add(3*time.Hour))); !r.Claimed || !r.TookOver || r.Record.Definition != made {
			t.Errorf("an operator's takeover (no definition): %+v; want taken over, its definition kept", r)
		}
	}
}

func testRetryApproval(t *testing.T, s agenttool.Store) {
	key := newKey()
	res := mustClaim(t, s, claimReq(key, t0))
	f := finish(key, res.Record.Token, agenttool.Unknown, t0)
	f.RetryApproved = true
	f.Resolution = &agenttool.Resolution{Verdict: "not applied", By: "operator:maria", Why: "bounced", At: t0}
	if err := s.Finish(bg, f); err != nil {
		t.Fatal(err)
	}
	rec, _ := s.Get(bg, key)
	if !rec.RetryApproved || rec.Resolution == nil || rec.Resolution.By != "operator:maria" || !rec.Resolution.At.Equal(t0) || rec.Expires.IsZero() {
		t.Fatalf("approved record: %+v (resolution %+v)", rec, rec.Resolution)
	}
	first := mustClaim(t, s, claimReq(key, t0.Add(time.Second)))
	if !first.Claimed || first.TookOver || !first.TookApproval() {
		t.Fatalf("claim of an approved record: %+v; want claimed, taking the approval", first)
	}
	// The approved retry is marked as an action that may have applied.
	if rec, _ := s.Get(bg, key); !rec.TakenOver {
		t.Errorf("the claim of an approved record is not marked taken over: %+v", rec)
	}
	if second := mustClaim(t, s, claimReq(key, t0.Add(2*time.Second))); second.Claimed {
		t.Fatalf("an approval was used twice: %+v", second)
	}
	rec, _ = s.Get(bg, key)
	if rec.Resolution == nil || rec.Resolution.By != "operator:maria" {
		t.Errorf("the resolution was lost when the approval was used: %+v", rec.Resolution)
	}
	bad := finish(key, first.Record.Token, agenttool.Succeeded, t0)
	bad.RetryApproved = true
	if err := s.Finish(bg, bad); !errors.Is(err, agenttool.ErrInvalidRequest) {
		t.Errorf("approving a success: %v, want ErrInvalidRequest", err)
	}
}

func testFingerprintMismatch(t *testing.T, s agenttool.Store) {
	for _, state := range []agenttool.State{agenttool.Pending, agenttool.Succeeded, agenttool.Unknown} {
		key := newKey()
		res := mustClaim(t, s, claimReq(key, t0))
		if state != agenttool.Pending {
			if err := s.Finish(bg, finish(key, res.Record.Token, state, t0)); err != nil {
				t.Fatal(err)
			}
		}
		before, _ := s.Get(bg, key)
		req := claimReq(key, t0.Add(2*minute))
		req.Fingerprint, req.TakeOver = inputB, true
		r := mustClaim(t, s, req)
		if r.Claimed || r.Conflict != storekit.OtherInput {
			t.Errorf("%v record, other input: %+v", state, r)
		}
		after, _ := s.Get(bg, key)
		if after.Token != before.Token || after.State != before.State || !after.Updated.Equal(before.Updated) {
			t.Errorf("%v record changed by a mismatched claim:\n%+v\n%+v", state, before, after)
		}
	}
}

func testPrincipalIsolation(t *testing.T, s agenttool.Store) {
	key := newKey()
	res := mustClaim(t, s, claimReq(key, t0))
	if err := s.Finish(bg, finish(key, res.Record.Token, agenttool.Unknown, t0)); err != nil {
		t.Fatal(err)
	}
	req := claimReq(key, t0.Add(time.Hour))
	req.Principal, req.TakeOver = bob, true
	r := mustClaim(t, s, req)
	if r.Claimed || r.Conflict != storekit.OtherPrincipal {
		t.Errorf("another principal's claim: %+v", r)
	}
	mine, err := s.ListUnknown(bg, storekit.ListRequest{Principal: &bob, Now: t0.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	for _, rec := range mine {
		if rec.Key == key {
			t.Errorf("bob's listing shows alice's record")
		}
	}
}

func testRelease(t *testing.T, s agenttool.Store) {
	key := newKey()
	res := mustClaim(t, s, claimReq(key, t0))
	if err := s.Release(bg, key, res.Record.Token); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(bg, key); !errors.Is(err, agenttool.ErrNotFound) {
		t.Errorf("after Release: %v, want ErrNotFound", err)
	}
	if err := s.Release(bg, key, res.Record.Token); !errors.Is(err, storekit.ErrFenced) {
		t.Errorf("second Release: %v, want ErrFenced", err)
	}
	if r := mustClaim(t, s, claimReq(key, t0)); !r.Claimed || r.TookOver {
		t.Errorf("claim after release: %+v", r)
	}
}

func testRenew(t *testing.T, s agenttool.Store) {
	key := newKey()
	res := mustClaim(t, s, claimReq(key, t0))
	if err := s.Renew(bg, storekit.RenewRequest{Key: key, Token: res.Record.Token, Until: t0.Add(10 * minute), Now: t0.Add(minute / 2)}); err != nil {
		t.Fatal(err)
	}
	if r := mustClaim(t, s, claimReq(key, t0.Add(5*minute))); r.Claimed || r.Record.State != agenttool.Pending {
		t.Errorf("claim during a renewed lease: %+v", r)
	}
	// One clock: the times written are the holder's, never the store's own.
	rec, err := s.Get(bg, key)
	if err != nil || !rec.LeaseExpiry.Equal(t0.Add(10*minute)) || !rec.Updated.Equal(t0.Add(minute/2)) {
		t.Errorf("after Renew: lease %v, updated %v (%v); want the holder's times", rec.LeaseExpiry, rec.Updated, err)
	}
	if rec.TakenOver {
		t.Errorf("a plain renewal set TakenOver")
	}
	if err := s.Finish(bg, finish(key, res.Record.Token, agenttool.Succeeded, t0.Add(2*minute))); err != nil {
		t.Fatal(err)
	}
	if rec, _ := s.Get(bg, key); rec.TakenOver || rec.State != agenttool.Succeeded {
		t.Errorf("after the outcome: %+v", rec)
	}
}

func testSweep(t *testing.T, s agenttool.Store) {
	keys := map[agenttool.State]string{}
	for _, state := range []agenttool.State{agenttool.Succeeded, agenttool.Failed, agenttool.Unknown, agenttool.Pending} {
		key := newKey()
		keys[state] = key
		res := mustClaim(t, s, claimReq(key, t0))
		if state != agenttool.Pending {
			if err := s.Finish(bg, finish(key, res.Record.Token, state, t0)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := s.Sweep(bg, storekit.SweepRequest{Now: t0.Add(59 * time.Minute)}); err != nil {
		t.Fatal(err)
	}
	for state, key := range keys {
		if _, err := s.Get(bg, key); err != nil {
			t.Errorf("%v record swept before its expiry: %v", state, err)
		}
	}
	n, err := s.Sweep(bg, storekit.SweepRequest{Now: t0.Add(1000 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if n < 2 {
		t.Errorf("Sweep removed %d records, want at least the 2 expired ones", n)
	}
	for state, key := range keys {
		_, err := s.Get(bg, key)
		gone := errors.Is(err, agenttool.ErrNotFound)
		if want := state == agenttool.Succeeded || state == agenttool.Failed; gone != want {
			t.Errorf("%v record: gone=%v after a late sweep (%v)", state, gone, err)
		}
	}
}

func testExpiredClaimedAfresh(t *testing.T, s agenttool.Store) {
	key := newKey()
	res := mustClaim(t, s, claimReq(key, t0))
	if err := s.Finish(bg, finish(key, res.Record.Token, agenttool.Succeeded, t0)); err != nil {
		t.Fatal(err)
	}
	r := mustClaim(t, s, claimReq(key, t0.Add(2*time.Hour)))
	if !r.Claimed || r.TookOver || r.Record.State != agenttool.Pending || r.TookApproval() {
		t.Errorf("claim of an expired success: %+v; want a fresh claim", r)
	}
}

func testListUnknown(t *testing.T, s agenttool.Store) {
	var want []string
	for i := range 7 {
		key := newKey()
		res := mustClaim(t, s, claimReq(key, t0))
		switch i % 3 {
		case 0: // unknown
			if err := s.Finish(bg, finish(key, res.Record.Token, agenttool.Unknown, t0)); err != nil {
				t.Fatal(err)
			}
			want = append(want, key)
		case 1: // pending, lease expires at t0+1m
			want = append(want, key)
		case 2: // settled
			if err := s.Finish(bg, finish(key, res.Record.Token, agenttool.Succeeded, t0)); err != nil {
				t.Fatal(err)
			}
		}
	}
	now := t0.Add(2 * minute)
	var got []string
	after := ""
	for {
		page, err := s.ListUnknown(bg, storekit.ListRequest{After: after, Limit: 2, Now: now})
		if err != nil {
			t.Fatal(err)
		}
		if len(page) > 2 {
			t.Fatalf("page of %d, limit 2", len(page))
		}
		for _, r := range page {
			if !r.AwaitsReconciliation(now) {
				t.Errorf("listed %s in state %v", r.Key, r.State)
			}
			got = append(got, r.Key)
		}
		if len(page) < 2 {
			break
		}
		after = page[len(page)-1].Key
	}
	for _, k := range want {
		found := false
		for _, g := range got {
			found = found || g == k
		}
		if !found {
			t.Errorf("%s awaits reconciliation but was not listed", k)
		}
	}
	for i := 1; i < len(got); i++ {
		if got[i] <= got[i-1] {
			t.Errorf("listing not ordered by key: %q then %q", got[i-1], got[i])
		}
	}
	early, _ := s.ListUnknown(bg, storekit.ListRequest{Now: t0, Limit: 1000})
	for _, r := range early {
		if r.State == agenttool.Pending {
			t.Errorf("a live lease was listed: %s", r.Key)
		}
	}
}

// testLabel follows a record's label through the claims and outcomes that
// rewrite the record: a claim writes its label, a takeover without one keeps
// the record's, a takeover with one replaces it, and a fresh action over an
// expired record starts without the old one.
func testLabel(t *testing.T, s agenttool.Store) {
	const ana, ticket = "Ana Ruiz · ticket 4411", "ticket 4412"
	key := newKey()
	label := func(when string, want string) {
		t.Helper()
		rec, err := s.Get(bg, key)
		if err != nil {
			t.Fatal(err)
		}
		if rec.Label != want {
			t.Errorf("%s: label %q, want %q", when, rec.Label, want)
		}
	}
	req := claimReq(key, t0)
	req.Label = ana
	res := mustClaim(t, s, req)
	if res.Record.Label != ana {
		t.Errorf("claim's record: label %q, want %q", res.Record.Label, ana)
	}
	label("after the claim", ana)
	if err := s.Finish(bg, finish(key, res.Record.Token, agenttool.Unknown, t0)); err != nil {
		t.Fatal(err)
	}
	label("after an unknown outcome", ana)
	listed, err := s.ListUnknown(bg, storekit.ListRequest{Now: t0.Add(time.Second), Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range listed {
		if r.Key == key && r.Label != ana {
			t.Errorf("listed: label %q, want %q", r.Label, ana)
		}
	}

	took := claimReq(key, t0.Add(time.Second)) // a sweeper's or operator's takeover: no label
	took.TakeOver = true
	res = mustClaim(t, s, took)
	if !res.TookOver || res.Record.Label != ana {
		t.Fatalf("takeover without a label: %+v; want it to keep %q", res, ana)
	}
	label("after a takeover without a label", ana)
	if err := s.Finish(bg, finish(key, res.Record.Token, agenttool.Unknown, t0.Add(time.Second))); err != nil {
		t.Fatal(err)
	}
	took.Now, took.Label = t0.Add(2*time.Second), ticket
	res = mustClaim(t, s, took)
	label("after a takeover with a label", ticket)

	// The holder dies; a claim without takeover turns the record unknown.
	mustClaim(t, s, claimReq(key, t0.Add(2*time.Second+minute)))
	label("after a lapsed lease turned unknown", ticket)
	if uc, ok := s.(storekit.UnknownClaimer); ok {
		got, err := uc.ClaimUnknown(bg, storekit.ClaimUnknownRequest{Tools: []string{"conformance"}, Owner: "sweeper",
			Now: t0.Add(3 * minute), Lease: minute, Limit: 1000, UpdatedBefore: t0.Add(3 * minute)})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range got {
			if r.Record.Key == key {
				if r.Record.Label != ticket {
					t.Errorf("ClaimUnknown's record: label %q, want %q", r.Record.Label, ticket)
				}
				if err := s.Finish(bg, finish(key, r.Record.Token, agenttool.Succeeded, t0.Add(3*minute))); err != nil {
					t.Fatal(err)
				}
			}
		}
		label("after ClaimUnknown", ticket)
	}

	// A fresh action over an expired record does not inherit its label.
	fresh := newKey()
	req = claimReq(fresh, t0)
	req.Label = ana
	res = mustClaim(t, s, req)
	if err := s.Finish(bg, finish(fresh, res.Record.Token, agenttool.Succeeded, t0)); err != nil {
		t.Fatal(err)
	}
	res = mustClaim(t, s, claimReq(fresh, t0.Add(2*time.Hour))) // past the TTL
	if !res.Claimed || res.Record.Label != "" {
		t.Errorf("fresh claim over an expired record: %+v; want no label", res)
	}
	if rec, _ := s.Get(bg, fresh); rec.Label != "" {
		t.Errorf("fresh claim over an expired record: stored label %q, want none", rec.Label)
	}
}

// testCount counts records of two tools and two principals in every state.
func testCount(t *testing.T, s agenttool.Store) {
	counter, ok := s.(storekit.Counter)
	if !ok {
		t.Skip("the store does not implement storekit.Counter")
	}
	record := func(tool string, who agenttool.Digest, state agenttool.State, approved bool) {
		t.Helper()
		req := claimReq(newKey(), t0)
		req.Tool, req.Principal = tool, who
		res := mustClaim(t, s, req)
		if state == agenttool.Pending {
			return
		}
		f := finish(req.Key, res.Record.Token, state, t0)
		f.RetryApproved = approved
		if err := s.Finish(bg, f); err != nil {
			t.Fatal(err)
		}
	}
	record("send_email", alice, agenttool.Succeeded, false)
	record("send_email", alice, agenttool.Succeeded, false)
	record("send_email", alice, agenttool.Unknown, false)
	record("send_email", bob, agenttool.Unknown, true)
	record("send_email", bob, agenttool.Failed, false)
	record("book_flight", alice, agenttool.Pending, false)
	all, err := counter.Count(bg, storekit.CountRequest{})
	if err != nil {
		t.Fatal(err)
	}
	want := []storekit.Count{
		{Tool: "book_flight", State: agenttool.Pending, Records: 1},
		{Tool: "send_email", State: agenttool.Succeeded, Records: 2},
		{Tool: "send_email", State: agenttool.Failed, Records: 1},
		{Tool: "send_email", State: agenttool.Unknown, Records: 1},
		{Tool: "send_email", State: agenttool.Unknown, RetryApproved: true, Records: 1},
	}
	if !slices.Equal(all, want) {
		t.Errorf("Count:\n got %+v\nwant %+v", all, want)
	}
	bobs, err := counter.Count(bg, storekit.CountRequest{Principal: &bob})
	if err != nil {
		t.Fatal(err)
	}
	want = []storekit.Count{
		{Tool: "send_email", State: agenttool.Failed, Records: 1},
		{Tool: "send_email", State: agenttool.Unknown, RetryApproved: true, Records: 1},
	}
	if !slices.Equal(bobs, want) {
		t.Errorf("Count of bob's records:\n got %+v\nwant %+v", bobs, want)
	}
	if n, err := counter.CountUnknown(bg); err != nil || n != 1 {
		t.Errorf("CountUnknown = %d, %v; want 1 (the approved one is not awaiting anyone)", n, err)
	}
}

// testSweepSteps sweeps in bounded steps: each deletes at most its limit,
// oldest first, and SweepAll goes on until nothing is left, saying how far
// it got; what is not expired, and unknown records, stay.
func testSweepSteps(t *testing.T, s agenttool.Store) {
	const expired = 25
	var keys []string
	for i := range expired + 5 {
		key := newKey()
		res := mustClaim(t, s, claimReq(key, t0))
		f := finish(key, res.Record.Token, agenttool.Succeeded, t0.Add(time.Duration(i)*time.Second))
		f.TTL = time.Hour
		if i >= expired {
			f.TTL = 100 * time.Hour // not expired at the sweep
		}
		if err := s.Finish(bg, f); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, key)
	}
	unknown := newKey()
	res := mustClaim(t, s, claimReq(unknown, t0))
	if err := s.Finish(bg, finish(unknown, res.Record.Token, agenttool.Unknown, t0)); err != nil {
		t.Fatal(err)
	}
	at := t0.Add(2 * time.Hour)
	n, err := s.Sweep(bg, storekit.SweepRequest{Now: at, Limit: 10})
	if err != nil || n != 10 {
		t.Fatalf("one step of 10: %d, %v", n, err)
	}
	for i, key := range keys[:10] { // the oldest first
		if _, err := s.Get(bg, key); !errors.Is(err, agenttool.ErrNotFound) {
			t.Errorf("record %d, among the oldest, survived the first step: %v", i, err)
		}
	}
	var progress []int
	total, err := storekit.SweepAll(bg, s, at, 10, func(n int) { progress = append(progress, n) })
	if err != nil || total != expired-10 {
		t.Fatalf("SweepAll: %d, %v; want %d", total, err, expired-10)
	}
	if !slices.Equal(progress, []int{10, 15, 15}) { // the last step finds nothing left
		t.Errorf("progress %v, want [10 15 15]", progress)
	}
	for i, key := range keys {
		_, err := s.Get(bg, key)
		if gone := errors.Is(err, agenttool.ErrNotFound); gone != (i < expired) {
			t.Errorf("record %d: gone=%v after the sweep", i, gone)
		}
	}
	if _, err := s.Get(bg, unknown); err != nil {
		t.Errorf("the unknown record was swept: %v", err)
	}
}

// testImport imports settled records with their indexes, all or nothing.
func testImport(t *testing.T, s agenttool.Store) {
	im, ok := s.(storekit.Importer)
	if !ok {
		t.Skip("the store does not implement storekit.Importer")
	}
	record := func(state agenttool.State, token uint64, expires time.Time) agenttool.Record {
		return agenttool.Record{Key: newKey(), Tool: "conformance", State: state, Principal: alice, Session: agenttool.Digest{7},
			Fingerprint: inputA, Token: token, Attempts: 1, Outcome: []byte(`{"outcome":"` + state.String() + `"}`),
			Created: t0, Updated: t0, Expires: expires, Label: "imported",
			Resolution: &agenttool.Resolution{Verdict: "applied", By: "operator:ana", Why: "moved", At: t0}}
	}
	recs := []agenttool.Record{
		record(agenttool.Succeeded, 5, t0.Add(time.Hour)),
		record(agenttool.Failed, 1000, t0.Add(time.Hour)),
		record(agenttool.Unknown, 7, time.Time{}),
	}
	recs[2].Resolution = nil
	if err := im.Import(bg, recs); err != nil {
		t.Fatal(err)
	}
	for _, want := range recs {
		got, err := s.Get(bg, want.Key)
		if err != nil || got.State != want.State || got.Token != want.Token || string(got.Outcome) != string(want.Outcome) ||
			!got.Expires.Equal(want.Expires) || got.Label != want.Label || got.Session != want.Session ||
			(want.Resolution != nil && (got.Resolution == nil || got.Resolution.By != want.Resolution.By)) {
			t.Errorf("imported %+v\nread back %+v, %v", want, got, err)
		}
	}
	if c, ok := s.(storekit.Counter); ok {
		if n, err := c.CountUnknown(bg); err != nil || n != 1 {
			t.Errorf("CountUnknown after the import: %d, %v; want 1", n, err)
		}
	}
	listed, err := s.ListUnknown(bg, storekit.ListRequest{Tool: "conformance", Principal: &alice, Now: t0.Add(time.Minute)})
	if err != nil || len(listed) != 1 || listed[0].Key != recs[2].Key {
		t.Errorf("the imported unknown record is not listed by its scope: %+v, %v", listed, err)
	}
	if res := mustClaim(t, s, claimReq(newKey(), t0)); res.Record.Token <= 1000 {
		t.Errorf("a claim after the import got token %d, not above the imported 1000", res.Record.Token)
	}
	if n, err := s.Sweep(bg, storekit.SweepRequest{Now: t0.Add(2 * time.Hour)}); err != nil || n != 2 {
		t.Errorf("sweeping the imported records: %d, %v; want 2", n, err)
	}

	fresh, pending := record(agenttool.Succeeded, 9, t0.Add(time.Hour)), record(agenttool.Pending, 10, time.Time{})
	if err := im.Import(bg, []agenttool.Record{fresh, pending}); !errors.Is(err, agenttool.ErrInvalidRequest) {
		t.Errorf("importing a pending record: %v, want ErrInvalidRequest", err)
	}
	dup := recs[2]
	if err := im.Import(bg, []agenttool.Record{fresh, dup}); !errors.Is(err, agenttool.ErrInvalidRequest) {
		t.Errorf("importing a key that exists: %v, want ErrInvalidRequest", err)
	}
	if _, err := s.Get(bg, fresh.Key); !errors.Is(err, agenttool.ErrNotFound) {
		t.Errorf("a refused import wrote part of its records: %v", err)
	}
}

// testImportSlotOneHolder refuses an import one of whose records would
// hold a fence slot another record holds — one of the store's or one of
// the import's — naming both, and writes nothing of it; the record
// imported beside the slot is taken.
func testImportSlotOneHolder(t *testing.T, s agenttool.Store) {
	im, ok := s.(storekit.Importer)
	if !ok {
		t.Skip("the store does not implement storekit.Importer")
	}
	unknown := func(session agenttool.Digest) agenttool.Record {
		return agenttool.Record{Key: newKey(), Tool: "conformance", State: agenttool.Unknown, Principal: alice, Session: session,
			FenceScope: session, Fingerprint: inputA, Token: 3, Attempts: 1, Created: t0, Updated: t0}
	}
	refused := func(what string, recs []agenttool.Record, key, holder string) {
		t.Helper()
		var held *storekit.SlotHeldError
		err := im.Import(bg, recs)
		if !errors.As(err, &held) || held.Key != key || held.Holder != holder || held.Tool != "conformance" || !errors.Is(err, agenttool.ErrInvalidRequest) {
			t.Errorf("%s: %v; want a SlotHeldError naming %s and its holder %s, wrapping ErrInvalidRequest", what, err, key, holder)
		}
		for _, r := range recs {
			if _, err := s.Get(bg, r.Key); !errors.Is(err, agenttool.ErrNotFound) {
				t.Errorf("%s: the refused import wrote %s (%v)", what, r.Key, err)
			}
		}
	}
	first := unknown(agenttool.Digest{8})
	if err := im.Import(bg, []agenttool.Record{first}); err != nil {
		t.Fatal(err)
	}
	fresh := unknown(agenttool.Digest{9})
	second := unknown(first.Session)
	refused("a record of a slot the store's record holds", []agenttool.Record{fresh, second}, second.Key, first.Key)
	a, b := unknown(agenttool.Digest{10}), unknown(agenttool.Digest{10})
	refused("two records of one slot in one import", []agenttool.Record{a, b}, b.Key, a.Key)

	second.FenceScope = agenttool.Digest{}
	if err := im.Import(bg, []agenttool.Record{fresh, second}); err != nil {
		t.Fatalf("importing the second record beside its slot: %v", err)
	}
	req := claimReq(newKey(), t0.Add(time.Minute))
	req.Session, req.FenceScope = first.Session, first.Session
	if res := mustClaim(t, s, req); res.Claimed || res.Blocked == nil {
		t.Errorf("a new write of the slot after the import: %+v; want it held back", res)
	}
}

func testCancelled(t *testing.T, s agenttool.Store) {
	ctx, cancel := context.WithCancel(bg)
	cancel()
	key := newKey()
	if _, err := s.Claim(ctx, claimReq(key, t0)); !errors.Is(err, context.Canceled) {
		t.Errorf("Claim with a cancelled context: %v", err)
	}
	if _, err := s.Get(bg, key); !errors.Is(err, agenttool.ErrNotFound) {
		t.Errorf("a cancelled claim left a record: %v", err)
	}
	res := mustClaim(t, s, claimReq(key, t0))
	if err := s.Finish(ctx, finish(key, res.Record.Token, agenttool.Succeeded, t0)); !errors.Is(err, context.Canceled) {
		t.Errorf("Finish with a cancelled context: %v", err)
	}
	if rec, _ := s.Get(bg, key); rec.State != agenttool.Pending {
		t.Errorf("a cancelled Finish changed the record: %v", rec.State)
	}
	if _, err := s.ListUnknown(ctx, storekit.ListRequest{Now: t0}); !errors.Is(err, context.Canceled) {
		t.Errorf("ListUnknown with a cancelled context: %v", err)
	}
}

func testInvalid(t *testing.T, s agenttool.Store) {
	req := claimReq(newKey(), t0)
	req.Lease = 0
	if _, err := s.Claim(bg, req); !errors.Is(err, agenttool.ErrInvalidRequest) {
		t.Errorf("claim with a zero lease: %v, want ErrInvalidRequest", err)
	}
	key := newKey()
	res := mustClaim(t, s, claimReq(key, t0))
	if err := s.Finish(bg, finish(key, res.Record.Token, agenttool.Pending, t0)); !errors.Is(err, agenttool.ErrInvalidRequest) {
		t.Errorf("finish to pending: %v, want ErrInvalidRequest", err)
	}
}

func testDatabaseGone(t *testing.T, h Harness) {
	s := h.Open(t)
	key := newKey()
	res := mustClaim(t, s, claimReq(key, t0))
	h.Kill(t, s)
	ctx, cancel := context.WithTimeout(bg, 30*time.Second)
	defer cancel()
	if _, err := s.Claim(ctx, claimReq(newKey(), t0)); err == nil {
		t.Error("Claim succeeded with the database gone")
	}
	if err := s.Finish(ctx, finish(key, res.Record.Token, agenttool.Succeeded, t0)); err == nil {
		t.Error("Finish succeeded with the database gone")
	}
	if _, err := s.Get(ctx, key); err == nil || errors.Is(err, agenttool.ErrNotFound) {
		t.Errorf("Get with the database gone: %v; want an error that is not ErrNotFound (never read as absent)", err)
	}
}

// testScope checks what the unknown fence asks for: the records of one tool
// and principal (and session) that await reconciliation, from an index,
// kept through takeovers, settlements and a restart.
func testScope(t *testing.T, h Harness) {
	s := h.Open(t)
	tool := fmt.Sprintf("fence-%d", keyCount.Add(1))
	s1, s2 := agenttool.Digest{0x51}, agenttool.Digest{0x52}
	claim := func(tool string, principal, session agenttool.Digest, now time.Time) (string, uint64) {
		key := newKey()
		req := claimReq(key, now)
		req.Tool, req.Principal, req.Session = tool, principal, session
		res := mustClaim(t, s, req)
		if !res.Claimed || res.Record.Session != session {
			t.Fatalf("claim %s: %+v; want claimed with its session", key, res)
		}
		return key, res.Record.Token
	}
	settle := func(key string, token uint64, state agenttool.State) {
		t.Helper()
		if err := s.Finish(bg, finish(key, token, state, t0)); err != nil {
			t.Fatal(err)
		}
	}
	unknown1, tok := claim(tool, alice, s1, t0)
	settle(unknown1, tok, agenttool.Unknown)
	dead1, _ := claim(tool, alice, s1, t0) // its lease ends at t0+1m
	done1, tok := claim(tool, alice, s1, t0)
	settle(done1, tok, agenttool.Succeeded)
	approved1, tok := claim(tool, alice, s1, t0)
	approve := finish(approved1, tok, agenttool.Unknown, t0)
	approve.RetryApproved = true
	if err := s.Finish(bg, approve); err != nil {
		t.Fatal(err)
	}
	unknown2, tok := claim(tool, alice, s2, t0)
	settle(unknown2, tok, agenttool.Unknown)
	other, tok := claim(tool+"-other", alice, s1, t0)
	settle(other, tok, agenttool.Unknown)
	bobs, tok := claim(tool, bob, s1, t0)
	settle(bobs, tok, agenttool.Unknown)
	now := t0.Add(2 * minute)
	live1, _ := claim(tool, alice, s1, now) // a live lease: running, not awaiting

	list := func(session *agenttool.Digest) []string {
		t.Helper()
		recs, err := s.ListUnknown(bg, storekit.ListRequest{Tool: tool, Principal: &alice, Session: session, Now: now, Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		var keys []string
		for _, r := range recs {
			if r.Tool != tool || r.Principal != alice || (session != nil && r.Session != *session) {
				t.Errorf("listed %s of tool %q in another scope", r.Key, r.Tool)
			}
			keys = append(keys, r.Key)
		}
		return keys
	}
	same := func(what string, got []string, want ...string) {
		t.Helper()
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("%s: listed %v, want %v", what, got, want)
		}
	}
	same("session", list(&s1), unknown1, dead1)
	same("principal", list(nil), unknown1, dead1, unknown2)
	_ = live1

	// A takeover keeps the session; a settled record leaves the listing.
	req := claimReq(unknown1, now)
	req.Tool, req.Session, req.TakeOver = tool, s1, true
	res := mustClaim(t, s, req)
	if !res.Claimed || !res.TookOver || res.Record.Session != s1 {
		t.Fatalf("takeover of %s: %+v", unknown1, res)
	}
	if err := s.Finish(bg, finish(unknown1, res.Record.Token, agenttool.Succeeded, now)); err != nil {
		t.Fatal(err)
	}
	same("after a settlement", list(&s1), dead1)
	got, err := s.Get(bg, dead1)
	if err != nil || got.Session != s1 {
		t.Errorf("Get(%s) = %+v, %v; want its session", dead1, got, err)
	}

	if h.Reopen == nil {
		return
	}
	s = h.Reopen(t, s)
	same("after a restart", list(&s2), unknown2)
	if keys := list(&s1); !slices.Contains(keys, dead1) {
		t.Errorf("after a restart the dead holder's record %s is not listed: %v", dead1, keys)
	}
}

// testToolIsolation: a record made by one tool is never handed to another
// that meets its key (tools sharing a key prefix, or a key from an older
// version): the claim is refused and the record is unchanged.
func testToolIsolation(t *testing.T, s agenttool.Store) {
	key := newKey()
	res := mustClaim(t, s, claimReq(key, t0))
	if err := s.Finish(bg, finish(key, res.Record.Token, agenttool.Succeeded, t0)); err != nil {
		t.Fatal(err)
	}
	before, _ := s.Get(bg, key)
	req := claimReq(key, t0)
	req.Tool, req.TakeOver = "refund", true
	r := mustClaim(t, s, req)
	if r.Claimed || r.Conflict != storekit.OtherTool {
		t.Errorf("claim by another tool: %+v; want refused, OtherTool", r)
	}
	if after, _ := s.Get(bg, key); after.Token != before.Token || after.State != agenttool.Succeeded || after.Tool != "conformance" {
		t.Errorf("the record changed: %+v", after)
	}
}

// testInput: the input a claim keeps (Record.Input) is read back with the
// record, kept through an unknown outcome and a takeover, and cleared
// when the action settles; a claim without one keeps none, whatever the
// store held before.
func testInput(t *testing.T, s agenttool.Store) {
	input := []byte(`{"to":"ana@example.com","subject":"Lunch"}`)
	key := newKey()
	kept := func(when string, want []byte) {
		t.Helper()
		rec, err := s.Get(bg, key)
		if err != nil {
			t.Fatal(err)
		}
		if string(rec.Input) != string(want) {
			t.Errorf("%s: input %q, want %q", when, rec.Input, want)
		}
	}
	req := claimReq(key, t0)
	req.Input = input
	res := mustClaim(t, s, req)
	if string(res.Record.Input) != string(input) {
		t.Errorf("the claim's record: input %q, want %q", res.Record.Input, input)
	}
	kept("after the claim", input)
	if err := s.Finish(bg, finish(key, res.Record.Token, agenttool.Unknown, t0)); err != nil {
		t.Fatal(err)
	}
	kept("after an unknown outcome", input)
	over := claimReq(key, t0.Add(time.Second))
	over.TakeOver, over.Owner = true, "owner-2"
	res = mustClaim(t, s, over)
	if !res.Claimed {
		t.Fatalf("takeover: %+v", res)
	}
	kept("after a takeover that brought none", input)
	if err := s.Finish(bg, finish(key, res.Record.Token, agenttool.Succeeded, t0.Add(2*time.Second))); err != nil {
		t.Fatal(err)
	}
	kept("after the action succeeded", nil)

	plain := newKey()
	res = mustClaim(t, s, claimReq(plain, t0))
	if res.Record.Input != nil {
		t.Errorf("a claim without an input: %q", res.Record.Input)
	}
	failed := newKey()
	req = claimReq(failed, t0)
	req.Input = input
	res = mustClaim(t, s, req)
	if err := s.Finish(bg, finish(failed, res.Record.Token, agenttool.Failed, t0)); err != nil {
		t.Fatal(err)
	}
	if rec, err := s.Get(bg, failed); err != nil || rec.Input != nil {
		t.Errorf("after the action failed: input %q, %v; want none", rec.Input, err)
	}
}
