package mcpguard_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/mcpguard"
	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/internal/pgtest"
)

// fakeClock is a clock the test moves.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// codeOf is an envelope's error code, or its status if none.
func codeOf(env envelope.Envelope) string {
	if env.Error == nil {
		return string(env.Status)
	}
	return env.Error.Code
}

// mustBeHeldBack checks that env answers a call held back by the notice
// of ref, an action found done.
func mustBeHeldBack(t *testing.T, what string, env envelope.Envelope, ref string) {
	t.Helper()
	if env.Status != envelope.DefiniteFailure || env.Error == nil || env.Error.Code != envelope.CodeEarlierApplied ||
		env.Earlier == nil || env.Earlier.RequestRef != ref {
		t.Errorf("%s: %s; want earlier_action_applied for %s", what, env, ref)
	}
}

var rewordedFlight = map[string]any{"flight": "TP1234", "passenger": "Ana M. Lima"}

// A reconcilable booking left unknown; a reworded tools/call finds it
// booked; the client retries the reworded call, later, and the original.
func TestGuard_ARewordedCallHeldBackStaysHeldBackWhenRetried(t *testing.T) {
	a := &airline{}
	clk := &fakeClock{now: time.Now()}
	r := newRig(t, a, rigOptions{tune: func(_ string, o *agenttool.Options) { o.Now = clk.Now }})
	a.setFindRefDown(true)
	a.lose(1)
	_, x := r.call("book_noted", lunchFlight)
	if x.Status != envelope.UnknownOutcome {
		t.Fatalf("first: %s", x)
	}
	a.setFindRefDown(false)
	_, k := r.call("book_noted", rewordedFlight)
	mustBeHeldBack(t, "the reworded copy", k, x.RequestRef)
	_, k2 := r.call("book_noted", rewordedFlight)
	mustBeHeldBack(t, "the reworded copy again", k2, x.RequestRef)
	_, x2 := r.call("book_noted", lunchFlight)
	if x2.Status != envelope.Success {
		t.Errorf("the original again: %s; want success", x2)
	}
	clk.Advance(time.Hour)
	_, k3 := r.call("book_noted", rewordedFlight)
	mustBeHeldBack(t, "the reworded copy an hour later", k3, x.RequestRef)
	if n := a.count(); n != 1 {
		t.Errorf("%d bookings, want 1", n)
	}
	_, other := r.call("book_noted", map[string]any{"flight": "TP9", "passenger": "Ana Lima"})
	if other.Status != envelope.Success {
		t.Errorf("another booking later: %s", other)
	}
}

// Keyed: the reworded copy told that the original's resend settles it;
// the resend and the copy interleave, then the copy is asked again
// after the notice.
func TestGuard_AKeyedCopyNeverRunsBesideItsActionsResend(t *testing.T) {
	for round := 0; round < 5; round++ {
		a := &airline{}
		clk := &fakeClock{now: time.Now()}
		r := newRig(t, a, rigOptions{tune: func(_ string, o *agenttool.Options) { o.Now = clk.Now }})
		c2 := connect(t, r.guard)
		a.lose(2)
		_, x := r.call("book", lunchFlight)
		if x.Status != envelope.UnknownOutcome {
			t.Fatalf("first: %s", x)
		}
		_, k := r.call("book", rewordedFlight)
		if codeOf(k) != envelope.CodeEarlierUnknown {
			t.Errorf("copy while unknown: %s", k)
		}
		var wg sync.WaitGroup
		var xr, kr envelope.Envelope
		wg.Add(2)
		go func() { defer wg.Done(); _, xr = call(t, r.client, "book", lunchFlight, nil) }()
		go func() { defer wg.Done(); _, kr = call(t, c2, "book", rewordedFlight, nil) }()
		wg.Wait()
		t.Logf("round %d resend: %s / copy: %s", round, codeOf(xr), codeOf(kr))
		if kr.Status == envelope.Success {
			t.Errorf("the copy ran: %s", kr)
		}
		if xr.Status != envelope.Success {
			t.Errorf("resend: %s", xr)
		}
		_, k2 := r.call("book", rewordedFlight)
		t.Logf("copy after: %s", codeOf(k2))
		clk.Advance(time.Minute)
		_, k3 := r.call("book", rewordedFlight)
		t.Logf("copy after notice: %s", codeOf(k3))
		if n := a.count(); n != 1 {
			t.Errorf("round %d: %d bookings, want 1", round, n)
		}
	}
}

func guardsOnAClock(t *testing.T, up *mcp.Server, cfgs []string, store agenttool.Store, clk *fakeClock) []*mcp.ClientSession {
	var out []*mcp.ClientSession
	for _, cfg := range cfgs {
		parsed, err := mcpguard.ParseConfig([]byte(cfg))
		if err != nil {
			t.Fatal(err)
		}
		g, err := mcpguard.New(context.Background(), parsed, &mcpguard.Options{Store: store, Logger: discard(),
			Transport: serving(up),
			Tune: func(_ string, o *agenttool.Options) {
				o.WaitTimeout = 5e9
				o.Now = clk.Now
				o.Retry = agenttool.RetryPolicy{MaxAttempts: 2, InitialInterval: time.Millisecond, MaxElapsed: time.Second}
			}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { g.Close() })
		out = append(out, connect(t, g))
	}
	return out
}

// Two guards on one PostgreSQL: the unknown action through one, the
// reworded copy through the other, retries crossed.
func TestGuard_TwoGuardsOnOnePostgreSQLKeepACopyHeldBack(t *testing.T) {
	store := pgtest.Open(t)
	a := &airline{}
	clk := &fakeClock{now: time.Now()}
	cs := guardsOnAClock(t, a.server(), []string{guardConfig, guardConfig}, store, clk)
	a.setFindRefDown(true)
	a.lose(1)
	_, x := call(t, cs[0], "book_noted", lunchFlight, nil)
	if x.Status != envelope.UnknownOutcome {
		t.Fatalf("first: %s", x)
	}
	a.setFindRefDown(false)
	// Both at once: the reworded copy through B, the original through A.
	var wg sync.WaitGroup
	var k, x2 envelope.Envelope
	wg.Add(2)
	go func() { defer wg.Done(); _, k = call(t, cs[1], "book_noted", rewordedFlight, nil) }()
	go func() { defer wg.Done(); _, x2 = call(t, cs[0], "book_noted", lunchFlight, nil) }()
	wg.Wait()
	t.Logf("copy: %s\noriginal: %s", k, x2)
	if k.Status == envelope.Success {
		t.Errorf("the copy ran")
	}
	clk.Advance(time.Hour)
	for i, c := range cs {
		_, k2 := call(t, c, "book_noted", rewordedFlight, nil)
		t.Logf("copy via %d an hour later: %s", i, codeOf(k2))
		if k2.Status == envelope.Success {
			t.Errorf("the copy via guard %d ran an hour later: %s", i, k2)
		}
	}
	if n := a.count(); n != 1 {
		t.Errorf("%d bookings, want 1", n)
	}
}

// Two principals, two guards, one PostgreSQL store, same arguments: a
// held-back answer never names the other principal's action.
func TestGuard_AHeldBackCopyNeverNamesAnotherPrincipalsAction(t *testing.T) {
	store := pgtest.Open(t)
	a := &airline{}
	clk := &fakeClock{now: time.Now()}
	bob := strings.Replace(guardConfig, `"principal": "ana@example.com"`, `"principal": "bob@example.com"`, 1)
	cs := guardsOnAClock(t, a.server(), []string{guardConfig, bob}, store, clk)
	a.setFindRefDown(true)
	a.lose(1)
	_, x := call(t, cs[0], "book_noted", lunchFlight, nil)
	if x.Status != envelope.UnknownOutcome {
		t.Fatalf("first: %s", x)
	}
	a.setFindRefDown(false)
	_, k := call(t, cs[0], "book_noted", rewordedFlight, nil)
	mustBeHeldBack(t, "ana's copy", k, x.RequestRef)
	for _, in := range []map[string]any{lunchFlight, rewordedFlight} {
		_, b := call(t, cs[1], "book_noted", in, nil)
		if b.Status != envelope.Success || (b.Earlier != nil && b.Earlier.RequestRef == x.RequestRef) || b.RequestRef == x.RequestRef || b.RequestRef == k.RequestRef {
			t.Errorf("bob's %v: %s", in, b)
		}
	}
}

// Keyed, two guards on one PostgreSQL: the original's resend through
// one and the reworded copy through the other, at once, round after round.
func TestGuard_TwoGuardsOnOnePostgreSQLNeverRunAKeyedCopy(t *testing.T) {
	for round := 0; round < 4; round++ {
		store := pgtest.Open(t)
		a := &airline{}
		clk := &fakeClock{now: time.Now()}
		cs := guardsOnAClock(t, a.server(), []string{guardConfig, guardConfig}, store, clk)
		a.lose(2)
		_, x := call(t, cs[0], "book", lunchFlight, nil)
		if x.Status != envelope.UnknownOutcome {
			t.Fatalf("first: %s", x)
		}
		var wg sync.WaitGroup
		envs := make([]envelope.Envelope, 4)
		wg.Add(4)
		go func() { defer wg.Done(); _, envs[0] = call(t, cs[1], "book", lunchFlight, nil) }()
		go func() { defer wg.Done(); _, envs[1] = call(t, cs[0], "book", rewordedFlight, nil) }()
		go func() { defer wg.Done(); _, envs[2] = call(t, cs[1], "book", rewordedFlight, nil) }()
		go func() { defer wg.Done(); _, envs[3] = call(t, cs[0], "book", lunchFlight, nil) }()
		wg.Wait()
		t.Logf("round %d: %s %s %s %s", round, codeOf(envs[0]), codeOf(envs[1]), codeOf(envs[2]), codeOf(envs[3]))
		for i, env := range envs {
			if copy := i == 1 || i == 2; copy && env.Status == envelope.Success || !copy && env.Status != envelope.Success {
				t.Errorf("round %d call %d: %s", round, i, env)
			}
		}
		if n := a.count(); n != 1 {
			t.Errorf("round %d: %d bookings, want 1", round, n)
		}
	}
}
