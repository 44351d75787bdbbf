package storekit

import (
	"testing"
	"time"
)

// A store that went back in time (a failover to a standby that had not
// received the primary's last writes) does not trust a missing record of
// an Unkeyed claim to mean a new action: DecideLost decides the key as if
// its record were pending under a holder that died when the store went
// back.
func TestDecideLostPresumesAHolderThatDiedWhenTheStoreWentBack(t *testing.T) {
	t0 := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	since, now := t0, t0.Add(30*time.Second)
	session := Digest{2}
	base := ClaimRequest{Key: "pay/1", Tool: "pay", Principal: Digest{1}, Session: session, Fingerprint: Digest{3},
		Owner: "o", Now: now, Lease: time.Minute, Unkeyed: true, FenceScope: session, Label: "invoice 7"}
	tokens := func() (uint64, error) { return 41, nil }

	t.Run("reconcilable: taken over, the destination is asked first", func(t *testing.T) {
		req := base
		req.TakeOver = true
		d, err := DecideLost(since, nil, nil, req, tokens)
		if err != nil {
			t.Fatal(err)
		}
		r := d.Result
		if !r.Claimed || !r.TookOver || !r.Lost || !d.Write {
			t.Fatalf("claimed=%v tookOver=%v lost=%v write=%v, want all true", r.Claimed, r.TookOver, r.Lost, d.Write)
		}
		if !r.HeldUntil.Equal(since) || !r.Since.Equal(since) {
			t.Errorf("held until %v since %v, want both %v: the earlier holder may have acted until the store went back", r.HeldUntil, r.Since, since)
		}
		if rec := r.Record; rec.State != Pending || !rec.TakenOver || rec.Attempts != 0 || rec.Token != 41 || rec.FenceScope != session || rec.Label != "invoice 7" {
			t.Errorf("record %+v: want pending, taken over, no attempt counted, token 41, in the session's slot, labelled", rec)
		}
	})

	t.Run("at-most-once: recorded unknown, nothing runs", func(t *testing.T) {
		d, err := DecideLost(since, nil, nil, base, tokens)
		if err != nil {
			t.Fatal(err)
		}
		r := d.Result
		if r.Claimed || !r.Lost || !d.Write {
			t.Fatalf("claimed=%v lost=%v write=%v, want a written record that is not the caller's", r.Claimed, r.Lost, d.Write)
		}
		rec := r.Record
		if rec.State != Unknown || rec.Attempts != 0 || rec.Token != 41 || rec.Owner != "" || !rec.LeaseExpiry.Equal(since) {
			t.Errorf("record %+v: want unknown, no attempt counted, token 41, no owner, held until %v", rec, since)
		}
		if !rec.HoldsSlot() || rec.Slot() != base.Slot() || !rec.AwaitsReconciliation(now) || !rec.Open() {
			t.Errorf("record %+v: want it holding its slot and awaiting reconciliation", rec)
		}
	})

	t.Run("an approved retry: its attempt may have run, the approval is spent", func(t *testing.T) {
		approved := Record{Key: base.Key, Tool: base.Tool, State: Unknown, RetryApproved: true, Principal: base.Principal, Session: session,
			Fingerprint: base.Fingerprint, Attempts: 1, Created: t0.Add(-time.Hour), Updated: t0.Add(-time.Minute), Expires: t0.Add(time.Hour),
			FenceScope: session, Resolution: &Resolution{Verdict: "not applied", By: "ops"}}
		d, err := DecideLost(since, &approved, nil, base, tokens)
		if err != nil {
			t.Fatal(err)
		}
		rec := d.Result.Record
		if d.Result.Claimed || !d.Result.Lost || !d.Write || rec.State != Unknown || rec.RetryApproved || rec.Attempts != 1 ||
			!rec.Created.Equal(approved.Created) || rec.Resolution == nil {
			t.Errorf("claimed=%v lost=%v write=%v record %+v: want it written unknown, not approved, its attempt and history kept",
				d.Result.Claimed, d.Result.Lost, d.Write, rec)
		}
	})

	t.Run("a record that lets nothing start is decided as ever", func(t *testing.T) {
		open := Record{Key: base.Key, Tool: base.Tool, State: Unknown, Principal: base.Principal, Session: session,
			Fingerprint: base.Fingerprint, Attempts: 1, Created: t0, Updated: t0, FenceScope: session}
		d, err := DecideLost(since, &open, nil, base, tokens)
		if err != nil {
			t.Fatal(err)
		}
		if d.Result.Lost || d.Write || d.Result.Record.State != Unknown {
			t.Errorf("%+v: want the unknown record returned as found", d)
		}
	})

	t.Run("a clock behind the notice: the holder died now, not later", func(t *testing.T) {
		d, err := DecideLost(now.Add(time.Hour), nil, nil, base, tokens)
		if err != nil {
			t.Fatal(err)
		}
		if rec := d.Result.Record; rec.State != Unknown || !rec.LeaseExpiry.Equal(now) {
			t.Errorf("record %+v: want unknown, held until now (%v)", rec, now)
		}
	})

	running := Record{Key: "pay/0", Tool: "pay", State: Pending, Principal: base.Principal, Session: session,
		LeaseExpiry: now.Add(time.Minute), FenceScope: session, Token: 7}
	beside := Record{Key: "pay/00", Tool: "pay", State: Unknown, Principal: base.Principal, Session: session, Token: 8}
	for _, tc := range []struct {
		name     string
		occupant Record
	}{
		{"the slot's holder runs", running},
		{"an unknown action beside the slot", beside},
	} {
		for _, takeOver := range []bool{false, true} {
			t.Run(tc.name, func(t *testing.T) {
				req := base
				req.TakeOver = takeOver
				d, err := DecideLost(since, nil, []Record{tc.occupant}, req, func() (uint64, error) {
					t.Fatal("a blocked claim took a token")
					return 0, nil
				})
				if err != nil {
					t.Fatal(err)
				}
				if b := d.Result.Blocked; b == nil || b.Key != tc.occupant.Key || d.Write || len(d.Occupants) != 0 || d.Result.Lost {
					t.Errorf("takeOver=%v: blocked=%v write=%v occupants=%d lost=%v, want blocked by %s and nothing written",
						takeOver, b, d.Write, len(d.Occupants), d.Result.Lost, tc.occupant.Key)
				}
			})
		}
	}

	t.Run("an ended notice is cleared, and the presumed record takes the slot", func(t *testing.T) {
		notice := Record{Key: "pay/0", Tool: "pay", State: Succeeded, Principal: base.Principal, Session: session,
			FenceScope: session, NoticeUntil: now.Add(-time.Second), Token: 7}
		d, err := DecideLost(since, nil, []Record{notice}, base, tokens)
		if err != nil {
			t.Fatal(err)
		}
		if len(d.Occupants) != 1 || !d.Occupants[0].NoticeUntil.IsZero() || d.Result.Record.State != Unknown || !d.Result.Lost {
			t.Errorf("occupants %+v, record %+v: want the notice cleared and the key recorded unknown", d.Occupants, d.Result.Record)
		}
	})
}

// A record the store kept may be older than the action: a claim made of it
// after it, and the attempt that claim sent, may be what the store lost.
// So a takeover of a kept record counts its last attempt as sent at the
// notice at the earliest; and a kept record from which the claim would
// start an attempt at once — a replaced action asked for again in its
// approved replacement's place — proves nothing, as a missing one does.
// (Found by fresh-context reviews: the takeover trusted the kept record's
// end of attempt; the action asked for again ran at once.)
func TestDecideLostDoubtsAKeptRecord(t *testing.T) {
	// X was unknown, approved, and then replaced by its rewording Y, itself
	// unknown and approved; on the old primary X was asked for again and
	// went on in Y's place: the standby kept neither that claim nor its
	// attempt.
	since, x, approved, req := keptXY()
	req.TakeOver, req.Replace = true, nil
	y := approved
	y.RetryApproved = false
	tok := uint64(100)
	next := func() (uint64, error) { tok++; return tok, nil }
	takenOverFromTheNotice := func(t *testing.T, what string, d ClaimDecision) {
		t.Helper()
		if r := d.Result; !r.Claimed || !r.TookOver || r.HeldUntil.Before(since) {
			t.Errorf("%s: %+v; want taken over, its last attempt counted as sent at the notice (%v)", what, r, since)
		}
	}
	t.Run("a kept unknown record taken over", func(t *testing.T) {
		yreq := req
		yreq.Key, yreq.Fingerprint = y.Key, y.Fingerprint
		d, err := DecideLost(since, &y, []Record{x}, yreq, next)
		if err != nil {
			t.Fatal(err)
		}
		takenOverFromTheNotice(t, "Y", d)
	})
	t.Run("a replaced action asked for again in its replacement's place", func(t *testing.T) {
		xreq := req
		xreq.Replace = &Replacement{Key: y.Key, Attempts: y.Attempts, TTL: 24 * time.Hour}
		d, err := DecideLost(since, &x, []Record{approved}, xreq, next)
		if err != nil {
			t.Fatal(err)
		}
		takenOverFromTheNotice(t, "X", d)
		if !d.Result.Lost {
			t.Errorf("X: not decided as a record the store may have lost: %+v", d.Result)
		}
	})
}
