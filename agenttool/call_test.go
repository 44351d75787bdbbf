package agenttool_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/memstore"
	"github.com/retrysafe/retrysafe/agenttool/storekit"
	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/reconcile"
)

func TestMissingScope(t *testing.T) {
	m := &mailServer{}
	store := memstore.New()
	var logged bytes.Buffer
	tool := newEmailTool(t, m, agenttool.Options{Store: store, Class: agenttool.Reconcilable,
		Logger: slog.New(slog.NewTextHandler(&logged, nil))})
	defer func() {
		// The application's mistake is told to whoever runs it, at WARN.
		if !strings.Contains(logged.String(), "level=WARN") || !strings.Contains(logged.String(), "WithScope") {
			t.Errorf("a call without a scope was not logged at WARN: %q", logged.String())
		}
	}()
	for name, ctx := range map[string]context.Context{
		"no scope":         context.Background(),
		"empty principal":  agenttool.WithScope(context.Background(), "", "conversation-9"),
		"empty session":    agenttool.WithScope(context.Background(), "tenant-42/user-7", ""),
		"action id alone":  agenttool.WithActionID(context.Background(), "step-1"),
		"cancelled, empty": func() context.Context { c, cancel := context.WithCancel(context.Background()); cancel(); return c }(),
	} {
		env := tool.Invoke(ctx, emailToAna)
		mustStatus(t, env, envelope.DefiniteFailure)
		if env.Error.Code != envelope.CodeMissingScope || env.Next != envelope.DoNotRetry {
			t.Errorf("%s: %s", name, env)
		}
	}
	if m.runs.Load() != 0 || store.Len() != 0 {
		t.Fatalf("calls without scope ran %d times and wrote %d records", m.runs.Load(), store.Len())
	}
	def := newEmailTool(t, m, agenttool.Options{Store: store, Class: agenttool.Reconcilable,
		DefaultScope: &agenttool.Scope{Principal: "batch-job", Session: "nightly"}})
	mustStatus(t, def.Invoke(context.Background(), emailToAna), envelope.Success)
	if _, err := agenttool.New("x", "", m.send, agenttool.Options{Store: store, Class: agenttool.Keyed,
		DefaultScope: &agenttool.Scope{Principal: "p"}}); !errors.Is(err, agenttool.ErrInvalidOptions) {
		t.Errorf("half a default scope accepted: %v", err)
	}
}

func TestInvalidInputRunsNothing(t *testing.T) {
	m := &mailServer{}
	store := memstore.New()
	tool := newEmailTool(t, m, agenttool.Options{Store: store, Class: agenttool.Reconcilable})
	ident := newEmailTool(t, m, agenttool.Options{Store: store, Class: agenttool.Reconcilable, IdentifyingFields: []string{"to", "subject"}})
	tests := []struct {
		name  string
		tool  *agenttool.Tool
		input string
		msg   string
	}{
		{"truncated JSON", tool, `{"to":"ana@example.com",`, "not acceptable JSON"},
		{"duplicate field", tool, `{"to":"ana@example.com","to":"eve@example.com","subject":"x"}`, `duplicate member name "to"`},
		{"unknown field", tool, `{"to":"ana@example.com","subject":"x","bcc":"eve@example.com"}`, `unknown field "bcc"`},
		{"wrong type", tool, `{"to":["ana@example.com"],"subject":"x"}`, `field "to" must be a string, not an array`},
		{"not an object", tool, `send it to ana`, `send one JSON object with the tool's parameters ("to", "subject", "body"), not plain text`},
		{"an array", tool, `[{"to":"ana@example.com","subject":"x"}]`, "not an array"},
		{"null", tool, `null`, "not null"},
		{"nothing", tool, `  `, "not nothing"},
		{"missing required field", ident, `{"to":"ana@example.com"}`, `missing required field "subject"`},
		{"text for identifying fields", ident, `ana@example.com`, "send one JSON object"},
		{"invalid UTF-8", tool, "{\"to\":\"ana@example.com\",\"subject\":\"\xff\"}", "not valid UTF-8"},
	}
	for _, tt := range tests {
		env := tt.tool.Invoke(scoped(), tt.input)
		if env.Status != envelope.DefiniteFailure || env.Error.Code != envelope.CodeInvalidInput ||
			env.Next != envelope.FixInput || !strings.Contains(env.Error.Message, tt.msg) {
			t.Errorf("%s: %s; want invalid_input mentioning %q", tt.name, env, tt.msg)
		}
	}
	if m.runs.Load() != 0 || store.Len() != 0 {
		t.Fatalf("invalid input ran the tool %d times and wrote %d records", m.runs.Load(), store.Len())
	}
}

func TestWrappedToolTakesText(t *testing.T) {
	var seen []string
	tool, err := agenttool.Wrap(recordingTool{seen: &seen}, agenttool.Options{Store: memstore.New(), Class: agenttool.Keyed, TextInput: true})
	if err != nil {
		t.Fatal(err)
	}
	a := tool.Invoke(scoped(), "  remind Ana about lunch ")
	b := tool.Invoke(scoped(), "remind Ana about lunch")
	mustStatus(t, a, envelope.Success)
	// The tool receives the text it was digested as: trimmed.
	if !b.Replayed || len(seen) != 1 || seen[0] != "remind Ana about lunch" {
		t.Errorf("text input: %s then %s, tool saw %q", a, b, seen)
	}
	if string(a.Result) != `{"ok":true}` {
		t.Errorf("a JSON result is embedded as JSON; got %s", a.Result)
	}
}

func TestCallAlwaysReturnsEnvelopeAndNilError(t *testing.T) {
	store := &faultyStore{Store: memstore.New()}
	store.failClaim.Store(true)
	tool := newEmailTool(t, &mailServer{}, agenttool.Options{Store: store, Class: agenttool.Keyed})
	for _, ctx := range []context.Context{context.Background(), scoped()} {
		out, err := tool.Call(ctx, emailToAna)
		if err != nil {
			t.Fatalf("Call returned error %v; the executor would abort the run", err)
		}
		if _, err := envelope.Parse([]byte(out)); err != nil {
			t.Fatalf("Call output is not an envelope: %v\n%s", err, out)
		}
	}
}

func TestWaitThenInProgress(t *testing.T) {
	release := make(chan struct{})
	started := make(chan struct{})
	m := &mailServer{script: func(int) (bool, error) { close(started); <-release; return true, nil }}
	tool := newEmailTool(t, m, agenttool.Options{Store: memstore.New(), Class: agenttool.Reconcilable, WaitTimeout: 30 * time.Millisecond})
	var first envelope.Envelope
	var wg sync.WaitGroup
	wg.Go(func() { first = tool.Invoke(scoped(), emailToAna) })
	<-started
	busy := tool.Invoke(scoped(), emailToAna)
	mustStatus(t, busy, envelope.UnknownOutcome)
	if busy.Error.Code != envelope.CodeInProgress || busy.Next != envelope.Wait {
		t.Errorf("while the first call runs: %s", busy)
	}
	close(release)
	wg.Wait()
	mustStatus(t, first, envelope.Success)
	later := tool.Invoke(scoped(), emailToAna)
	if !later.Replayed || later.Status != envelope.Success || m.runs.Load() != 1 {
		t.Errorf("after the first call: %s (runs %d)", later, m.runs.Load())
	}
	if n := agenttool.InFlight(tool); n != 0 {
		t.Errorf("%d keys left in the waiter map", n)
	}
}

func TestWaiterMapDrains(t *testing.T) {
	m := &mailServer{delay: time.Millisecond}
	tool := newEmailTool(t, m, agenttool.Options{Store: memstore.New(), Class: agenttool.Keyed})
	var wg sync.WaitGroup
	for i := range 200 {
		wg.Go(func() {
			in := `{"to":"user` + string(rune('a'+i%26)) + `@example.com","subject":"s"}`
			tool.Invoke(scoped(), in)
		})
	}
	wg.Wait()
	if n := agenttool.InFlight(tool); n != 0 {
		t.Fatalf("%d keys left in the waiter map after every call ended", n)
	}
}

func TestRestartReplaysInsteadOfRunning(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys.db")
	m := &mailServer{}
	store := openBolt(t, path)
	first := newEmailTool(t, m, agenttool.Options{Store: store, Class: agenttool.Reconcilable}).Invoke(scoped(), emailToAna)
	mustStatus(t, first, envelope.Success)
	store.Close()

	store = openBolt(t, path) // a new process would do the same
	again := newEmailTool(t, m, agenttool.Options{Store: store, Class: agenttool.Reconcilable}).Invoke(scoped(), emailToAna)
	if again.Status != envelope.Success || !again.Replayed || string(again.Result) != string(first.Result) {
		t.Fatalf("after restart: %s; want the first outcome replayed", again)
	}
	if m.runs.Load() != 1 {
		t.Fatalf("tool ran %d times across a restart, want 1", m.runs.Load())
	}
}

func TestTransientExhaustionFreesTheKey(t *testing.T) {
	down := atomic.Bool{}
	down.Store(true)
	m := &mailServer{script: func(int) (bool, error) {
		if down.Load() {
			return false, envelope.MarkTransient(errors.New("connect: connection refused"))
		}
		return true, nil
	}}
	tool := newEmailTool(t, m, agenttool.Options{Store: memstore.New(), Class: agenttool.AtMostOnce})
	env := tool.Invoke(scoped(), emailToAna)
	mustStatus(t, env, envelope.DefiniteFailure)
	if env.Error.Code != envelope.CodeUnavailable || env.Next != envelope.Wait || env.Attempts != 3 {
		t.Errorf("all attempts refused: %s", env)
	}
	down.Store(false)
	later := tool.Invoke(scoped(), emailToAna)
	mustStatus(t, later, envelope.Success)
	if later.Replayed || m.count() != 1 {
		t.Errorf("after recovery: %s with %d effects", later, m.count())
	}
}

func TestCancelStopsRetries(t *testing.T) {
	ctx, cancel := context.WithCancel(scoped())
	m := &mailServer{script: func(n int) (bool, error) {
		cancel()
		return false, envelope.MarkTransient(errors.New("503"))
	}}
	tool := newEmailTool(t, m, agenttool.Options{Store: memstore.New(), Class: agenttool.Keyed,
		Retry: agenttool.RetryPolicy{MaxAttempts: 10, InitialInterval: time.Hour}})
	done := make(chan envelope.Envelope)
	go func() { done <- tool.Invoke(ctx, emailToAna) }()
	select {
	case env := <-done:
		mustStatus(t, env, envelope.DefiniteFailure)
		if m.runs.Load() != 1 {
			t.Errorf("ran %d times after cancel", m.runs.Load())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a cancelled call kept waiting for its next retry")
	}
}

func TestAttemptTimeoutIsUnknown(t *testing.T) {
	m := &mailServer{}
	slow, err := agenttool.New("send_email", "", func(ctx context.Context, in emailInput) (sent, error) {
		m.send(ctx, in) // the effect happens...
		<-ctx.Done()    // ...and the reply never comes
		return sent{}, ctx.Err()
	}, agenttool.Options{Store: memstore.New(), Class: agenttool.Reconcilable, SettledByOperators: true, AttemptTimeout: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	env := slow.Invoke(scoped(), emailToAna)
	mustStatus(t, env, envelope.UnknownOutcome)
	if env.Error.Code != envelope.CodeOutcomeUnknown || m.count() != 1 {
		t.Errorf("timeout after the effect: %s (effects %d)", env, m.count())
	}
}

func TestToolSeesRequestRef(t *testing.T) {
	var infos []agenttool.CallInfo
	n := 0
	tool, err := agenttool.New("send_email", "", func(ctx context.Context, in emailInput) (string, error) {
		info, _ := agenttool.CallInfoFrom(ctx)
		infos = append(infos, info)
		if n++; n == 1 {
			return "", envelope.MarkTransient(errors.New("421"))
		}
		return "ok", nil
	}, agenttool.Options{Store: memstore.New(), Class: agenttool.Keyed, Retry: fastRetry})
	if err != nil {
		t.Fatal(err)
	}
	env := tool.Invoke(scoped(), emailToAna)
	mustStatus(t, env, envelope.Success)
	if len(infos) != 2 || infos[0].RequestRef != env.RequestRef || infos[1].RequestRef != env.RequestRef ||
		infos[0].Attempt != 1 || infos[1].Attempt != 2 || infos[1].Scope.Session != "conversation-9" {
		t.Errorf("call infos %+v for %s", infos, env.RequestRef)
	}
	if agenttool.RequestRef(context.Background()) != "" {
		t.Error("RequestRef outside a guarded call is not empty")
	}
}

func TestReadOnlyNeedsNoStoreAndRetriesFreely(t *testing.T) {
	n := 0
	tool, err := agenttool.New("get_weather", "", func(ctx context.Context, in struct {
		City string `json:"city"`
	}) (string, error) {
		if n++; n == 1 {
			return "", errors.New("read: connection reset by peer")
		}
		return "sunny in " + in.City, nil
	}, agenttool.Options{Class: agenttool.ReadOnly, Retry: fastRetry})
	if err != nil {
		t.Fatal(err)
	}
	env := tool.Invoke(scoped(), `{"city":"Lisbon"}`)
	mustStatus(t, env, envelope.Success)
	if env.Attempts != 2 || string(env.Result) != `"sunny in Lisbon"` {
		t.Errorf("read-only: %s", env)
	}
	if _, err := agenttool.New("send_email", "", (&mailServer{}).send, agenttool.Options{Class: agenttool.Keyed}); !errors.Is(err, agenttool.ErrInvalidOptions) || !strings.Contains(err.Error(), "Store is required") {
		t.Errorf("a keyed tool without a store: %v", err)
	}
	if _, err := agenttool.New("send_email", "", (&mailServer{}).send, agenttool.Options{Store: memstore.New()}); !errors.Is(err, agenttool.ErrInvalidOptions) || !strings.Contains(err.Error(), "Class is required") {
		t.Errorf("a tool without a class: %v", err)
	}
}

func TestSweepKeepsUnknownRecords(t *testing.T) {
	storeKinds(t, func(t *testing.T, open func() agenttool.Store) {
		store, clk := open(), newClock()
		lost := &mailServer{script: func(int) (bool, error) { return true, errLostReply }}
		opts := agenttool.Options{Store: store, Class: agenttool.Reconcilable, Now: clk.Now, KeyTTL: time.Hour}
		ok := newEmailTool(t, &mailServer{}, opts).Invoke(scoped(), emailToAna)
		unknown := newEmailTool(t, lost, opts).Invoke(scoped(), `{"to":"bo@example.com","subject":"x"}`)
		mustStatus(t, unknown, envelope.UnknownOutcome)
		ctx := context.Background()
		if n, err := store.Sweep(ctx, storekit.SweepRequest{Now: clk.Now().Add(30 * time.Minute)}); err != nil || n != 0 {
			t.Fatalf("early sweep removed %d (%v)", n, err)
		}
		n, err := store.Sweep(ctx, storekit.SweepRequest{Now: clk.Now().Add(100 * 365 * 24 * time.Hour)})
		if err != nil || n != 1 {
			t.Fatalf("sweep removed %d (%v), want the succeeded record only", n, err)
		}
		if _, err := store.Get(ctx, ok.RequestRef); !errors.Is(err, agenttool.ErrNotFound) {
			t.Errorf("expired success still there: %v", err)
		}
		if rec, err := store.Get(ctx, unknown.RequestRef); err != nil || rec.State != agenttool.Unknown {
			t.Errorf("unknown record after a sweep: %+v, %v", rec, err)
		}
	})
}

func TestExpiredOutcomeIsAFreshAction(t *testing.T) {
	clk := newClock()
	m := &mailServer{}
	tool := newEmailTool(t, m, agenttool.Options{Store: memstore.New(), Class: agenttool.Reconcilable, Now: clk.Now, KeyTTL: time.Hour})
	tool.Invoke(scoped(), emailToAna)
	clk.Advance(2 * time.Hour)
	env := tool.Invoke(scoped(), emailToAna)
	if env.Replayed || m.runs.Load() != 2 {
		t.Errorf("after the key lifetime: %s (runs %d); want a new action", env, m.runs.Load())
	}
}

func TestHooks(t *testing.T) {
	var attempts []agenttool.AttemptEvent
	var outcomes []agenttool.OutcomeEvent
	m := &mailServer{script: func(n int) (bool, error) {
		if n == 1 {
			return false, envelope.MarkTransient(errors.New("421"))
		}
		return true, nil
	}}
	tool := newEmailTool(t, m, agenttool.Options{Store: memstore.New(), Class: agenttool.Keyed, Hooks: agenttool.Hooks{
		Attempt: func(_ context.Context, e agenttool.AttemptEvent) { attempts = append(attempts, e) },
		Outcome: func(_ context.Context, e agenttool.OutcomeEvent) { outcomes = append(outcomes, e) },
	}})
	tool.Invoke(scoped(), emailToAna)
	if len(attempts) != 2 || attempts[0].Class != envelope.Transient || attempts[0].Err == nil || attempts[1].Err != nil {
		t.Errorf("attempt events %+v", attempts)
	}
	if len(outcomes) != 1 || outcomes[0].Envelope.Status != envelope.Success {
		t.Errorf("outcome events %+v", outcomes)
	}
}

func TestSchema(t *testing.T) {
	tool := newEmailTool(t, &mailServer{}, agenttool.Options{Store: memstore.New(), Class: agenttool.Keyed})
	var s struct {
		Type       string                     `json:"type"`
		Properties map[string]json.RawMessage `json:"properties"`
		Required   []string                   `json:"required"`
	}
	if err := json.Unmarshal(tool.Schema(), &s); err != nil {
		t.Fatal(err)
	}
	if s.Type != "object" || len(s.Properties) != 3 || strings.Join(s.Required, ",") != "to,subject" {
		t.Errorf("schema %s", tool.Schema())
	}
	if !strings.Contains(string(s.Properties["to"]), `"description":"recipient address"`) {
		t.Errorf("desc tag lost: %s", s.Properties["to"])
	}
	if !strings.Contains(tool.Description(), "envelope") {
		t.Errorf("the description does not say how to read the envelope: %q", tool.Description())
	}
	if _, err := agenttool.New("x", "", func(context.Context, map[string]any) (string, error) { return "", nil },
		agenttool.Options{Class: agenttool.ReadOnly}); !errors.Is(err, agenttool.ErrInvalidOptions) {
		t.Errorf("a map input type was accepted: %v", err)
	}
}

// hangingStore's Finish waits for its context to end, as a store behind a
// dead network would.
type hangingStore struct {
	agenttool.Store
	deadline atomic.Bool
}

func (h *hangingStore) Finish(ctx context.Context, r storekit.FinishRequest) error {
	_, ok := ctx.Deadline()
	h.deadline.Store(ok)
	<-ctx.Done()
	return ctx.Err()
}

// Recording an outcome outlives the caller's cancellation but is bounded by
// StoreTimeout: a hung store cannot hold the call forever, and the envelope
// still tells the truth.
func TestOutcomeWriteIsBounded(t *testing.T) {
	store := &hangingStore{Store: memstore.New()} // not a LocalStore: its writes get a deadline
	m := &mailServer{}
	tool := newEmailTool(t, m, agenttool.Options{Store: store, Class: agenttool.Reconcilable, StoreTimeout: 50 * time.Millisecond})
	ctx, cancel := context.WithCancel(scoped())
	cancel() // the caller's context ends; the outcome write must not
	start := time.Now()
	env := tool.Invoke(context.WithoutCancel(ctx), emailToAna)
	if env.Status != envelope.Success || m.count() != 1 {
		t.Fatalf("envelope %s with %d effects", env, m.count())
	}
	if !store.deadline.Load() {
		t.Error("the outcome write to a remote store had no deadline")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("a hung store held the call for %v", d)
	}
}

// A keyed destination forgets keys (Stripe keeps one about 24 hours): an
// action whose outcome is unknown and whose first attempt is older than
// that is not retried blindly with its key.
func TestKeyedActionIsNotRetriedAfterTheDestinationForgetsItsKey(t *testing.T) {
	for _, tt := range []struct {
		name       string
		reconciler reconcile.Reconciler
		want       envelope.Status
		runs       int64
	}{
		{"no reconciler: a person decides", nil, envelope.UnknownOutcome, 1},
		{"found applied", fixed(reconcile.AppliedWith([]byte(`{"id":"in_1"}`))), envelope.Success, 1},
		{"found not applied: sent again", fixed(reconcile.NotAppliedYet()), envelope.Success, 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			clk := newClock()
			m := &mailServer{script: func(n int) (bool, error) {
				if n == 1 {
					return true, errLostReply
				}
				return true, nil
			}}
			opts := agenttool.Options{Store: memstore.New(), Class: agenttool.Keyed, Now: clk.Now, Reconciler: tt.reconciler,
				Retry: agenttool.RetryPolicy{MaxAttempts: 1}}
			tool := newEmailTool(t, m, opts)
			mustStatus(t, tool.Invoke(scoped(), emailToAna), envelope.UnknownOutcome)
			clk.Advance(25 * time.Hour)
			env := tool.Invoke(scoped(), emailToAna)
			if env.Status != tt.want || m.runs.Load() != tt.runs {
				t.Fatalf("after 25 hours: %s, runs %d; want %s and %d runs", env, m.runs.Load(), tt.want, tt.runs)
			}
			if tt.reconciler == nil && (env.Next != envelope.AskHuman || !strings.Contains(env.Error.Message, "forgotten")) {
				t.Errorf("without a reconciler: %s; want ask_human, saying the destination may have forgotten the key", env)
			}
		})
	}
	// The option is checked against the call's own retry window.
	_, err := agenttool.New("send_email", "", (&mailServer{}).send, agenttool.Options{Store: memstore.New(), Class: agenttool.Keyed, DestinationKeyTTL: time.Second})
	if !errors.Is(err, agenttool.ErrInvalidOptions) || !strings.Contains(err.Error(), "DestinationKeyTTL") {
		t.Errorf("a destination key lifetime shorter than the retry window: %v", err)
	}
}

// RequestUUID is a UUID of the request reference: the same on every
// attempt and retry of one action, another for another action.
func TestRequestUUID(t *testing.T) {
	var seen []string
	tool, err := agenttool.New("send_email", "", func(ctx context.Context, in emailInput) (string, error) {
		seen = append(seen, agenttool.RequestUUID(ctx))
		if len(seen) == 1 {
			return "", envelope.MarkTransient(errors.New("503"))
		}
		return "ok", nil
	}, agenttool.Options{Store: memstore.New(), Class: agenttool.Keyed, Retry: fastRetry})
	if err != nil {
		t.Fatal(err)
	}
	mustStatus(t, tool.Invoke(scoped(), emailToAna), envelope.Success)
	mustStatus(t, tool.Invoke(scoped(), `{"to":"bo@example.com","subject":"Lunch"}`), envelope.Success)
	if len(seen) != 3 || seen[0] != seen[1] || seen[1] == seen[2] {
		t.Fatalf("UUIDs %v: want one per action, the same on a retry", seen)
	}
	u, err := uuid.Parse(seen[0])
	if err != nil || u.Version() != 5 {
		t.Errorf("%q is not a version-5 UUID: %v", seen[0], err)
	}
	if agenttool.RequestUUID(context.Background()) != "" {
		t.Error("a UUID outside a guarded call")
	}
}

// asksFirst is a destination that asks the user for input on its first
// run and acts on the next.
func asksFirst(n int) (bool, error) {
	if n == 1 {
		return false, envelope.MarkDefinite(fmt.Errorf("the server: %w (confirm the send)", agenttool.ErrAwaitsInput), "input_required")
	}
	return true, nil
}

// A destination that asks for input before it acts did nothing: the key is
// given back at once, nothing retried or recorded, so the call that
// carries the answer (the same input) runs as the same action, and no
// other write of the scope is held back meanwhile.
func TestAwaitingInputGivesTheKeyBack(t *testing.T) {
	storeKinds(t, func(t *testing.T, open func() agenttool.Store) {
		for _, class := range []agenttool.Class{agenttool.Keyed, agenttool.Reconcilable, agenttool.AtMostOnce} {
			t.Run(class.String(), func(t *testing.T) {
				store := open()
				m := &mailServer{script: asksFirst}
				tool := newEmailTool(t, m, agenttool.Options{Store: store, Class: class})
				env := tool.Invoke(scoped(), emailToAna)
				mustStatus(t, env, envelope.DefiniteFailure)
				if env.Error.Code != "input_required" || env.Next != envelope.AskHuman || env.Attempts != 1 || m.runs.Load() != 1 {
					t.Fatalf("a destination that asks: %s after %d runs; want input_required, ask_human, one attempt", env, m.runs.Load())
				}
				if _, err := store.Get(context.Background(), env.RequestRef); !errors.Is(err, agenttool.ErrNotFound) {
					t.Errorf("the key of an action that did nothing is still held: %v", err)
				}
				other := tool.Invoke(scoped(), `{"to":"bo@example.com","subject":"Lunch"}`)
				if other.Status != envelope.Success || m.count() != 1 {
					t.Fatalf("another write of the scope meanwhile: %s; want it run, nothing held back", other)
				}
				answered := tool.Invoke(scoped(), emailToAna)
				mustStatus(t, answered, envelope.Success)
				if answered.RequestRef != env.RequestRef || answered.Replayed || m.count() != 2 || m.runs.Load() != 3 {
					t.Errorf("the call with the answer: %s; want the same action run once more (runs %d, effects %d)", answered, m.runs.Load(), m.count())
				}
				if again := tool.Invoke(scoped(), emailToAna); again.Status != envelope.Success || !again.Replayed || m.runs.Load() != 3 {
					t.Errorf("the same call once done: %s after %d runs; want its replay", again, m.runs.Load())
				}
			})
		}
	})
}

// A destination that asks for input after an earlier attempt of the call
// may have acted proves nothing of that attempt: the outcome stays unknown.
func TestAwaitingInputAfterAnUnknownAttemptStaysUnknown(t *testing.T) {
	m := &mailServer{script: func(n int) (bool, error) {
		if n == 1 {
			return true, errLostReply
		}
		return asksFirst(1)
	}}
	store := memstore.New()
	tool := newEmailTool(t, m, agenttool.Options{Store: store, Class: agenttool.Keyed})
	env := tool.Invoke(scoped(), emailToAna)
	mustStatus(t, env, envelope.UnknownOutcome)
	rec, err := store.Get(context.Background(), env.RequestRef)
	if err != nil || rec.State != agenttool.Unknown || m.runs.Load() != 2 {
		t.Errorf("record %+v (%v) after %d runs; want it unknown after the second attempt asked", rec, err, m.runs.Load())
	}
}

// I1 and I2 across a key's lives: a record that expires lets the key's
// next action count its attempts afresh, so a late answer of the old
// action's attempt 1 would read as one of the new action's. A key lifetime
// shorter than an attempt may still land (AttemptTimeout, LateWindow and
// ClockSkew) is refused, naming them.
func TestAKeyOutlivesItsAttemptsLateAnswers(t *testing.T) {
	_, err := agenttool.New("send_email", "", (&mailServer{}).send, agenttool.Options{Store: memstore.New(), Class: agenttool.AtMostOnce,
		KeyTTL: 80 * time.Second, AttemptTimeout: 30 * time.Second, LateWindow: time.Minute})
	if !errors.Is(err, agenttool.ErrInvalidOptions) || !strings.Contains(err.Error(), "LateWindow") || !strings.Contains(err.Error(), "1m31s") {
		t.Errorf("a key lifetime shorter than a late answer may come: %v; want ErrInvalidOptions naming LateWindow and 1m31s", err)
	}
	if _, err := agenttool.New("send_email", "", (&mailServer{}).send, agenttool.Options{Store: memstore.New(), Class: agenttool.AtMostOnce,
		KeyTTL: 2 * time.Minute, AttemptTimeout: 30 * time.Second, LateWindow: time.Minute}); err != nil {
		t.Errorf("a key lifetime that covers the late window: %v", err)
	}
}
