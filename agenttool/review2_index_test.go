package agenttool_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/boltstore"
	"github.com/retrysafe/retrysafe/agenttool/pgstore"
	"github.com/retrysafe/retrysafe/agenttool/storekit"
)

// A random walk of claims (with fences), renewals (also with clocks that
// disagree), finishes, releases, takeovers, sweeps and boltstore restarts.
// After every step, the index answers (ListUnknown with Tool+Principal
// [+Session], ClaimResult.Fenced) must equal the full listing filtered.
func TestScopeIndexAgreesWithTheFullListing(t *testing.T) {
	storeKinds(t, func(t *testing.T, open func() agenttool.Store) {
		seeds := uint64(12)
		if _, remote := open().(*pgstore.Store); remote {
			seeds = 3 // some 10,000 queries a seed
		}
		for seed := range seeds {
			walkIndex(t, seed, open)
		}
	})
}

func walkIndex(t *testing.T, seed uint64, open func() agenttool.Store) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(seed, 7))
	s := open()
	var path string
	if b, ok := s.(*boltstore.Store); ok {
		path = b.Path()
	}
	tools := []string{"send_email", "send_email2"}
	principals := []agenttool.Digest{{0xa1}, {0xb2}}
	sessions := []agenttool.Digest{{0x51}, {0x52}}
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	type held struct {
		key   string
		token uint64
	}
	var holds []held
	keys := make([]string, 12)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%d/%d", seed, i)
	}
	// every key keeps one tool, principal and session
	scopeOf := func(k int) (string, agenttool.Digest, agenttool.Digest) {
		return tools[k%2], principals[(k/2)%2], sessions[(k/4)%2]
	}
	all := func(at time.Time) []agenttool.Record {
		recs, err := s.ListUnknown(ctx, storekit.ListRequest{Now: at, Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		return recs
	}
	// every record, whatever its state: the oracle of the fence, which also
	// counts pending records taken over from an unknown outcome
	every := func() []agenttool.Record {
		var recs []agenttool.Record
		for _, k := range keys {
			if r, err := s.Get(ctx, k); err == nil {
				recs = append(recs, r)
			}
		}
		return recs
	}
	check := func(step int, what string, at time.Time) {
		t.Helper()
		full, records := all(at), every()
		for _, tool := range tools {
			for _, p := range principals {
				for _, sess := range append([]*agenttool.Digest{nil}, &sessions[0], &sessions[1]) {
					req := storekit.ListRequest{Tool: tool, Principal: &p, Session: sess, Now: at, Limit: 1000}
					got, err := s.ListUnknown(ctx, req)
					if err != nil {
						t.Fatal(err)
					}
					var want, have []string
					for _, r := range full {
						if req.Matches(&r) {
							want = append(want, r.Key)
						}
					}
					for _, r := range got {
						have = append(have, r.Key)
					}
					if !slices.Equal(want, have) {
						t.Fatalf("seed %d step %d (%s): scope listing %s/%x/%v: %v, full listing says %v", seed, step, what, tool, p[:1], sess != nil, have, want)
					}
					// What the fence waits for: the same, and the records
					// held after a takeover.
					req.Held = true
					got, err = s.ListUnknown(ctx, req)
					if err != nil {
						t.Fatal(err)
					}
					want, have = nil, nil
					for _, r := range records {
						if req.Lists(&r) {
							want = append(want, r.Key)
						}
					}
					slices.Sort(want)
					for _, r := range got {
						have = append(have, r.Key)
					}
					if !slices.Equal(want, have) {
						t.Fatalf("seed %d step %d (%s): held listing %s/%x/%v: %v, the records say %v", seed, step, what, tool, p[:1], sess != nil, have, want)
					}
				}
			}
		}
	}
	for step := range 300 {
		k := rng.IntN(len(keys))
		tool, p, sess := scopeOf(k)
		skew := time.Duration(rng.IntN(5)-2) * 20 * time.Second // callers' clocks disagree by up to ±40s
		at := now.Add(skew)
		var what string
		switch op := rng.IntN(10); {
		case op < 3 || len(holds) == 0:
			req := storekit.ClaimRequest{Key: keys[k], Tool: tool, Principal: p, Session: sess, Fingerprint: agenttool.Digest{1},
				Owner: fmt.Sprintf("o%d", step), Now: at, Lease: time.Minute, TakeOver: rng.IntN(2) == 0,
				Fence: &storekit.Fence{Session: rng.IntN(2) == 0}}
			before := every()
			res, err := s.Claim(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			what = fmt.Sprintf("claim %s takeover=%v: claimed=%v fenced=%v", req.Key, req.TakeOver, res.Claimed, res.Fenced)
			if res.Claimed {
				holds = append(holds, held{req.Key, res.Record.Token})
				want := slices.ContainsFunc(before, func(r agenttool.Record) bool { return req.Fences(&r) })
				if res.Fenced != want {
					t.Fatalf("seed %d step %d: %s; the full listing says fenced=%v", seed, step, what, want)
				}
			}
		case op < 6:
			h := holds[rng.IntN(len(holds))]
			err := s.Renew(ctx, storekit.RenewRequest{Key: h.key, Token: h.token, Until: at.Add(time.Duration(rng.IntN(120)) * time.Second), Now: at})
			what = fmt.Sprintf("renew %s: %v", h.key, err)
		case op < 8:
			i := rng.IntN(len(holds))
			h := holds[i]
			states := []agenttool.State{agenttool.Succeeded, agenttool.Failed, agenttool.Unknown}
			st := states[rng.IntN(3)]
			req := storekit.FinishRequest{Key: h.key, Token: h.token, State: st, Attempts: 1, Now: at, TTL: time.Hour,
				RetryApproved: st == agenttool.Unknown && rng.IntN(3) == 0, HeldUntil: at.Add(-time.Duration(rng.IntN(3)) * time.Minute)}
			err := s.Finish(ctx, req)
			what = fmt.Sprintf("finish %s %v: %v", h.key, st, err)
			holds = slices.Delete(holds, i, i+1)
		case op < 9:
			i := rng.IntN(len(holds))
			h := holds[i]
			err := s.Release(ctx, h.key, h.token)
			what = fmt.Sprintf("release %s: %v", h.key, err)
			holds = slices.Delete(holds, i, i+1)
		default:
			if path != "" && rng.IntN(2) == 0 {
				s.(*boltstore.Store).Close()
				b, err := boltstore.Open(path, nil)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { b.Close() })
				s = b
				what = "restart"
			} else {
				n, err := s.Sweep(ctx, storekit.SweepRequest{Now: at})
				what = fmt.Sprintf("sweep: %d %v", n, err)
			}
		}
		now = now.Add(time.Duration(rng.IntN(40)) * time.Second)
		for _, probe := range []time.Time{now, now.Add(-time.Minute), now.Add(time.Minute)} {
			check(step, what, probe)
		}
	}
}
