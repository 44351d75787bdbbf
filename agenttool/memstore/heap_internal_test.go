package memstore

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe/agenttool/storekit"
)

// The expiry heap holds about as many entries as the store holds records.
// A told mark moves its record's SweepAt from 2262 to the mark's told end:
// the entry pushed for 2262 pops in 2262, so each mark or notice told
// would leave one behind, holding a key long swept, for the life of the
// process (found reviewing d8e66dd). Here 300 actions are approved,
// marked, told by their own call and swept.
func TestTheExpiryHeapStaysTheSizeOfTheStore(t *testing.T) {
	ctx := context.Background()
	s := New()
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	alice := storekit.Digest{0xa1}
	for n := range 300 {
		key, session := fmt.Sprint("C", n), storekit.Digest{0x59, byte(n), byte(n >> 8)}
		req := storekit.ClaimRequest{Key: key, Tool: "send_email", Principal: alice, Session: session, Fingerprint: storekit.Digest{1},
			Owner: "o-" + key, Now: t0, Lease: time.Minute, FenceScope: session, NoticeHold: 10 * time.Second}
		c, err := s.Claim(ctx, req)
		if err != nil || !c.Claimed {
			t.Fatal(c, err)
		}
		if err := s.Finish(ctx, storekit.FinishRequest{Key: key, Token: c.Record.Token, State: storekit.Unknown, Attempts: 1, Now: t0, RetryApproved: true, TTL: time.Hour}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Mark(ctx, storekit.MarkRequest{Key: key, Session: session, Until: storekit.UntilTold, For: "send_email/A", Now: t0.Add(time.Second)}); err != nil {
			t.Fatal(err)
		}
		req.Owner, req.Now = "resend", t0.Add(time.Minute)
		if d, err := s.Claim(ctx, req); err != nil || d.Blocked == nil || d.Blocked.Key != key {
			t.Fatalf("%s resent for its model: %+v, %v; want held back by its mark, and told", key, d, err)
		}
	}
	if n, err := s.Sweep(ctx, storekit.SweepRequest{Now: t0.Add(24 * time.Hour), Limit: 1000}); n != 300 || err != nil {
		t.Fatalf("a sweep a day later: %d, %v; want all 300 swept", n, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.index) != 0 || len(s.expiry) > 64 {
		t.Errorf("after every record was swept: %d records, %d expiry entries; want none, and a few entries at most", len(s.index), len(s.expiry))
	}
}
