package agenttool_test

import (
	"context"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/storekit"
)

// Leases are compared with the callers' clocks, which read nanoseconds
// (time.Now on Linux). pgstore keeps microseconds: a lease that ends at
// t+1m+0.5µs is stored as ending at t+1m, so at t+1m+0.1µs, while the
// holder's lease is live for every other store, pgstore lists the record
// as awaiting reconciliation, fences the scope with it, and hands it to a
// takeover: a second holder during the first one's lease.
func TestLiveLeaseIsNeverLapsedEarly(t *testing.T) {
	storeKinds(t, func(t *testing.T, open func() agenttool.Store) {
		s := open()
		ctx := context.Background()
		t0 := time.Date(2026, 11, 29, 12, 0, 0, 500, time.UTC) // 0.5µs past the second
		p, sess := agenttool.Digest{0xa1}, agenttool.Digest{0x51}
		req := storekit.ClaimRequest{Key: "send_email/holder", Tool: "send_email", Principal: p, Session: sess,
			Fingerprint: agenttool.Digest{1}, Owner: "holder", Now: t0, Lease: time.Minute}
		first, err := s.Claim(ctx, req)
		if err != nil || !first.Claimed {
			t.Fatalf("claim: %+v %v", first, err)
		}
		at := time.Date(2026, 11, 29, 12, 1, 0, 100, time.UTC) // 0.4µs before the lease ends
		if first.Record.AwaitsReconciliation(at) {
			t.Fatal("test setup: the lease should be live")
		}
		listed, err := s.ListUnknown(ctx, storekit.ListRequest{Tool: "send_email", Principal: &p, Now: at})
		if err != nil {
			t.Fatal(err)
		}
		other := req
		other.Key, other.Owner, other.Now, other.Fence = "send_email/new", "new", at, &storekit.Fence{Session: true}
		fenced, err := s.Claim(ctx, other)
		if err != nil {
			t.Fatal(err)
		}
		take := req
		take.Owner, take.Now, take.TakeOver = "taker", at, true
		second, err := s.Claim(ctx, take)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("at %s: listed %d, fenced %v, takeover claimed %v", at.Format(time.RFC3339Nano), len(listed), fenced.Fenced, second.Claimed)
		if len(listed) != 0 || fenced.Fenced || second.Claimed {
			t.Fatalf("a live lease (ends %s) treated as lapsed at %s: listed %d, fenced %v, taken over %v",
				first.Record.LeaseExpiry.Format(time.RFC3339Nano), at.Format(time.RFC3339Nano), len(listed), fenced.Fenced, second.Claimed)
		}
	})
}
