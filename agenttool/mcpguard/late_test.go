package mcpguard_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/mcpguard"
	"github.com/retrysafe/retrysafe/envelope"
)

// politeAirline is a plain MCP server whose first book_noted takes commit
// to commit and stops, booking nothing, if its call is cancelled before
// then (the handler honours its context, as the Go SDK cancels it on
// notifications/cancelled); later calls book at once. firstDone is closed
// once the first call has committed or stopped.
func politeAirline(a *airline, commit time.Duration) (s *mcp.Server, firstDone <-chan struct{}) {
	done := make(chan struct{})
	var once sync.Once
	var mu sync.Mutex
	calls := 0
	s = mcp.NewServer(&mcp.Implementation{Name: "airline", Version: "1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "book_noted", Description: "Book one seat, keeping a client reference."},
		func(ctx context.Context, _ *mcp.CallToolRequest, in bookIn) (*mcp.CallToolResult, booking, error) {
			mu.Lock()
			calls++
			first := calls == 1
			mu.Unlock()
			if !first {
				return a.book(in)
			}
			defer once.Do(func() { close(done) })
			select {
			case <-time.After(commit):
				return a.book(in)
			case <-ctx.Done():
				return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "cancelled, nothing booked"}}}, booking{}, nil
			}
		})
	type findIn struct {
		Reference string `json:"client_reference"`
	}
	mcp.AddTool(s, &mcp.Tool{Name: "find_booking", Description: "Find a booking by its client reference."},
		func(ctx context.Context, _ *mcp.CallToolRequest, in findIn) (*mcp.CallToolResult, map[string]any, error) {
			a.mu.Lock()
			defer a.mu.Unlock()
			for _, b := range a.bookings {
				if b.Reference == in.Reference {
					return nil, map[string]any{"found": true, "booking": b}, nil
				}
			}
			return nil, map[string]any{"found": false}, nil
		})
	return s, done
}

// I1 with listen_late, for a reconcilable tool configured as
// docs/guard.md shows it. The guard trusts a check's "not found" once
// attempt_timeout (plus a second) has passed since the last attempt was
// sent, "since a request the server took may still land until then". With
// listen_late the guard no longer cancels the attempt at the server at its
// deadline: it keeps the request open there for up to listen_late more,
// and the request may land until then. A check in that window that finds
// nothing yet must not let a second attempt go.
//
// The server honours cancellation and commits its first booking after
// 3s. With listen_late "0s" the guard cancels the request at the deadline
// (200ms), the server books nothing, and the retry books once. With
// listen_late "1m" the request stays open, and the model's retry 1.5s
// after the unknown outcome is checked: nothing found yet, more than
// attempt_timeout + 1s since sent, but the request may land for a minute
// more — a second booking sent then would make two for one action.
func TestGuard_ACheckNeverLetsASecondAttemptGoWhileTheGuardStillListensForTheFirst(t *testing.T) {
	for _, listenLate := range []string{"0s", "1m"} {
		t.Run("listen_late="+listenLate, func(t *testing.T) {
			a := &airline{}
			up, firstDone := politeAirline(a, 3*time.Second)
			late := `, "listen_late": "` + listenLate + `"`
			g := guardOver(t, up, `{"principal": "ana@example.com", "mcpServers": {"airline": {"command": "airline-mcp", "tools": {
			  "book_noted": {"class": "reconcilable", "ref_argument": "client_reference", "attempt_timeout": "200ms"`+late+`,
			    "check": {"tool": "find_booking", "arguments": {"client_reference": "${ref}"},
			      "applied": {"pointer": "/found", "equals": true}, "not_applied": {"pointer": "/found", "equals": false}}},
			  "find_booking": {"class": "read_only"}}}}}`, mcpguard.Options{})
			cs := connect(t, g)

			_, first := call(t, cs, "book_noted", lunchFlight, nil)
			if first.Status != envelope.UnknownOutcome {
				t.Fatalf("a call past its attempt timeout: %s; want unknown_outcome", first)
			}
			// attempt_timeout + 1s after the attempt ended, and well before
			// the first request commits (3s).
			time.Sleep(1500 * time.Millisecond)
			_, again := call(t, cs, "book_noted", lunchFlight, nil)
			select {
			case <-firstDone:
			case <-time.After(10 * time.Second):
				t.Fatal("the first request neither committed nor stopped in 10s")
			}
			time.Sleep(100 * time.Millisecond)
			t.Logf("first: %s\nretry: %s", first, again)
			if n := a.count(); n != 1 {
				t.Errorf("%d bookings for one action, want 1 (the retry answered %s)", n, again.Status)
			}
		})
	}
}

// forgetfulAirline is a plain MCP server whose book honours an
// idempotency key for keyTTL after it first booked under it, as a
// Stripe-style server does for its key's lifetime. The first call books
// and its reply is lost; the second waits secondDelay before it looks at
// its key (a queue), and stops, booking nothing, if its call is cancelled
// first. secondDone is closed once the second call has booked, replayed
// or stopped.
func forgetfulAirline(a *airline, keyTTL, secondDelay time.Duration) (s *mcp.Server, secondDone <-chan struct{}) {
	done := make(chan struct{})
	var once sync.Once
	var mu sync.Mutex
	calls := 0
	keys := map[string]time.Time{} // key → when it was first booked under
	bookUnder := func(in bookIn) (*mcp.CallToolResult, booking, error) {
		mu.Lock()
		if at, ok := keys[in.IdempotencyKey]; ok && time.Since(at) < keyTTL {
			mu.Unlock()
			return nil, booking{ID: "BK-replayed", Flight: in.Flight, Passenger: in.Passenger}, nil
		}
		keys[in.IdempotencyKey] = time.Now()
		mu.Unlock()
		in.IdempotencyKey = "" // the airline's own dedupe is this server's, above
		return a.book(in)
	}
	s = mcp.NewServer(&mcp.Implementation{Name: "airline", Version: "1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "book", Description: "Book one seat."},
		func(ctx context.Context, _ *mcp.CallToolRequest, in bookIn) (*mcp.CallToolResult, booking, error) {
			mu.Lock()
			calls++
			n := calls
			mu.Unlock()
			switch n {
			case 1:
				bookUnder(in)
				return nil, booking{}, errReplyLost
			case 2:
				defer once.Do(func() { close(done) })
				select {
				case <-time.After(secondDelay):
				case <-ctx.Done():
					return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "cancelled, nothing booked"}}}, booking{}, nil
				}
			}
			return bookUnder(in)
		})
	return s, done
}

// I1 with listen_late, for a keyed tool: "A request that reached the
// destination after it forgot the key could act twice: the attempt stops
// before then" (agenttool's key deadline, destination_key_ttl less the
// clock skew). With listen_late the attempt still ends at that deadline,
// unknown, but its request is no longer cancelled at the server: it stays
// open for listen_late more, and may reach the server's key after the
// server forgot it.
//
// The server keeps keys for 1.5s, the guard's destination_key_ttl. The
// first delivery books and its reply is lost; the guard resends under the
// same key, and the server takes 2.5s (a queue) to look at that delivery.
// With listen_late "0s" the resend is cancelled at the key deadline
// (0.5s) and books nothing; with listen_late "1m" it must be too, or it
// books a second time under the key the server has forgotten.
func TestGuard_AKeyedResendNeverOutlivesTheServersKey(t *testing.T) {
	for _, listenLate := range []string{"0s", "1m"} {
		t.Run("listen_late="+listenLate, func(t *testing.T) {
			a := &airline{}
			up, secondDone := forgetfulAirline(a, 1500*time.Millisecond, 2500*time.Millisecond)
			late := `, "listen_late": "` + listenLate + `"`
			tune := func(_ string, o *agenttool.Options) {
				o.Retry = agenttool.RetryPolicy{MaxAttempts: 2, InitialInterval: time.Millisecond, MaxElapsed: 500 * time.Millisecond}
				o.Lease = 500 * time.Millisecond
			}
			g := guardOver(t, up, `{"principal": "ana@example.com", "mcpServers": {"airline": {"command": "airline-mcp", "tools": {
			  "book": {"class": "keyed", "key_argument": "idempotency_key", "destination_key_ttl": "1500ms"`+late+`}}}}}`, mcpguard.Options{Tune: tune})
			cs := connect(t, g)

			_, first := call(t, cs, "book", lunchFlight, nil)
			select {
			case <-secondDone:
			case <-time.After(10 * time.Second):
				t.Fatal("the resend neither booked nor stopped in 10s")
			}
			time.Sleep(100 * time.Millisecond)
			t.Logf("the call: %s", first)
			if first.Status == envelope.DefiniteFailure {
				t.Errorf("the call answered definite_failure; the first delivery booked")
			}
			if n := a.count(); n != 1 {
				t.Errorf("%d bookings for one action, want 1", n)
			}
		})
	}
}

// I2 with listen_late: definite_failure says the effect was not applied.
// A reconcilable call whose attempt passed attempt_timeout is checked at
// once; a check slower than attempt_timeout + 1s has its "not found"
// trusted, and the call, with no attempt left, gives its key back and
// answers definite_failure. But the guard still listens for the attempt
// it did not cancel, and the server, which would have stopped had it been
// cancelled, books 3s after it took the request: the model was told
// nothing happened, the booking exists, and the model's next call books a
// second seat.
func TestGuard_ADefiniteFailureNeverAnswersARequestTheGuardStillListensFor(t *testing.T) {
	for _, listenLate := range []string{"0s", "1m"} {
		t.Run("listen_late="+listenLate, func(t *testing.T) {
			a := &airline{}
			up, firstDone := politeAirline(a, 3*time.Second)
			slowFind(up, a, 1500*time.Millisecond)
			late := `, "listen_late": "` + listenLate + `"`
			tune := func(_ string, o *agenttool.Options) { o.Retry = agenttool.RetryPolicy{MaxAttempts: 1} }
			g := guardOver(t, up, `{"principal": "ana@example.com", "mcpServers": {"airline": {"command": "airline-mcp", "tools": {
			  "book_noted": {"class": "reconcilable", "ref_argument": "client_reference", "attempt_timeout": "200ms"`+late+`,
			    "check": {"tool": "find_booking", "arguments": {"client_reference": "${ref}"},
			      "applied": {"pointer": "/found", "equals": true}, "not_applied": {"pointer": "/found", "equals": false}}},
			  "find_booking": {"class": "read_only"}}}}}`, mcpguard.Options{Tune: tune})
			cs := connect(t, g)

			_, first := call(t, cs, "book_noted", lunchFlight, nil)
			select {
			case <-firstDone:
			case <-time.After(10 * time.Second):
				t.Fatal("the first request neither committed nor stopped in 10s")
			}
			time.Sleep(100 * time.Millisecond)
			t.Logf("the call: %s", first)
			if first.Status == envelope.DefiniteFailure && a.count() > 0 {
				t.Errorf("the call answered definite_failure, and the server booked it (%d bookings)", a.count())
			}
		})
	}
}

// slowFind replaces up's find_booking with one that takes d to answer.
func slowFind(up *mcp.Server, a *airline, d time.Duration) {
	type findIn struct {
		Reference string `json:"client_reference"`
	}
	mcp.AddTool(up, &mcp.Tool{Name: "find_booking", Description: "Find a booking by its client reference."},
		func(ctx context.Context, _ *mcp.CallToolRequest, in findIn) (*mcp.CallToolResult, map[string]any, error) {
			time.Sleep(d)
			a.mu.Lock()
			defer a.mu.Unlock()
			for _, b := range a.bookings {
				if b.Reference == in.Reference {
					return nil, map[string]any{"found": true, "booking": b}, nil
				}
			}
			return nil, map[string]any{"found": false}, nil
		})
}

// I2 and I9 with listen_late: the unknown fence settles an earlier action
// before a new write of the scope runs. A new action of the same tool
// and user meets the earlier one unknown, checks it, finds nothing (more
// than attempt_timeout + 1s after it was sent), and goes on in its place:
// the earlier action is recorded as not applied and never to be
// (definite_failure). But its request is still open at the server, which
// the guard is listening to, and it books. The model that asks about the
// earlier booking again is told definite_failure — nothing was done —
// for a booking the server made.
func TestGuard_TheFenceNeverReplacesAnActionTheGuardStillListensFor(t *testing.T) {
	for _, listenLate := range []string{"0s", "1m"} {
		t.Run("listen_late="+listenLate, func(t *testing.T) {
			a := &airline{}
			up, firstDone := politeAirline(a, 3*time.Second)
			late := `, "listen_late": "` + listenLate + `"`
			g := guardOver(t, up, `{"principal": "ana@example.com", "mcpServers": {"airline": {"command": "airline-mcp", "tools": {
			  "book_noted": {"class": "reconcilable", "ref_argument": "client_reference", "attempt_timeout": "200ms"`+late+`,
			    "check": {"tool": "find_booking", "arguments": {"client_reference": "${ref}"},
			      "applied": {"pointer": "/found", "equals": true}, "not_applied": {"pointer": "/found", "equals": false}}},
			  "find_booking": {"class": "read_only"}}}}}`, mcpguard.Options{})
			cs := connect(t, g)

			_, first := call(t, cs, "book_noted", lunchFlight, nil)
			if first.Status != envelope.UnknownOutcome {
				t.Fatalf("a call past its attempt timeout: %s; want unknown_outcome", first)
			}
			time.Sleep(1500 * time.Millisecond)
			_, other := call(t, cs, "book_noted", map[string]any{"flight": "TP1235", "passenger": "Ana Lima"}, nil)
			select {
			case <-firstDone:
			case <-time.After(10 * time.Second):
				t.Fatal("the first request neither committed nor stopped in 10s")
			}
			time.Sleep(200 * time.Millisecond)
			_, again := call(t, cs, "book_noted", lunchFlight, nil)
			t.Logf("first: %s\nanother booking: %s\nthe first asked again: %s", first, other, again)
			booked := false
			a.mu.Lock()
			for _, b := range a.bookings {
				booked = booked || b.Reference == first.RequestRef
			}
			a.mu.Unlock()
			if booked && again.Status == envelope.DefiniteFailure {
				t.Errorf("the server booked %s, and the guard answers definite_failure for it", first.RequestRef)
			}
		})
	}
}

// busyKeyAirline is a plain MCP server whose book honours an idempotency
// key as a Stripe-style server does: a repeat of a key it booked under
// answers that booking, and a delivery of a key whose first delivery is
// still being processed is refused (isError), changing nothing — what
// errors "definite" says of the server. The first delivery books once
// releaseFirst is closed (nothing, if its call is cancelled first); the
// second delivery answers once releaseSecond is closed.
func busyKeyAirline(a *airline, releaseFirst, releaseSecond <-chan struct{}) *mcp.Server {
	var mu sync.Mutex
	busy := map[string]bool{}
	deliveries := 0
	s := mcp.NewServer(&mcp.Implementation{Name: "airline", Version: "1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "book", Description: "Book one seat."},
		func(ctx context.Context, _ *mcp.CallToolRequest, in bookIn) (*mcp.CallToolResult, booking, error) {
			mu.Lock()
			deliveries++
			n := deliveries
			if busy[in.IdempotencyKey] {
				mu.Unlock()
				if n == 2 {
					<-releaseSecond
				}
				return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{
					Text: "a request with this idempotency key is in progress; nothing was done"}}}, booking{}, nil
			}
			busy[in.IdempotencyKey] = true
			mu.Unlock()
			defer func() {
				mu.Lock()
				delete(busy, in.IdempotencyKey)
				mu.Unlock()
			}()
			a.mu.Lock()
			_, booked := a.byKey[in.IdempotencyKey]
			a.mu.Unlock()
			if !booked {
				select {
				case <-releaseFirst:
				case <-ctx.Done():
					return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "cancelled, nothing booked"}}}, booking{}, nil
				}
			}
			return a.book(in)
		})
	return s
}

// lateLog is a slog handler that reports each time the guard says a late
// answer was heard (it settled the action, or settled nothing).
type lateLog struct{ settled chan<- struct{} }

func (l lateLog) Enabled(context.Context, slog.Level) bool { return true }
func (l lateLog) Handle(_ context.Context, r slog.Record) error {
	if strings.Contains(r.Message, "a late answer of the server") {
		select {
		case l.settled <- struct{}{}:
		default:
		}
	}
	return nil
}
func (l lateLog) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l lateLog) WithGroup(string) slog.Handler      { return l }

// I2 with listen_late, for a keyed tool whose server reports isError only
// for calls that changed nothing (errors "definite"): definite_failure
// says the effect was not applied. The first delivery passes its
// attempt_timeout while the server still processes it; the guard keeps
// listening, and resends under the same key. The server refuses the
// resend (the key's first delivery is in progress), after the resend's
// own deadline: a late answer, which settles the action as not applied —
// one more attempt may go — though it is about the resend alone, and the
// first delivery is still open. The model's next call sends that attempt,
// which the server refuses as the resend, and is answered
// definite_failure; then the first delivery books.
func TestGuard_ALateRefusalOfAResendNeverSettlesAnActionWhoseFirstDeliveryIsOpen(t *testing.T) {
	a := &airline{}
	releaseFirst, releaseSecond := make(chan struct{}), make(chan struct{})
	t.Cleanup(func() {
		select {
		case <-releaseFirst:
		default:
			close(releaseFirst)
		}
	})
	up := busyKeyAirline(a, releaseFirst, releaseSecond)
	tune := func(_ string, o *agenttool.Options) {
		o.Retry = agenttool.RetryPolicy{MaxAttempts: 2, InitialInterval: time.Millisecond}
	}
	settled := make(chan struct{}, 4)
	g := guardOver(t, up, `{"principal": "ana@example.com", "mcpServers": {"airline": {"command": "airline-mcp", "tools": {
	  "book": {"class": "keyed", "key_argument": "idempotency_key", "errors": "definite", "attempt_timeout": "100ms", "listen_late": "1m"}}}}}`, mcpguard.Options{Tune: tune, Logger: slog.New(lateLog{settled})})
	cs := connect(t, g)

	_, first := call(t, cs, "book", lunchFlight, nil)
	if first.Status != envelope.UnknownOutcome || first.Attempts != 2 {
		t.Fatalf("two deliveries past their deadline: %s; want unknown_outcome after 2 attempts", first)
	}
	close(releaseSecond) // the resend's refusal comes, late
	select {
	case <-settled:
	case <-time.After(10 * time.Second): // a bound on a broken test, not a timing
		t.Fatal("the resend's late refusal was never heard")
	}
	_, again := call(t, cs, "book", lunchFlight, nil)
	close(releaseFirst) // the first delivery books
	for deadline := time.Now().Add(10 * time.Second); a.count() == 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	_, last := call(t, cs, "book", lunchFlight, nil)
	t.Logf("first: %s\nagain: %s\nlast: %s", first, again, last)
	if n := a.count(); n != 1 {
		t.Errorf("%d bookings for one action, want 1", n)
	}
	for _, env := range []envelope.Envelope{again, last} {
		if env.Status == envelope.DefiniteFailure && a.count() > 0 {
			t.Errorf("the server booked the action, and a call of it answers definite_failure: %s", env)
		}
	}
}

// I1 when a person's finding and the server's late answer cross. An
// at-most-once booking passes its attempt timeout while the server still
// commits it; the guard listens for its answer. A person looks in the
// airline's system meanwhile, finds nothing yet, and resolves the action
// not applied. Approved for one more attempt at once, the model's retry
// could send it before the server's answer to attempt 1 (booked) came: a
// second seat for one action. A finding of not applied proves nothing
// while the attempt may still land (the in-flight rule, as for a check's
// answer): the person is told when to decide (ErrInFlight), and the late
// answer settles the action.
func TestGuard_APersonsFindingWaitsWhileTheAttemptMayStillLand(t *testing.T) {
	a := &airline{}
	up := slowAirline(a, 500*time.Millisecond)
	settled := make(chan struct{}, 4)
	g := guardOver(t, up, `{"principal": "ana@example.com", "mcpServers": {"airline": {"command": "airline-mcp", "tools": {
	  "book_noted": {"class": "at_most_once", "attempt_timeout": "100ms", "listen_late": "1m"}}}}}`,
		mcpguard.Options{Logger: slog.New(lateLog{settled})})
	cs := connect(t, g)
	_, first := call(t, cs, "book_noted", lunchFlight, nil)
	if first.Status != envelope.UnknownOutcome {
		t.Fatalf("a call past its attempt timeout: %s; want unknown_outcome", first)
	}
	op, err := agenttool.NewOperator(g.Store())
	if err != nil {
		t.Fatal(err)
	}
	if err := op.ForAnyTool(0).ResolveNotApplied(context.Background(), first.RequestRef, first.Attempts, "maria", "not in the airline's system"); !errors.Is(err, agenttool.ErrInFlight) {
		t.Errorf("a person's finding of not applied while attempt 1 may still land: %v; want ErrInFlight", err)
	}
	for deadline := time.Now().Add(10 * time.Second); a.count() == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the server never booked")
		}
	}
	time.Sleep(200 * time.Millisecond) // the late answer reaches the guard
	_, again := call(t, cs, "book_noted", lunchFlight, nil)
	time.Sleep(800 * time.Millisecond) // a second attempt, had it been sent, commits
	t.Logf("first: %s\nretry: %s", first, again)
	if n := a.count(); n != 1 {
		t.Errorf("%d bookings for one action, want 1 (the retry answered %s)", n, again.Status)
	}
	if again.Status != envelope.Success {
		t.Errorf("the retry after the server's late answer proved the booking: %s; want success, replayed", again)
	}
}
