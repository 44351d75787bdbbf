package storekit

import (
	"testing"
	"time"
)

// A marked record (it went on in place of an action proved applied,
// NoticeUntil UntilTold) approved for one more attempt, asked for again by
// its own conversation's model on a store that went back in time a short
// while ago: DecideLost presumes a pending record from it and copies its
// attempts, history, label, input — not its mark. The model's claim is not
// held back and told (as DecideClaim would), and the record written keeps
// no mark: the write runs (a reconcilable tool, once its check finds it not
// applied) or is left unknown, unmarked, for people and later calls alike.
func TestDecideLostKeepsTheMarkOfAnApprovedStandIn(t *testing.T) {
	t0 := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	since, now := t0, t0.Add(30*time.Second)
	session := Digest{2}
	base := ClaimRequest{Key: "send/b", Tool: "send", Principal: Digest{1}, Session: session, Fingerprint: Digest{3},
		Owner: "o", Now: now, Lease: time.Minute, Unkeyed: true, FenceScope: session, NoticeHold: 10 * time.Second}
	marked := Record{Key: base.Key, Tool: base.Tool, State: Unknown, RetryApproved: true, Principal: base.Principal, Session: session,
		Fingerprint: base.Fingerprint, Attempts: 1, Created: t0.Add(-time.Hour), Updated: t0.Add(-time.Minute), Expires: UntilTold,
		FenceScope: session, Replaces: "send/a", NoticeUntil: UntilTold, StandsFor: "send/a", Resolution: &Resolution{Verdict: "not applied", By: "ops"}}
	tokens := func() (uint64, error) { return 41, nil }

	// Control: the same claim on a store that did not go back.
	d, err := DecideClaim(&marked, nil, base, tokens)
	if err != nil || d.Result.Blocked == nil || d.Result.Claimed {
		t.Fatalf("control (DecideClaim): %+v, %v; want held back and told", d.Result, err)
	}
	for _, takeOver := range []bool{true, false} {
		req := base
		req.TakeOver = takeOver
		d, err := DecideLost(since, &marked, nil, req, tokens)
		if err != nil {
			t.Fatal(err)
		}
		r := d.Result
		if r.Blocked == nil {
			t.Errorf("takeOver=%v: claimed=%v tookOver=%v lost=%v, record %v mark %v: want held back by its mark and told, as DecideClaim does",
				takeOver, r.Claimed, r.TookOver, r.Lost, r.Record.State, r.Record.NoticeUntil)
		}
		if d.Write && (r.Record.NoticeUntil.IsZero() || r.Record.StandsFor != marked.StandsFor) {
			t.Errorf("takeOver=%v: the record written (%v) has lost its mark (%v standing for %q; was %v for %q)",
				takeOver, r.Record.State, r.Record.NoticeUntil, r.Record.StandsFor, marked.NoticeUntil, marked.StandsFor)
		}
	}
}

// A record marked by an earlier version keeps its mark and names none: a
// mark that ends no later names it, and writes. A mark for another action
// proved applied after names that one, the later of the two marks kept —
// its model is told of it too — and the same mark again writes nothing.
func TestDecideMarkNamesTheActionItStandsFor(t *testing.T) {
	t0 := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	session := Digest{2}
	told := t0.Add(time.Hour)
	legacy := Record{Key: "send/c", Tool: "send", State: Unknown, Session: session, Replaces: "send/b", NoticeUntil: told}
	req := MarkRequest{Key: legacy.Key, Session: session, Until: told, For: "send/a", Now: t0}
	got, write, err := DecideMark(&legacy, req)
	if err != nil || !write || got.StandsFor != "send/a" || !got.NoticeUntil.Equal(told) {
		t.Errorf("an earlier version's mark, marked again: %v for %q, write %v, %v; want named send/a, the mark as it was, written", got.NoticeUntil, got.StandsFor, write, err)
	}
	named := got
	if again, write, err := DecideMark(&named, req); err != nil || write || again.StandsFor != "send/a" {
		t.Errorf("the same mark again: for %q, write %v, %v; want nothing written", again.StandsFor, write, err)
	}
	req.For = "send/b"
	if next, write, err := DecideMark(&named, req); err != nil || !write || next.StandsFor != "send/b" || !next.NoticeUntil.Equal(told) {
		t.Errorf("a mark for another action proved applied after: %v for %q, write %v, %v; want named send/b, the mark as it was", next.NoticeUntil, next.StandsFor, write, err)
	}
	req.Until = UntilTold
	if later, write, err := DecideMark(&named, req); err != nil || !write || later.StandsFor != "send/b" || !later.NoticeUntil.Equal(UntilTold) {
		t.Errorf("a later mark for it: %v for %q, write %v, %v; want the later mark and its name", later.NoticeUntil, later.StandsFor, write, err)
	}
}

// A version before this one left a marked record's lifetime at its mark's
// end (UntilTold) and never moved it back. The claim that tells such a
// record, or ends its mark once told, gives it its tool's lifetime from
// then (ClaimRequest.KeyTTL); one that does not know it (0) leaves it.
func TestATellGivesALifetimeBackToARecordKeptUntil2262(t *testing.T) {
	t0 := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	session := Digest{2}
	req := ClaimRequest{Key: "send/b", Tool: "send", Principal: Digest{1}, Session: session, Fingerprint: Digest{3},
		Owner: "o", Now: t0, Lease: time.Minute, FenceScope: session, NoticeHold: 10 * time.Second, KeyTTL: time.Hour}
	legacy := Record{Key: req.Key, Tool: req.Tool, State: Unknown, RetryApproved: true, Principal: req.Principal, Session: session,
		Fingerprint: req.Fingerprint, Attempts: 1, Created: t0.Add(-time.Hour), Updated: t0.Add(-time.Minute), Expires: UntilTold,
		FenceScope: session, NoticeUntil: UntilTold, StandsFor: "send/a"}
	tokens := func() (uint64, error) { return 41, nil }
	d, err := DecideClaim(&legacy, nil, req, tokens)
	if err != nil || d.Result.Blocked == nil || !d.Write {
		t.Fatalf("its own call for a model: %+v, %v; want held back and told", d.Result, err)
	}
	if told := d.Result.Record; !told.Expires.Equal(t0.Add(time.Hour)) || !told.SweepAt().Equal(t0.Add(time.Hour)) {
		t.Errorf("told: expires %v, swept from %v; want its tool's lifetime from now, %v", told.Expires, told.SweepAt(), t0.Add(time.Hour))
	}
	req.KeyTTL = 0
	if d, err := DecideClaim(&legacy, nil, req, tokens); err != nil || !d.Result.Record.Expires.Equal(UntilTold) {
		t.Errorf("told by a claim that does not know its tool's lifetime: expires %v, %v; want left as it was", d.Result.Record.Expires, err)
	}
}
