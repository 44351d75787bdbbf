package pgstore_test

// What a batch of claims (insertUnnest, after throughIndexes in one
// transaction) keeps, whatever happens to it: one grant a key and one
// holder a slot, across processes too; each caller answered by what the
// table holds, when the batch is refused, times out, is cancelled by its
// callers, or loses its connection; the look beside the slot refusing what
// it must; and settings that stay in its transaction.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe/agenttool/pgstore"
	"github.com/retrysafe/retrysafe/agenttool/storekit"
	"github.com/retrysafe/retrysafe/internal/pgtest"
)

// claimsTruthful checks every caller's answer against the table: claimed
// exactly when the record is pending under its own owner and token; no
// token twice; no two pending holders of one slot.
func claimsTruthful(t *testing.T, s *pgstore.Store, reqs []storekit.ClaimRequest, res []storekit.ClaimResult, errs []error) {
	t.Helper()
	ctx := context.Background()
	tokens := map[uint64]string{}
	slots := map[string]string{}
	for i, req := range reqs {
		rec, err := s.Get(ctx, req.Key)
		own := err == nil && rec.State == storekit.Pending && rec.Owner == req.Owner
		if res[i].Claimed {
			if !own || rec.Token != res[i].Record.Token {
				t.Errorf("claim %s answered claimed (token %d, err %v) but its record is %+v, %v: not its own", req.Key, res[i].Record.Token, errs[i], rec, err)
			}
			if k, dup := tokens[res[i].Record.Token]; dup {
				t.Errorf("token %d granted to %s and %s", res[i].Record.Token, k, req.Key)
			}
			tokens[res[i].Record.Token] = req.Key
			if req.FenceScope != (storekit.Digest{}) {
				slot := req.Tool + "/" + fmt.Sprintf("%x", req.FenceScope[:])
				if k, dup := slots[slot]; dup {
					t.Errorf("slot %s granted to %s and %s", slot, k, req.Key)
				}
				slots[slot] = req.Key
			}
		} else if own {
			t.Errorf("claim %s answered NOT claimed (%+v, err %v) though its record is pending under its owner: %+v", req.Key, res[i], errs[i], rec)
		}
	}
}

// claimBatch runs reqs as one gathered batch of claims with fault.
func runClaimBatch(t *testing.T, s *pgstore.Store, reqs []storekit.ClaimRequest, fault int) ([]storekit.ClaimResult, []error) {
	t.Helper()
	before := s.GroupCommitStats().ClaimBatches
	pgstore.GatherClaims(s, len(reqs), fault)
	res, errs := make([]storekit.ClaimResult, len(reqs)), make([]error, len(reqs))
	together(len(reqs), func(i int) { res[i], errs[i] = s.Claim(context.Background(), reqs[i]) })()
	if s.GroupCommitStats().ClaimBatches == before {
		t.Fatal("no batch of claims was written")
	}
	return res, errs
}

func TestABatchOfClaimsAnswersEachCallerTrulyAndKeepsItsSettingsInEveryMode(t *testing.T) {
	for _, mode := range batchQueryModes {
		t.Run(mode.name, func(t *testing.T) {
			ctx := context.Background()
			f := newBatchFixture(t, "&pool_max_conns=1&synchronous_commit=local"+mode.params)
			s := f.store
			pid0, want := showSettings(t, ctx, s)
			check := func(what string, samePID bool) {
				t.Helper()
				pid, got := showSettings(t, ctx, s)
				if got != want {
					t.Errorf("after %s: settings %q, want %q", what, got, want)
				}
				if samePID && pid != pid0 {
					t.Errorf("after %s: new connection %d (was %d)", what, pid, pid0)
				}
				pid0 = pid
			}
			for _, c := range []struct {
				name  string
				fault int
				same  bool
			}{{"ok", 0, true}, {"row", pgstore.FaultRow, true}, {"lostafter", pgstore.FaultLostAfterCommit, false}, {"lostbefore", pgstore.FaultLostBeforeCommit, false}} {
				reqs := batchClaimsOf(c.name, 6)
				reqs[1].Unkeyed = true
				reqs[4].Unkeyed = true
				res, errs := runClaimBatch(t, s, reqs, c.fault)
				claimsTruthful(t, s, reqs, res, errs)
				for i := range reqs {
					if errs[i] != nil || !res[i].Claimed {
						t.Errorf("%s: claim %s: %+v %v; want claimed (database up)", c.name, reqs[i].Key, res[i], errs[i])
					}
				}
				check("a claims batch "+c.name, c.same)
			}
			// Mixed slots: pairs share a slot, one key already held in the slot.
			reqs := batchClaimsOf("shared", 6)
			for i := range reqs {
				scope := storekit.Digest{0xee, byte(i / 2)}
				reqs[i].Session, reqs[i].FenceScope = scope, scope
			}
			res, errs := runClaimBatch(t, s, reqs, 0)
			claimsTruthful(t, s, reqs, res, errs)
			for i := 0; i < 6; i += 2 {
				if res[i].Claimed == res[i+1].Claimed {
					t.Errorf("slot pair %s/%s: claimed %v and %v", reqs[i].Key, reqs[i+1].Key, res[i].Claimed, res[i+1].Claimed)
				}
			}
			check("a claims batch with shared slots", true)
		})
	}
}

// A statement timeout on a held key: the batch's INSERT errors after the
// prelude ran; the others are claimed alone; nothing leaks.
func TestABatchOfClaimsTimedOutAnswersEachCallerTruly(t *testing.T) {
	for _, mode := range batchQueryModes {
		t.Run(mode.name, func(t *testing.T) {
			ctx := context.Background()
			f := newBatchFixture(t, "&pool_max_conns=1&options=-c%20statement_timeout%3D400"+mode.params)
			s := f.store
			_, want := showSettings(t, ctx, s)
			reqs := batchClaimsOf("timeout", 5)
			reqs[0].Unkeyed = true
			release := f.hold(reqs[2].Key, false)
			pgstore.GatherClaims(s, len(reqs), 0)
			res, errs := make([]storekit.ClaimResult, len(reqs)), make([]error, len(reqs))
			wait := together(len(reqs), func(i int) { res[i], errs[i] = s.Claim(ctx, reqs[i]) })
			f.waitingBatch()
			wait()
			release()
			claimsTruthful(t, s, reqs, res, errs)
			for i := range reqs {
				if i != 2 && (errs[i] != nil || !res[i].Claimed) {
					t.Errorf("claim %s: %+v, %v; want claimed alone", reqs[i].Key, res[i], errs[i])
				}
			}
			t.Logf("held claim: %+v %v", res[2].Claimed, errs[2])
			if _, got := showSettings(t, ctx, s); got != want {
				t.Errorf("after a claims batch timed out: %q, want %q", got, want)
			}
		})
	}
}

// Killed between/within its statements, in every mode, with Unkeyed claims
// and shared slots.
func TestABatchOfClaimsKilledAnswersEachCallerTruly(t *testing.T) {
	for _, mode := range batchQueryModes {
		t.Run(mode.name, func(t *testing.T) {
			ctx := context.Background()
			f := newBatchFixture(t, mode.params)
			s := f.store
			reqs := batchClaimsOf("killed", 7)
			reqs[0].Unkeyed, reqs[5].Unkeyed = true, true
			// 5 and 6 share a slot
			reqs[6].Session, reqs[6].FenceScope = reqs[5].Session, reqs[5].FenceScope
			release := f.hold(reqs[3].Key, false)
			pgstore.GatherClaims(s, len(reqs), 0)
			res, errs := make([]storekit.ClaimResult, len(reqs)), make([]error, len(reqs))
			wait := together(len(reqs), func(i int) { res[i], errs[i] = s.Claim(ctx, reqs[i]) })
			f.kill(f.waitingBatch())
			release()
			wait()
			claimsTruthful(t, s, reqs, res, errs)
			if res[5].Claimed == res[6].Claimed {
				t.Errorf("shared slot: %v %v (%v %v)", res[5].Claimed, res[6].Claimed, errs[5], errs[6])
			}
			for i := range 5 {
				if errs[i] != nil || !res[i].Claimed {
					t.Errorf("claim %s: %+v %v; want claimed", reqs[i].Key, res[i], errs[i])
				}
			}
		})
	}
}

// Claims fenced by principal (and by session) whose look beside the slot
// must refuse them, in a batch, in every mode and with the failpoints.
func TestABatchOfClaimsRefusesWhatIsHeldBesideItsSlot(t *testing.T) {
	for _, mode := range batchQueryModes {
		for _, fault := range []int{0, pgstore.FaultLostAfterCommit, pgstore.FaultLostBeforeCommit, pgstore.FaultRow} {
			t.Run(fmt.Sprintf("%s/fault%d", mode.name, fault), func(t *testing.T) {
				ctx := context.Background()
				f := newBatchFixture(t, mode.params)
				s := f.store
				now := time.Now()
				alice := storekit.Digest{0xa1}
				// A FenceOff action of tool "beside_p", principal alice, session s0.
				off := storekit.ClaimRequest{Key: "off-p", Tool: "beside_p", Principal: alice, Session: storekit.Digest{0x50}, Fingerprint: storekit.Digest{2},
					Owner: "owner-off-p", Now: now, Lease: time.Minute}
				if r, err := s.Claim(ctx, off); err != nil || !r.Claimed {
					t.Fatal(r, err)
				}
				// A FenceOff action of tool "beside_s", session s9 (for session fence).
				offS := off
				offS.Key, offS.Tool, offS.Session, offS.Owner = "off-s", "beside_s", storekit.Digest{0x59}, "owner-off-s"
				if r, err := s.Claim(ctx, offS); err != nil || !r.Claimed {
					t.Fatal(r, err)
				}
				var reqs []storekit.ClaimRequest
				// principal-fenced claims of other sessions, other tools' slots (each its own principal fence scope... must share alice's)
				for i := range 2 {
					reqs = append(reqs, storekit.ClaimRequest{Key: fmt.Sprintf("p-%d", i), Tool: "beside_p", Principal: alice, Session: storekit.Digest{0x60, byte(i)},
						FenceScope: alice, Fingerprint: storekit.Digest{2}, Owner: fmt.Sprintf("owner-p-%d", i), Now: now, Lease: time.Minute, Unkeyed: i == 1})
				}
				// session-fenced claim of beside_s, session s9
				reqs = append(reqs, storekit.ClaimRequest{Key: "s-0", Tool: "beside_s", Principal: alice, Session: offS.Session, FenceScope: offS.Session,
					Fingerprint: storekit.Digest{2}, Owner: "owner-s-0", Now: now, Lease: time.Minute})
				// fillers that must be granted
				fill := batchClaimsOf("fill", 3)
				reqs = append(reqs, fill...)
				res, errs := runClaimBatch(t, s, reqs, fault)
				claimsTruthful(t, s, reqs, res, errs)
				for i := range 3 {
					if res[i].Claimed {
						t.Errorf("claim %s beside an open FenceOff record was granted: %+v", reqs[i].Key, res[i])
					} else if errs[i] == nil && res[i].Blocked == nil {
						t.Errorf("claim %s: not claimed, no Blocked, no err: %+v", reqs[i].Key, res[i])
					} else if res[i].Blocked != nil {
						t.Logf("claim %s blocked by %s", reqs[i].Key, res[i].Blocked.Key)
					}
				}
				for i := 3; i < len(reqs); i++ {
					if errs[i] != nil || !res[i].Claimed {
						t.Errorf("filler %s: %+v %v", reqs[i].Key, res[i], errs[i])
					}
				}
			})
		}
	}
}

// Two stores (two processes) batch claims of the same keys and slots at
// once, several rounds, in every mode: one token per key, one holder per
// slot, every answer true.
func TestBatchesOfClaimsOfTwoProcessesGrantEachKeyAndSlotOnce(t *testing.T) {
	for _, mode := range batchQueryModes {
		t.Run(mode.name, func(t *testing.T) {
			f := newBatchFixture(t, mode.params)
			g, err := pgstore.Open(context.Background(), &pgstore.Options{URL: pgtest.Param(t, pgtest.URL(t), "application_name=second_process"+mode.params), Schema: f.store.Schema()})
			if err != nil {
				t.Fatal(err)
			}
			defer g.Close()
			for round := range 4 {
				const n = 8
				mk := func(who string) []storekit.ClaimRequest {
					reqs := batchClaimsOf(fmt.Sprintf("r%d", round), n)
					for i := range reqs {
						scope := storekit.Digest{0xcc, byte(round), byte(i / 2)}
						reqs[i].Session, reqs[i].FenceScope = scope, scope
						reqs[i].Owner = who + "-" + reqs[i].Key
						reqs[i].Unkeyed = i%3 == 0
					}
					return reqs
				}
				a, b := mk("a"), mk("b")
				pgstore.GatherClaims(f.store, n, []int{0, pgstore.FaultLostAfterCommit, pgstore.FaultLostBeforeCommit, pgstore.FaultRow}[round])
				pgstore.GatherClaims(g, n, 0)
				ra, ea := make([]storekit.ClaimResult, n), make([]error, n)
				rb, eb := make([]storekit.ClaimResult, n), make([]error, n)
				together(2*n, func(i int) {
					if i < n {
						ra[i], ea[i] = f.store.Claim(context.Background(), a[i])
					} else {
						rb[i-n], eb[i-n] = g.Claim(context.Background(), b[i-n])
					}
				})()
				all := append(append([]storekit.ClaimRequest{}, a...), b...)
				res := append(append([]storekit.ClaimResult{}, ra...), rb...)
				errs := append(append([]error{}, ea...), eb...)
				claimsTruthful(t, f.store, all, res, errs)
				// one holder per key and per slot across both processes
				holders := map[string]int{}
				for i := range all {
					if res[i].Claimed {
						holders[all[i].Key]++
						holders[fmt.Sprintf("slot %x", all[i].FenceScope[:3])]++
					}
				}
				for k, c := range holders {
					if c > 1 {
						t.Errorf("round %d: %s granted %d times", round, k, c)
					}
				}
				for i := range all {
					if errs[i] != nil {
						t.Logf("round %d: %s: %v", round, all[i].Key, errs[i])
					}
				}
			}
		})
	}
}

// A principal-fenced batch beside an action of the principal settled
// applied aside (a notice, holds no slot) and beside an unknown FenceOff
// action: refused while the notice holds; after the notice, one granted.
func TestABatchOfClaimsIsHeldBackByAnActionSettledApplied(t *testing.T) {
	for _, mode := range batchQueryModes {
		for _, fault := range []int{0, pgstore.FaultLostAfterCommit, pgstore.FaultLostBeforeCommit} {
			t.Run(fmt.Sprintf("%s/fault%d", mode.name, fault), func(t *testing.T) {
				ctx := context.Background()
				f := newBatchFixture(t, mode.params)
				s := f.store
				now := time.Now()
				alice := storekit.Digest{0xa3}
				mkOff := func(key, tool string) storekit.ClaimRequest {
					return storekit.ClaimRequest{Key: key, Tool: tool, Principal: alice, Session: storekit.Digest{0x52}, Fingerprint: storekit.Digest{2},
						Owner: "owner-" + key, Now: now, Lease: time.Minute}
				}
				// aside: tool T1, settled applied with a notice of 1h.
				aside := mkOff("aside", "t1")
				r, err := s.Claim(ctx, aside)
				if err != nil || !r.Claimed {
					t.Fatal(r, err)
				}
				if err := s.Finish(ctx, storekit.FinishRequest{Key: aside.Key, Token: r.Record.Token, State: storekit.Unknown, Attempts: 1, Now: now, TTL: time.Hour}); err != nil {
					t.Fatal(err)
				}
				take := aside
				take.TakeOver, take.Owner, take.Now = true, "owner-aside-check", now.Add(time.Second)
				r, err = s.Claim(ctx, take)
				if err != nil || !r.Claimed {
					t.Fatal(r, err)
				}
				if err := s.Finish(ctx, storekit.FinishRequest{Key: aside.Key, Token: r.Record.Token, State: storekit.Succeeded, Attempts: 1,
					Now: now.Add(time.Second), TTL: 24 * time.Hour, NoticeUntil: now.Add(time.Hour)}); err != nil {
					t.Fatal(err)
				}
				// unk: tool T2, FenceOff, unknown.
				unk := mkOff("unk", "t2")
				r, err = s.Claim(ctx, unk)
				if err != nil || !r.Claimed {
					t.Fatal(r, err)
				}
				if err := s.Finish(ctx, storekit.FinishRequest{Key: unk.Key, Token: r.Record.Token, State: storekit.Unknown, Attempts: 1, Now: now, TTL: time.Hour}); err != nil {
					t.Fatal(err)
				}
				fenced := func(key, tool string, sess byte, at time.Time) storekit.ClaimRequest {
					return storekit.ClaimRequest{Key: key, Tool: tool, Principal: alice, Session: storekit.Digest{0x70, sess}, FenceScope: alice,
						Fingerprint: storekit.Digest{2}, Owner: "owner-" + key, Now: at, Lease: time.Minute, Unkeyed: sess == 1}
				}
				at := now.Add(2 * time.Second)
				reqs := []storekit.ClaimRequest{fenced("f1-0", "t1", 0, at), fenced("f1-1", "t1", 1, at), fenced("f2-0", "t2", 0, at), fenced("f2-1", "t2", 1, at)}
				reqs = append(reqs, batchClaimsOf("fill", 2)...)
				res, errs := runClaimBatch(t, s, reqs, fault)
				claimsTruthful(t, s, reqs, res, errs)
				for i := range 4 {
					if res[i].Claimed {
						t.Errorf("claim %s beside %v granted", reqs[i].Key, []string{"aside", "unk"}[i/2])
					}
					if res[i].Blocked != nil {
						t.Logf("%s blocked by %s (%v)", reqs[i].Key, res[i].Blocked.Key, res[i].Blocked.State)
					} else {
						t.Logf("%s: %+v %v", reqs[i].Key, res[i].Claimed, errs[i])
					}
				}
				// After the notice: one of t1's pair granted.
				later := now.Add(2 * time.Hour)
				reqs = []storekit.ClaimRequest{fenced("g1-0", "t1", 0, later), fenced("g1-1", "t1", 1, later), fenced("g2-0", "t2", 0, later)}
				reqs = append(reqs, batchClaimsOf("fill2", 2)...)
				res, errs = runClaimBatch(t, s, reqs, fault)
				claimsTruthful(t, s, reqs, res, errs)
				if res[0].Claimed == res[1].Claimed {
					t.Errorf("after the notice: t1 pair claimed %v, %v (%v, %v); want exactly one", res[0].Claimed, res[1].Claimed, errs[0], errs[1])
				}
				if res[2].Claimed {
					t.Errorf("beside an unknown FenceOff action, later: granted")
				}
			})
		}
	}
}

// A claims batch cancelled by all its callers leaving while it waits on a
// held key: nothing leaks to the pooled connection; answers true.
func TestABatchOfClaimsItsCallersLeftLeavesNothing(t *testing.T) {
	for _, mode := range batchQueryModes {
		t.Run(mode.name, func(t *testing.T) {
			ctx := context.Background()
			f := newBatchFixture(t, "&pool_max_conns=1&synchronous_commit=local"+mode.params)
			s := f.store
			_, want := showSettings(t, ctx, s)
			reqs := batchClaimsOf("cancel", 5)
			reqs[0].Unkeyed = true
			release := f.hold(reqs[2].Key, false)
			pgstore.GatherClaims(s, len(reqs), 0)
			res, errs := make([]storekit.ClaimResult, len(reqs)), make([]error, len(reqs))
			wait := together(len(reqs), func(i int) {
				cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
				defer cancel()
				res[i], errs[i] = s.Claim(cctx, reqs[i])
			})
			f.waitingBatch()
			wait()
			release()
			time.Sleep(200 * time.Millisecond)
			claimsTruthful(t, s, reqs, res, errs)
			if _, got := showSettings(t, ctx, s); got != want {
				t.Errorf("after a claims batch cancelled: %q, want %q", got, want)
			}
			for i := range reqs {
				rec, err := s.Get(ctx, reqs[i].Key)
				t.Logf("%s: claimed %v err %v; record %v owner %q (%v)", reqs[i].Key, res[i].Claimed, errs[i], rec.State, rec.Owner, err)
			}
		})
	}
}

// A batch of claims commits, and the check after its commit that its
// Unkeyed claims are durable where a failover can go fails (an ERROR on
// the connection: the failpoint). The claims committed, so the batch was
// not refused: its keyed claims are granted under their tokens, and its
// Unkeyed ones, not known to be durable, are given back and refused with
// ErrNotDurable saying why — the tool did not act, and the same action
// asked again is claimed, not held back by its own record until its
// lease lapses.
func TestABatchOfClaimsWhoseDurabilityCheckFailsGivesBackOnlyItsUnkeyedClaims(t *testing.T) {
	for _, pipelined := range []bool{false, true} {
		t.Run(fmt.Sprintf("pipelined=%v", pipelined), func(t *testing.T) {
			ctx := context.Background()
			s := newBatchFixture(t, "").store
			if pipelined {
				pgstore.Pipeline(s)
			}
			reqs := batchClaimsOf(fmt.Sprintf("check%v", pipelined), 6)
			reqs[1].Unkeyed, reqs[4].Unkeyed = true, true
			res, errs := runClaimBatch(t, s, reqs, pgstore.FaultCheck)
			claimsTruthful(t, s, reqs, res, errs)
			for i, req := range reqs {
				switch {
				case !req.Unkeyed && (errs[i] != nil || !res[i].Claimed):
					t.Errorf("keyed claim %s: %+v, %v; want claimed", req.Key, res[i], errs[i])
				case req.Unkeyed && (!errors.Is(errs[i], storekit.ErrNotDurable) || !strings.Contains(fmt.Sprint(errs[i]), "division by zero")):
					t.Errorf("Unkeyed claim %s: %+v, %v; want ErrNotDurable naming the check's failure", req.Key, res[i], errs[i])
				case req.Unkeyed:
					if again, err := s.Claim(ctx, req); err != nil || !again.Claimed {
						t.Errorf("Unkeyed claim %s asked again after it was given back: %+v, %v; want claimed", req.Key, again, err)
					}
				}
			}
		})
	}
}

// The batch of claims with FaultCheck, in every pgx query mode and both
// write modes, while some of its callers have given up: no caller is
// answered claimed unless its record is its own; the Unkeyed claims are
// given back (no record left) and refused with ErrNotDurable; the keyed
// claims of callers that stayed are claimed; those of callers that left
// are released as orphans.
func TestABatchOfClaimsWhoseCheckFailsWhileCallersLeaveLeavesNothingBehind(t *testing.T) {
	for _, mode := range batchQueryModes {
		for _, pipelined := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/pipelined=%v", mode.name, pipelined), func(t *testing.T) {
				ctx := context.Background()
				f := newBatchFixture(t, mode.params)
				s := f.store
				if pipelined {
					pgstore.Pipeline(s)
				}
				reqs := batchClaimsOf(fmt.Sprintf("rv%v", pipelined), 8)
				for i := range reqs {
					reqs[i].Unkeyed = i%2 == 1
				}
				// Callers 0 and 1 give up right after they queue.
				leave := map[int]bool{0: true, 1: true}
				// The batch waits on a row another transaction inserted
				// for key 7, while callers 0 and 1 give up; then it goes on.
				release := f.hold(reqs[7].Key, false)
				pgstore.GatherClaims(s, len(reqs), pgstore.FaultCheck)
				res, errs := make([]storekit.ClaimResult, len(reqs)), make([]error, len(reqs))
				wait := together(len(reqs), func(i int) {
					c := ctx
					if leave[i] {
						var cancel context.CancelFunc
						c, cancel = context.WithTimeout(ctx, 100*time.Millisecond)
						defer cancel()
					}
					res[i], errs[i] = s.Claim(c, reqs[i])
				})
				f.waitingBatch()
				time.Sleep(300 * time.Millisecond)
				release()
				wait()
				time.Sleep(300 * time.Millisecond) // the orphans' releases
				for i := range leave {
					if !errors.Is(errs[i], context.DeadlineExceeded) {
						t.Fatalf("caller %d was to leave the batch: %+v, %v", i, res[i], errs[i])
					}
				}
				claimsTruthful(t, s, reqs, res, errs)
				for i, req := range reqs {
					rec, gerr := s.Get(ctx, req.Key)
					switch {
					case leave[i]:
						if gerr == nil && rec.State == storekit.Pending {
							t.Errorf("caller %s left (%v), yet its claim stands: %+v", req.Key, errs[i], rec)
						}
					case req.Unkeyed:
						if !errors.Is(errs[i], storekit.ErrNotDurable) || res[i].Claimed {
							t.Errorf("Unkeyed %s: %+v, %v; want ErrNotDurable", req.Key, res[i], errs[i])
						}
						if gerr == nil {
							t.Errorf("Unkeyed %s refused, yet its record stays: %+v", req.Key, rec)
						}
					default:
						if errs[i] != nil || !res[i].Claimed {
							t.Errorf("keyed %s: %+v, %v; want claimed", req.Key, res[i], errs[i])
						}
					}
				}
			})
		}
	}
}
