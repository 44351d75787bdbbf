package agenttool_test

// The scenarios other idempotency libraries and specifications test, played
// against retrysafe's public API: AWS Lambda Powertools' idempotency utility
// (Python, TypeScript, Java) and its issue tracker, the IETF draft "The
// Idempotency-Key HTTP Header Field" and Stripe's idempotent requests, and
// Go's idempotency middleware (Fiber's). Each test names the source of its scenario; where
// retrysafe answers otherwise on purpose, its comment says why and where
// the documentation says so.
//
// Every scenario runs on memstore, on a boltstore file (closed and opened
// again where the scenario is a restart) and, when DATABASE_URL is set, on
// a PostgreSQL schema of its own (opened a second time for another
// replica). The destination counts its effects per request reference,
// refuses a holder whose fencing token is stale, and can be asked what
// became of a reference.

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/boltstore"
	"github.com/retrysafe/retrysafe/agenttool/memstore"
	"github.com/retrysafe/retrysafe/agenttool/pgstore"
	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/internal/pgtest"
	"github.com/retrysafe/retrysafe/reconcile"
)

// payIn is a charge as a payment API takes it. Customer and amount tell one
// charge from another (Powertools builds its key from a JMESPath subset of
// the event; here trusted code names the identifying fields); the memo and
// the tags are fingerprinted, not identifying.
type payIn struct {
	Customer string   `json:"customer"`
	Amount   int      `json:"amount"`
	Memo     string   `json:"memo,omitempty"`
	Tags     []string `json:"tags,omitempty"`
}

type payOut struct {
	Charge string `json:"charge"`
	Amount int    `json:"amount"`
}

const (
	lunchCharge  = `{"customer":"cus_ana","amount":1000,"memo":"lunch"}`
	dinnerCharge = `{"customer":"cus_ana","amount":1000,"memo":"dinner"}` // the same key, another input
)

// ledger is the destination: a payment API that applies a charge per
// request reference and counts it, keeps the highest fencing token it has
// seen per reference and refuses an older one, honours the reference as an
// idempotency key when keyed (a second request replays the first), and
// answers what became of a reference (it is the tool's Reconciler).
type ledger struct {
	keyed bool

	mu       sync.Mutex
	effects  map[string]int
	results  map[string]payOut
	memos    map[string]string // the memo of the request charged, per reference
	fence    map[string]uint64
	inflight map[string]int
	holds    map[int]*hold
	pending  bool // the status API says pending for every reference
	// step decides the n-th run (from 1): whether the charge is applied,
	// and the error returned afterwards (or instead, if not applied).
	step func(n int) (apply bool, err error)

	runs   atomic.Int64
	checks atomic.Int64
}

// hold pauses one run: started is closed when the run begins, and the run
// goes on when release is closed (or its context ends, applying nothing).
// A stalled run is a paused process: it has not sent its request yet, and
// does not look at its context until it is released.
type hold struct {
	started, release chan struct{}
	stalled          bool
}

func newLedger() *ledger {
	return &ledger{effects: map[string]int{}, results: map[string]payOut{}, memos: map[string]string{}, fence: map[string]uint64{},
		inflight: map[string]int{}, holds: map[int]*hold{}}
}

// pause makes the n-th run wait, at the destination, until release is
// closed.
func (l *ledger) pause(n int) *hold {
	h := &hold{started: make(chan struct{}), release: make(chan struct{})}
	l.mu.Lock()
	l.holds[n] = h
	l.mu.Unlock()
	return h
}

// stall pauses the process of the n-th run before its request leaves.
func (l *ledger) stall(n int) *hold {
	h := l.pause(n)
	h.stalled = true
	return h
}

func (l *ledger) setStep(step func(n int) (bool, error)) {
	l.mu.Lock()
	l.step = step
	l.mu.Unlock()
}

func (l *ledger) setPending(p bool) {
	l.mu.Lock()
	l.pending = p
	l.mu.Unlock()
}

func (l *ledger) charge(ctx context.Context, in payIn) (payOut, error) {
	n := int(l.runs.Add(1))
	info, _ := agenttool.CallInfoFrom(ctx)
	ref := info.RequestRef
	l.mu.Lock()
	h, step := l.holds[n], l.step
	l.mu.Unlock()
	if h != nil && h.stalled {
		close(h.started)
		<-h.release
		h = nil
	}
	l.mu.Lock()
	l.inflight[ref]++
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		l.inflight[ref]--
		l.mu.Unlock()
	}()
	if h != nil {
		close(h.started)
		select {
		case <-h.release:
		case <-ctx.Done():
			return payOut{}, ctx.Err() // nothing applied, but the caller cannot know
		}
	}
	apply, err := true, error(nil)
	if step != nil {
		apply, err = step(n)
	}
	if !apply {
		return payOut{}, err
	}
	l.mu.Lock()
	if info.Token < l.fence[ref] {
		l.mu.Unlock()
		return payOut{}, envelope.MarkDefinite(errors.New("a newer request holds this reference"), "stale_token")
	}
	l.fence[ref] = info.Token
	out, done := l.results[ref]
	if !done || !l.keyed {
		out = payOut{Charge: "ch_" + strings.TrimPrefix(ref, "charge/")[:8], Amount: in.Amount}
		l.effects[ref]++
		l.results[ref], l.memos[ref] = out, in.Memo
		done = false
	}
	l.mu.Unlock()
	if done {
		agenttool.DestinationReplayed(ctx)
	}
	return out, err
}

// Check is the destination's status API. It fences the reference at the
// asker's token, so that a not-applied answer holds: no older request can
// land after it.
func (l *ledger) Check(ctx context.Context, req reconcile.Request) reconcile.Answer {
	l.checks.Add(1)
	info, _ := agenttool.CallInfoFrom(ctx)
	l.mu.Lock()
	defer l.mu.Unlock()
	if info.Token > l.fence[req.Ref] {
		l.fence[req.Ref] = info.Token
	}
	switch {
	case l.pending || l.inflight[req.Ref] > 0:
		return reconcile.StillPending()
	case l.effects[req.Ref] > 0:
		b, _ := json.Marshal(l.results[req.Ref])
		return reconcile.AppliedWith(b)
	}
	return reconcile.NotAppliedFenced()
}

func (l *ledger) count(ref string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.effects[ref]
}

// wantEffects fails unless the destination applied exactly n charges in all
// and at most one per reference.
// wantRuns checks that the tool ran n times.
func (l *ledger) wantRuns(t *testing.T, n int64) {
	t.Helper()
	if got := l.runs.Load(); got != n {
		t.Errorf("the tool ran %d times, want %d", got, n)
	}
}

func (l *ledger) wantEffects(t *testing.T, n int) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	total := 0
	for ref, c := range l.effects {
		if c > 1 {
			t.Errorf("%s was charged %d times; at most one effect per action", ref, c)
		}
		total += c
	}
	if total != n {
		t.Errorf("the destination applied %d charges, want %d (%d runs)", total, n, l.runs.Load())
	}
}

var payRetry = agenttool.RetryPolicy{MaxAttempts: 3, InitialInterval: time.Millisecond, MaxInterval: 2 * time.Millisecond}

// newPay guards l.charge: reconcilable through l unless opts say otherwise,
// identified by customer and amount.
func newPay(t *testing.T, l *ledger, opts agenttool.Options) *agenttool.Tool {
	t.Helper()
	if opts.Class == 0 {
		opts.Class = agenttool.Reconcilable
	}
	if opts.Reconciler == nil && (opts.Class == agenttool.Reconcilable) {
		opts.Reconciler = l
	}
	if opts.IdentifyingFields == nil {
		opts.IdentifyingFields = []string{"customer", "amount"}
	}
	if opts.Retry == (agenttool.RetryPolicy{}) {
		opts.Retry = payRetry
	}
	tool, err := agenttool.New("charge", "Charge a customer.", l.charge, opts)
	if err != nil {
		t.Fatal(err)
	}
	return tool
}

func anaCtx() context.Context {
	return agenttool.WithScope(context.Background(), "tenant-1/ana", "conversation-1")
}

func wantEnv(t *testing.T, env envelope.Envelope, status envelope.Status, code string) {
	t.Helper()
	got := ""
	if env.Error != nil {
		got = env.Error.Code
	}
	if env.Status != status || got != code {
		t.Fatalf("envelope %s\nwant status %s, code %q", env, status, code)
	}
}

// wantSameResult fails unless two envelopes report one action's result.
func wantSameResult(t *testing.T, got, first envelope.Envelope) {
	t.Helper()
	if got.RequestRef != first.RequestRef || string(got.Result) != string(first.Result) {
		t.Fatalf("envelope %s\ndoes not report the first call's result %s", got, first)
	}
}

// durable opens one store's data again: a restart of the process, or
// another replica beside it.
type durable struct {
	t    *testing.T
	kind string
	open func() (agenttool.Store, func())

	cur      agenttool.Store
	closeCur func()
}

// eachStore runs a scenario on memstore, on a boltstore file and, when
// DATABASE_URL is set, on a PostgreSQL schema of its own.
func eachStore(t *testing.T, fn func(t *testing.T, d *durable)) {
	t.Run("memstore", func(t *testing.T) {
		m := memstore.New()
		fn(t, &durable{t: t, kind: "memstore", open: func() (agenttool.Store, func()) { return m, func() {} }})
	})
	t.Run("boltstore", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "actions.db")
		fn(t, &durable{t: t, kind: "boltstore", open: func() (agenttool.Store, func()) {
			s, err := boltstore.Open(path, nil)
			if err != nil {
				t.Fatal(err)
			}
			return s, func() { s.Close() }
		}})
	})
	t.Run("pgstore", func(t *testing.T) {
		url := pgtest.URL(t)
		schema := pgtest.Schema(t, url)
		fn(t, &durable{t: t, kind: "pgstore", open: func() (agenttool.Store, func()) {
			s, err := pgstore.Open(context.Background(), &pgstore.Options{URL: url, Schema: schema})
			if err != nil {
				t.Fatal(err)
			}
			return s, func() { s.Close() }
		}})
	})
}

func (d *durable) openOnce() (agenttool.Store, func()) {
	s, closeFn := d.open()
	var once sync.Once
	closeOnce := func() { once.Do(closeFn) }
	d.t.Cleanup(closeOnce)
	return s, closeOnce
}

// store is the store the scenario uses now.
func (d *durable) store() agenttool.Store {
	if d.cur == nil {
		d.cur, d.closeCur = d.openOnce()
	}
	return d.cur
}

// restart closes the store and opens its data again, as a process that
// starts after the last one ended. memstore keeps nothing across a
// restart: its "restart" is the same store, as a second tool of the same
// process sees it.
func (d *durable) restart() agenttool.Store {
	if d.kind == "memstore" {
		return d.store()
	}
	if d.cur != nil {
		d.closeCur()
	}
	d.cur, d.closeCur = d.openOnce()
	return d.cur
}

// replica opens the data beside the store in use: another replica of the
// service. A bbolt file belongs to one process, and memstore to its own:
// for them, another tool in the same process.
func (d *durable) replica() agenttool.Store {
	if d.kind != "pgstore" {
		return d.store()
	}
	s, _ := d.openOnce()
	return s
}

// within waits for ch, failing the test if it takes longer than a bound
// (the bound only catches a hang; it orders nothing).
func within(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(20 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}

var errReplyLost = errors.New("read tcp 127.0.0.1:443: connection reset by peer")

// Powertools (a completed record returns its stored result; the handler is
// not called), the IETF draft (a retry after the first request completed
// gets its result) and Stripe (the first response is replayed exactly, with
// the same body): a repeat of an action replays the envelope of its first
// call without running the tool — when its members come in another order
// or spacing (Powertools sorts the payload before hashing), and in another
// process, where no local cache can answer (Powertools' local cache once
// answered in progress for a completed record,
// powertools-lambda-typescript#2311): the store does.
func TestARepeatedActionReplaysItsFirstResultWithoutRunning(t *testing.T) {
	eachStore(t, func(t *testing.T, d *durable) {
		l := newLedger()
		first := newPay(t, l, agenttool.Options{Store: d.store()}).Invoke(anaCtx(), lunchCharge)
		wantEnv(t, first, envelope.Success, "")
		if first.Replayed || first.Attempts != 1 || len(first.Result) == 0 {
			t.Fatalf("first call %s; want a fresh success with its result", first)
		}
		again := newPay(t, l, agenttool.Options{Store: d.store()}).Invoke(anaCtx(), "{ \"memo\": \"lunch\",\n \"amount\": 1000, \"customer\": \"cus_ana\" }")
		wantEnv(t, again, envelope.Success, "")
		wantSameResult(t, again, first)
		if !again.Replayed || again.Attempts != first.Attempts {
			t.Errorf("repeat %s; want the first envelope replayed", again)
		}
		later := newPay(t, l, agenttool.Options{Store: d.restart()}).Invoke(anaCtx(), lunchCharge)
		wantEnv(t, later, envelope.Success, "")
		wantSameResult(t, later, first)
		if !later.Replayed {
			t.Errorf("after a restart %s; want the first envelope replayed", later)
		}
		l.wantRuns(t, 1)
		l.wantEffects(t, 1)
	})
}

// The IETF draft ("respond with the result of the previously completed
// operation, success or an error") and Stripe (an error the endpoint
// returned is replayed for the key) replay failures too. Powertools deletes
// the record when the handler raises, and Fiber does not keep a handler's
// error, so that the next call runs. retrysafe follows the draft for a
// definite refusal: it is an outcome of the action, recorded and replayed
// word for word, also after a restart ("definite errors are recorded and
// replayed", package doc); only failures that applied nothing and may pass
// (transient ones) free the key, as the next test shows.
func TestADefiniteRefusalIsRecordedAndReplayedWordForWord(t *testing.T) {
	eachStore(t, func(t *testing.T, d *durable) {
		l := newLedger()
		l.setStep(func(int) (bool, error) {
			return false, envelope.MarkDefinite(errors.New("your card was declined"), "card_declined")
		})
		first := newPay(t, l, agenttool.Options{Store: d.store()}).Invoke(anaCtx(), lunchCharge)
		wantEnv(t, first, envelope.DefiniteFailure, "card_declined")
		if !strings.Contains(first.Error.Message, "your card was declined") {
			t.Errorf("the refusal reads %q; want the destination's words", first.Error.Message)
		}
		again := newPay(t, l, agenttool.Options{Store: d.restart()}).Invoke(anaCtx(), lunchCharge)
		wantEnv(t, again, envelope.DefiniteFailure, "card_declined")
		if !again.Replayed || *again.Error != *first.Error || again.RequestRef != first.RequestRef {
			t.Errorf("repeat %s\nwant the first refusal %s replayed", again, first)
		}
		if l.runs.Load() != 1 {
			t.Errorf("the tool ran %d times, want 1: a recorded refusal is replayed", l.runs.Load())
		}
		l.wantEffects(t, 0)
	})
}

// Powertools deletes the record when the handler fails so that the next
// call runs, and Fiber does not keep a failed response: a failure that
// applied nothing must not hold the key. retrysafe does so for transient
// failures (connection refused, 503): retried with the same key within the
// call, and when retries run out the key is given back (definite_failure,
// unavailable: nothing was applied), so the next call runs.
func TestAFailureThatAppliedNothingFreesTheKeyForTheNextCall(t *testing.T) {
	eachStore(t, func(t *testing.T, d *durable) {
		l := newLedger()
		l.setStep(func(n int) (bool, error) {
			if n <= payRetry.MaxAttempts {
				return false, &envelope.HTTPError{StatusCode: 503, Method: "POST"}
			}
			return true, nil
		})
		first := newPay(t, l, agenttool.Options{Store: d.store()}).Invoke(anaCtx(), lunchCharge)
		wantEnv(t, first, envelope.DefiniteFailure, envelope.CodeUnavailable)
		if first.Attempts != payRetry.MaxAttempts {
			t.Errorf("%d attempts, want %d (retries with the same key)", first.Attempts, payRetry.MaxAttempts)
		}
		next := newPay(t, l, agenttool.Options{Store: d.restart()}).Invoke(anaCtx(), lunchCharge)
		wantEnv(t, next, envelope.Success, "")
		if next.Replayed || next.RequestRef != first.RequestRef {
			t.Errorf("next call %s; want a fresh success under the same reference", next)
		}
		l.wantEffects(t, 1)
	})
}

// Powertools deletes the record on any exception, also one raised after the
// request went out, and the retry runs the effect again (the DESIGN's first
// pitfalls); Stripe keeps a 500 for the key. retrysafe treats an error that
// may have come after the effect as an unknown outcome and asks the
// destination before anything runs again (README, "When the outcome is
// unknown"): applied → success with the destination's result; pending →
// unknown_outcome, replayed to repeats without running, until the
// destination knows; not applied → one more attempt with the same key.
func TestAnErrorAfterTheRequestLeftIsReconciledNotRunAgain(t *testing.T) {
	t.Run("applied", func(t *testing.T) {
		eachStore(t, func(t *testing.T, d *durable) {
			l := newLedger()
			l.setStep(func(n int) (bool, error) { return true, errReplyLost })
			env := newPay(t, l, agenttool.Options{Store: d.store()}).Invoke(anaCtx(), lunchCharge)
			wantEnv(t, env, envelope.Success, "")
			if !env.Reconciled || l.runs.Load() != 1 || len(env.Result) == 0 {
				t.Errorf("%s after %d runs; want a reconciled success with the destination's result after one run", env, l.runs.Load())
			}
			l.wantEffects(t, 1)
		})
	})
	t.Run("pending", func(t *testing.T) {
		eachStore(t, func(t *testing.T, d *durable) {
			l := newLedger()
			l.setStep(func(n int) (bool, error) { return true, errReplyLost })
			l.setPending(true)
			first := newPay(t, l, agenttool.Options{Store: d.store()}).Invoke(anaCtx(), lunchCharge)
			wantEnv(t, first, envelope.UnknownOutcome, envelope.CodeOutcomeUnknown)
			if first.Next != envelope.DoNotRetry {
				t.Errorf("next %s, want do_not_retry", first.Next)
			}
			again := newPay(t, l, agenttool.Options{Store: d.restart()}).Invoke(anaCtx(), lunchCharge)
			if again.Status != envelope.UnknownOutcome || again.RequestRef != first.RequestRef {
				t.Fatalf("repeat while the destination is still pending: %s; want unknown_outcome", again)
			}
			l.setPending(false)
			settled := newPay(t, l, agenttool.Options{Store: d.restart()}).Invoke(anaCtx(), lunchCharge)
			wantEnv(t, settled, envelope.Success, "")
			if !settled.Reconciled || settled.RequestRef != first.RequestRef {
				t.Errorf("once the destination knows: %s; want a reconciled success", settled)
			}
			l.wantRuns(t, 1)
			l.wantEffects(t, 1)
		})
	})
	t.Run("not applied", func(t *testing.T) {
		eachStore(t, func(t *testing.T, d *durable) {
			l := newLedger()
			l.setStep(func(n int) (bool, error) {
				if n == 1 {
					return false, errReplyLost
				}
				return true, nil
			})
			env := newPay(t, l, agenttool.Options{Store: d.store()}).Invoke(anaCtx(), lunchCharge)
			wantEnv(t, env, envelope.Success, "")
			if l.runs.Load() != 2 {
				t.Errorf("the tool ran %d times, want 2 (the second after the destination said not applied)", l.runs.Load())
			}
			l.wantEffects(t, 1)
		})
	})
	t.Run("at most once", func(t *testing.T) {
		eachStore(t, func(t *testing.T, d *durable) {
			l := newLedger()
			l.setStep(func(n int) (bool, error) { return true, errReplyLost })
			opts := agenttool.Options{Store: d.store(), Class: agenttool.AtMostOnce}
			first := newPay(t, l, opts).Invoke(anaCtx(), lunchCharge)
			wantEnv(t, first, envelope.UnknownOutcome, envelope.CodeOutcomeUnknown)
			opts.Store = d.restart()
			again := newPay(t, l, opts).Invoke(anaCtx(), lunchCharge)
			if again.Status != envelope.UnknownOutcome || first.Next != envelope.AskHuman || again.Next != envelope.AskHuman {
				t.Errorf("%s then %s; want unknown_outcome asking a human", first, again)
			}
			l.wantRuns(t, 1)
		})
	})
}

// Powertools' payload validation (IdempotencyValidationError), the IETF
// draft's 422 and Stripe's refusal of a key reused with other parameters:
// the same key with another input runs nothing and leaves the first
// record as it was. Powertools validates only the fields its
// payload_validation_jmespath names, and its Java, TypeScript and Python
// versions each skipped the check on a path: the record an optimistic
// write found (powertools-lambda-java#2260, powertools-lambda-typescript
// #2058, powertools-lambda-python#3781), a record cached before it was
// validated (powertools-lambda-python#3821). retrysafe
// fingerprints the whole input and compares it on every path that meets an
// existing record — settled, refused, unknown, or still running here or in
// another replica — and on a refused call it does not wait for the first.
func TestTheSameKeyWithAnotherInputIsRefusedAndRunsNothing(t *testing.T) {
	type earlier struct {
		name  string
		state envelope.ActionState
		// make brings the first action (lunchCharge) to its state and
		// returns its envelope; done, if set, ends it afterwards.
		make func(t *testing.T, l *ledger, tool *agenttool.Tool) (first envelope.Envelope, done func() envelope.Envelope)
	}
	cases := []earlier{
		{name: "succeeded", state: envelope.ActionSucceeded, make: func(t *testing.T, l *ledger, tool *agenttool.Tool) (envelope.Envelope, func() envelope.Envelope) {
			return tool.Invoke(anaCtx(), lunchCharge), nil
		}},
		{name: "failed", state: envelope.ActionFailed, make: func(t *testing.T, l *ledger, tool *agenttool.Tool) (envelope.Envelope, func() envelope.Envelope) {
			l.setStep(func(int) (bool, error) {
				return false, envelope.MarkDefinite(errors.New("your card was declined"), "card_declined")
			})
			defer l.setStep(nil)
			return tool.Invoke(anaCtx(), lunchCharge), nil
		}},
		{name: "unknown", state: envelope.ActionUnknown, make: func(t *testing.T, l *ledger, tool *agenttool.Tool) (envelope.Envelope, func() envelope.Envelope) {
			l.setStep(func(int) (bool, error) { return true, errReplyLost })
			l.setPending(true)
			first := tool.Invoke(anaCtx(), lunchCharge)
			l.setStep(nil)
			// The destination now knows; the refused call must still not
			// be told so as if it were its own.
			l.setPending(false)
			return first, nil
		}},
		{name: "running", state: envelope.ActionRunning, make: func(t *testing.T, l *ledger, tool *agenttool.Tool) (envelope.Envelope, func() envelope.Envelope) {
			h := l.pause(1)
			out := make(chan envelope.Envelope, 1)
			go func() { out <- tool.Invoke(anaCtx(), lunchCharge) }()
			within(t, h.started, "the first charge to start")
			return envelope.Envelope{}, func() envelope.Envelope {
				close(h.release)
				return <-out
			}
		}},
	}
	for _, c := range cases {
		for _, where := range []string{"here", "in another replica"} {
			t.Run(c.name+" "+where, func(t *testing.T) {
				eachStore(t, func(t *testing.T, d *durable) {
					l := newLedger()
					opts := agenttool.Options{Store: d.store(), WaitTimeout: time.Minute}
					tool := newPay(t, l, opts)
					first, done := c.make(t, l, tool)
					runs := l.runs.Load()
					other := tool
					if where != "here" {
						opts.Store = d.replica()
						other = newPay(t, l, opts)
					}
					answered := make(chan envelope.Envelope, 1)
					go func() { answered <- other.Invoke(anaCtx(), dinnerCharge) }()
					var refused envelope.Envelope
					select {
					case refused = <-answered:
					case <-time.After(20 * time.Second):
						t.Fatal("the call with other input waited for the first instead of being refused")
					}
					wantEnv(t, refused, envelope.DefiniteFailure, envelope.CodeKeyReused)
					if refused.Earlier == nil || refused.Earlier.State != c.state {
						t.Errorf("refusal %s; want earlier.state %s", refused, c.state)
					}
					if l.runs.Load() != runs {
						t.Errorf("the refused call ran the tool")
					}
					if done != nil {
						first = done()
						wantEnv(t, first, envelope.Success, "")
					}
					if refused.RequestRef != first.RequestRef || (refused.Earlier != nil && refused.Earlier.RequestRef != first.RequestRef) {
						t.Errorf("refusal %s names another action than %s", refused, first.RequestRef)
					}
					// The first record is untouched: its own input still
					// meets it as it was.
					runs = l.runs.Load()
					again := newPay(t, l, agenttool.Options{Store: d.restart()}).Invoke(anaCtx(), lunchCharge)
					switch c.state {
					case envelope.ActionUnknown:
						wantEnv(t, again, envelope.Success, "")
						if !again.Reconciled {
							t.Errorf("the first action's resend %s; want it reconciled", again)
						}
					default:
						if !again.Replayed || again.Status != first.Status || string(again.Result) != string(first.Result) {
							t.Errorf("the first action's resend %s\nwant its first envelope %s replayed", again, first)
						}
					}
					if l.runs.Load() != runs {
						t.Errorf("the first action ran again")
					}
					if c.state == envelope.ActionFailed {
						l.wantEffects(t, 0)
					} else {
						l.wantEffects(t, 1)
					}
				})
			})
		}
	}
}

// Stripe and the IETF draft bind a client's key to one request. The closest
// thing in retrysafe is an action id given by an orchestrator that owns
// step ids (WithActionID): every call of the tool with it is one action,
// and another input under it — another amount, not only another memo — is
// refused, never charged as a second action nor replayed as the first.
func TestAnActionIDWithAnotherInputIsRefusedAndRunsNothing(t *testing.T) {
	eachStore(t, func(t *testing.T, d *durable) {
		l := newLedger()
		tool := newPay(t, l, agenttool.Options{Store: d.store()})
		step := agenttool.WithActionID(anaCtx(), "workflow-7/step-2")
		first := tool.Invoke(step, lunchCharge)
		wantEnv(t, first, envelope.Success, "")
		other := newPay(t, l, agenttool.Options{Store: d.restart()}).Invoke(step, `{"customer":"cus_ana","amount":2500,"memo":"lunch"}`)
		wantEnv(t, other, envelope.DefiniteFailure, envelope.CodeKeyReused)
		if other.RequestRef != first.RequestRef || other.Earlier == nil || other.Earlier.State != envelope.ActionSucceeded {
			t.Errorf("refusal %s; want it to name %s, succeeded", other, first.RequestRef)
		}
		l.wantRuns(t, 1)
		l.wantEffects(t, 1)
	})
}

// The IETF draft answers 409 to a request whose key is still being
// processed ("no correction is required" before a retry), Powertools raises
// IdempotencyAlreadyInProgressError while the in-progress record is live:
// the second request runs nothing and is told to come back. retrysafe's
// answer, when the call may not wait (WaitTimeout < 0): unknown_outcome
// with code in_progress and next wait — here and in another replica — and
// nothing is recorded for it: its retry, once the first is done, gets the
// first's result.
func TestARequestWhileTheFirstRunsIsToldToWaitAndRunsNothing(t *testing.T) {
	eachStore(t, func(t *testing.T, d *durable) {
		l := newLedger()
		opts := agenttool.Options{Store: d.store(), WaitTimeout: -1}
		tool := newPay(t, l, opts)
		opts.Store = d.replica()
		beside := newPay(t, l, opts)
		h := l.pause(1)
		out := make(chan envelope.Envelope, 1)
		go func() { out <- tool.Invoke(anaCtx(), lunchCharge) }()
		within(t, h.started, "the first charge to start")
		for name, tl := range map[string]*agenttool.Tool{"here": tool, "in another replica": beside} {
			env := tl.Invoke(anaCtx(), lunchCharge)
			wantEnv(t, env, envelope.UnknownOutcome, envelope.CodeInProgress)
			if env.Next != envelope.Wait || env.Replayed {
				t.Errorf("%s: %s; want next wait", name, env)
			}
		}
		close(h.release)
		first := <-out
		wantEnv(t, first, envelope.Success, "")
		retry := beside.Invoke(anaCtx(), lunchCharge)
		wantEnv(t, retry, envelope.Success, "")
		wantSameResult(t, retry, first)
		l.wantRuns(t, 1)
		l.wantEffects(t, 1)
	})
}

// Fiber's raciness test (a hundred requests with one key, one run, one
// answer) and Powertools' concurrent invocations: callers of one action at
// once, in two replicas, run the tool once, and every envelope reports that
// one run — one of them fresh, the others replayed.
func TestConcurrentCallsOfOneActionRunItOnceAndAgree(t *testing.T) {
	eachStore(t, func(t *testing.T, d *durable) {
		const callers = 16
		l := newLedger()
		var started atomic.Int64
		allStarted := make(chan struct{})
		opts := agenttool.Options{Store: d.store(), Hooks: agenttool.Hooks{
			Start: func(ctx context.Context, _ agenttool.StartEvent) context.Context {
				if started.Add(1) == callers {
					close(allStarted)
				}
				return ctx
			},
		}}
		tools := []*agenttool.Tool{newPay(t, l, opts)}
		opts.Store = d.replica()
		tools = append(tools, newPay(t, l, opts))
		h := l.pause(1)
		envs := make([]envelope.Envelope, callers)
		var wg sync.WaitGroup
		for i := range envs {
			wg.Go(func() { envs[i] = tools[i%2].Invoke(anaCtx(), lunchCharge) })
		}
		within(t, h.started, "the charge to start")
		within(t, allStarted, "every caller to start")
		close(h.release)
		wg.Wait()
		fresh := 0
		for _, env := range envs {
			wantEnv(t, env, envelope.Success, "")
			wantSameResult(t, env, envs[0])
			if !env.Replayed {
				fresh++
			}
		}
		if fresh != 1 {
			t.Errorf("%d envelopes say they ran the charge, want 1", fresh)
		}
		l.wantRuns(t, 1)
		l.wantEffects(t, 1)
	})
}

// Powertools expires an in-progress record after the Lambda's remaining
// time and then runs the handler again (the DESIGN's "re-running a
// timed-out call": users saw duplicate withdrawals); Fiber's entries
// expire after their Lifetime. In retrysafe a holder that died leaves its claim
// pending; once its lease lapsed (or, for boltstore, when the file is
// opened again) the action is unknown, never free: a reconcilable tool asks
// the destination first and runs again only on a not-applied answer; a
// keyed one retries with the same key, which the destination dedupes; an
// at-most-once one waits for a person.
func TestAHolderThatDiedIsReconciledNotRunAgain(t *testing.T) {
	// dies runs the first process: it claims the charge, the destination
	// applies it or not, and the process dies before it records anything.
	dies := func(t *testing.T, d *durable, l *ledger, class agenttool.Class, applied bool) {
		t.Helper()
		dead := &faultyStore{Store: d.store()}
		dead.die()
		if applied {
			// What it answered before it died is still the truth.
			env := newPay(t, l, agenttool.Options{Store: dead, Class: class}).Invoke(anaCtx(), lunchCharge)
			wantEnv(t, env, envelope.Success, "")
			return
		}
		// It dies in the middle of its request, before the charge.
		h := l.pause(1)
		ctx, kill := context.WithCancel(anaCtx())
		out := make(chan struct{})
		var last envelope.Envelope
		go func() {
			last = newPay(t, l, agenttool.Options{Store: dead, Class: class}).Invoke(ctx, lunchCharge)
			close(out)
		}()
		within(t, h.started, "the first charge to start")
		kill()
		within(t, out, "the dying call to end")
		if last.Status == envelope.Success {
			t.Errorf("a call killed before the charge answered %s", last)
		}
	}
	// later is the next process, started after the dead one's lease
	// lapsed: its clock is past the lease, the attempt timeout and the
	// clock skew the takeover waits for.
	later := func(t *testing.T, d *durable, l *ledger, class agenttool.Class) *agenttool.Tool {
		return newPay(t, l, agenttool.Options{Store: d.restart(), Class: class, Now: (&jumpClock{ahead: 5 * time.Minute}).Now})
	}
	t.Run("reconcilable, applied", func(t *testing.T) {
		eachStore(t, func(t *testing.T, d *durable) {
			l := newLedger()
			dies(t, d, l, agenttool.Reconcilable, true)
			env := later(t, d, l, agenttool.Reconcilable).Invoke(anaCtx(), lunchCharge)
			wantEnv(t, env, envelope.Success, "")
			if !env.Reconciled || l.runs.Load() != 1 {
				t.Errorf("%s after %d runs; want the dead holder's charge reconciled, not run again", env, l.runs.Load())
			}
			l.wantEffects(t, 1)
		})
	})
	t.Run("reconcilable, not applied", func(t *testing.T) {
		eachStore(t, func(t *testing.T, d *durable) {
			l := newLedger()
			dies(t, d, l, agenttool.Reconcilable, false)
			env := later(t, d, l, agenttool.Reconcilable).Invoke(anaCtx(), lunchCharge)
			wantEnv(t, env, envelope.Success, "")
			if l.runs.Load() != 2 || l.checks.Load() == 0 {
				t.Errorf("%s after %d runs and %d checks; want one run after the destination said not applied", env, l.runs.Load(), l.checks.Load())
			}
			l.wantEffects(t, 1)
		})
	})
	t.Run("keyed", func(t *testing.T) {
		for _, applied := range []bool{true, false} {
			eachStore(t, func(t *testing.T, d *durable) {
				l := newLedger()
				l.keyed = true
				dies(t, d, l, agenttool.Keyed, applied)
				env := later(t, d, l, agenttool.Keyed).Invoke(anaCtx(), lunchCharge)
				wantEnv(t, env, envelope.Success, "")
				l.wantEffects(t, 1)
			})
		}
	})
	t.Run("at most once", func(t *testing.T) {
		eachStore(t, func(t *testing.T, d *durable) {
			l := newLedger()
			dies(t, d, l, agenttool.AtMostOnce, true)
			env := later(t, d, l, agenttool.AtMostOnce).Invoke(anaCtx(), lunchCharge)
			wantEnv(t, env, envelope.UnknownOutcome, envelope.CodeOutcomeUnknown)
			if env.Next != envelope.AskHuman || l.runs.Load() != 1 {
				t.Errorf("%s after %d runs; want ask_human and no second run", env, l.runs.Load())
			}
			l.wantEffects(t, 1)
		})
	})
}

// Powertools raises IdempotencyPersistenceLayerError when it cannot save the
// in-progress record, and Fiber answers 500 when its lock or storage fails:
// nothing runs. So does retrysafe (I4, fail closed): definite_failure,
// store_unavailable, and the tool is not run; once the store is back, the
// action runs once.
func TestAStoreThatCannotClaimRunsNothing(t *testing.T) {
	eachStore(t, func(t *testing.T, d *durable) {
		l := newLedger()
		store := &faultyStore{Store: d.store()}
		store.failClaim.Store(true)
		tool := newPay(t, l, agenttool.Options{Store: store})
		env := tool.Invoke(anaCtx(), lunchCharge)
		wantEnv(t, env, envelope.DefiniteFailure, envelope.CodeStoreUnavailable)
		if l.runs.Load() != 0 {
			t.Fatalf("the tool ran %d times with a store that cannot claim", l.runs.Load())
		}
		store.failClaim.Store(false)
		env = tool.Invoke(anaCtx(), lunchCharge)
		wantEnv(t, env, envelope.Success, "")
		if env.Replayed {
			t.Errorf("%s; want the first run of the action", env)
		}
		l.wantEffects(t, 1)
	})
}

// Powertools raises IdempotencyPersistenceLayerError when it cannot save the
// result after the handler ran, and Fiber answers 500 when it cannot save
// the response: the caller hears of a failure though the effect happened,
// and its retry may run it again (the DESIGN's "effect done, completion
// write failed"). retrysafe answers the truth — success, with the result —
// and a repeat never runs the charge again: while the record's lease is
// live it is in progress, and once it lapsed the destination is asked.
func TestAnOutcomeThatCannotBeRecordedIsStillTheTruthAndRunsOnce(t *testing.T) {
	eachStore(t, func(t *testing.T, d *durable) {
		l := newLedger()
		store := &faultyStore{Store: d.store()}
		store.failFinish.Store(true)
		first := newPay(t, l, agenttool.Options{Store: store, WaitTimeout: 20 * time.Millisecond}).Invoke(anaCtx(), lunchCharge)
		wantEnv(t, first, envelope.Success, "")
		if len(first.Result) == 0 {
			t.Errorf("%s; want the charge's result", first)
		}
		store.heal()
		again := newPay(t, l, agenttool.Options{Store: store, WaitTimeout: 20 * time.Millisecond}).Invoke(anaCtx(), lunchCharge)
		switch {
		case again.Status == envelope.Success:
			wantSameResult(t, again, first)
		case again.Status == envelope.UnknownOutcome && again.Error.Code == envelope.CodeInProgress:
		default:
			t.Errorf("a repeat while the first record's lease is live: %s; want success or in_progress", again)
		}
		later := newPay(t, l, agenttool.Options{Store: d.restart(), Now: (&jumpClock{ahead: 5 * time.Minute}).Now}).Invoke(anaCtx(), lunchCharge)
		wantEnv(t, later, envelope.Success, "")
		if later.RequestRef != first.RequestRef {
			t.Errorf("%s answers another action than %s", later, first.RequestRef)
		}
		l.wantRuns(t, 1)
		l.wantEffects(t, 1)
	})
}

// Powertools raises when it cannot delete the record after a failed
// handler. In retrysafe a key that cannot be given back after attempts
// that applied nothing is never read as free nor as done: the call says
// nothing was applied, and the next call, once the lease lapsed, asks the
// destination and charges once.
func TestAKeyThatCannotBeGivenBackNeverLeadsToASecondEffect(t *testing.T) {
	eachStore(t, func(t *testing.T, d *durable) {
		l := newLedger()
		l.setStep(func(n int) (bool, error) {
			if n <= payRetry.MaxAttempts {
				return false, &envelope.HTTPError{StatusCode: 503, Method: "POST"}
			}
			return true, nil
		})
		store := &faultyStore{Store: d.store()}
		store.failRelease.Store(true)
		first := newPay(t, l, agenttool.Options{Store: store}).Invoke(anaCtx(), lunchCharge)
		if first.Status != envelope.DefiniteFailure || first.Attempts != payRetry.MaxAttempts {
			t.Fatalf("%s; want a definite failure after %d attempts: nothing was applied", first, payRetry.MaxAttempts)
		}
		later := newPay(t, l, agenttool.Options{Store: d.restart(), Now: (&jumpClock{ahead: 5 * time.Minute}).Now}).Invoke(anaCtx(), lunchCharge)
		wantEnv(t, later, envelope.Success, "")
		if l.runs.Load() != int64(payRetry.MaxAttempts+1) {
			t.Errorf("the tool ran %d times, want %d", l.runs.Load(), payRetry.MaxAttempts+1)
		}
		l.wantEffects(t, 1)
	})
}

// The IETF draft lets a resource expire keys and publish the policy, Stripe
// keeps a key about 24 hours, Powertools runs the handler again once a
// record's expiry passed, Fiber after its Lifetime: a repeat within the
// lifetime is replayed, after it is a new action. So in retrysafe, with
// Options.KeyTTL, across restarts; the new action's charge goes through
// (its fencing token is above the expired action's, for a destination that
// keeps tokens).
func TestAnOutcomeIsReplayedForItsKeyLifetimeThenTheActionIsNew(t *testing.T) {
	eachStore(t, func(t *testing.T, d *durable) {
		l := newLedger()
		clk := &jumpClock{}
		opts := func(s agenttool.Store) agenttool.Options {
			return agenttool.Options{Store: s, KeyTTL: time.Hour, Now: clk.Now}
		}
		first := newPay(t, l, opts(d.store())).Invoke(anaCtx(), lunchCharge)
		wantEnv(t, first, envelope.Success, "")
		clk.Advance(59 * time.Minute)
		inside := newPay(t, l, opts(d.restart())).Invoke(anaCtx(), lunchCharge)
		wantEnv(t, inside, envelope.Success, "")
		if !inside.Replayed {
			t.Errorf("within the key lifetime: %s; want a replay", inside)
		}
		clk.Advance(2 * time.Minute)
		after := newPay(t, l, opts(d.restart())).Invoke(anaCtx(), lunchCharge)
		wantEnv(t, after, envelope.Success, "")
		if after.Replayed || after.RequestRef != first.RequestRef {
			t.Errorf("after the key lifetime: %s; want a new run under the same reference", after)
		}
		if l.runs.Load() != 2 || l.count(first.RequestRef) != 2 {
			t.Errorf("%d runs, %d charges; want the expired action and the new one", l.runs.Load(), l.count(first.RequestRef))
		}
	})
}

// Two idempotency layers with two lifetimes: a keyed destination (Stripe)
// may keep a key longer than retrysafe keeps the outcome. A call after
// the key lifetime is then a new action to retrysafe, and the destination
// answers it with the charge it made for the key: the envelope says so
// (replayed, nothing repeated), and nothing is charged twice.
func TestADestinationThatStillKeepsTheKeyAnswersTheActionAfterItsLifetime(t *testing.T) {
	eachStore(t, func(t *testing.T, d *durable) {
		l := newLedger()
		l.keyed = true
		clk := &jumpClock{}
		opts := func(s agenttool.Store) agenttool.Options {
			return agenttool.Options{Store: s, Class: agenttool.Keyed, KeyTTL: time.Hour, Now: clk.Now}
		}
		first := newPay(t, l, opts(d.store())).Invoke(anaCtx(), lunchCharge)
		wantEnv(t, first, envelope.Success, "")
		clk.Advance(2 * time.Hour)
		after := newPay(t, l, opts(d.restart())).Invoke(anaCtx(), lunchCharge)
		wantEnv(t, after, envelope.Success, "")
		wantSameResult(t, after, first)
		if !after.Replayed {
			t.Errorf("%s; want it to say the destination replayed the first charge", after)
		}
		l.wantEffects(t, 1)
	})
}

// Powertools hashes the JSON of the payload, sorted, so that the same data
// in another order is one key; the IETF draft allows one Idempotency-Key
// field and no more. retrysafe reads the input as the tool will: inputs the
// tool cannot tell apart (the same members in another order, 1000 written
// 1000.0 or 1e3, an empty optional member left out or not) are one action,
// replayed, never a second charge; and an input that says two things at
// once (a member given twice) is refused.
func TestInputsTheToolCannotTellApartAreOneAction(t *testing.T) {
	eachStore(t, func(t *testing.T, d *durable) {
		l := newLedger()
		tool := newPay(t, l, agenttool.Options{Store: d.store()})
		first := tool.Invoke(anaCtx(), `{"customer":"cus_ana","amount":1000}`)
		wantEnv(t, first, envelope.Success, "")
		for _, in := range []string{
			`{"amount":1000,"customer":"cus_ana"}`,
			`{"customer":"cus_ana","amount":1000.0}`,
			`{"customer":"cus_ana","amount":1e3}`,
			`{"customer":"cus_ana","amount":1000,"memo":""}`,
			`{"customer":"cus_ana","amount":1000,"tags":[]}`,
		} {
			env := tool.Invoke(anaCtx(), in)
			wantEnv(t, env, envelope.Success, "")
			if !env.Replayed {
				t.Errorf("%s\n-> %s; want the first charge replayed", in, env)
			}
			wantSameResult(t, env, first)
		}
		for _, in := range []string{
			`{"customer":"cus_ana","customer":"cus_bob","amount":1000}`,
			`{"customer":"cus_bob","amount":1000,"amount":2000}`,
		} {
			wantEnv(t, tool.Invoke(anaCtx(), in), envelope.DefiniteFailure, envelope.CodeInvalidInput)
		}
		l.wantRuns(t, 1)
		l.wantEffects(t, 1)
	})
}

// A time to live that deletes every old record, in progress or not
// (DynamoDB's on Powertools' table; the DESIGN's "reapers that delete
// everything old"), frees an action nobody knows the outcome of. An
// unknown outcome in retrysafe never expires: long
// after the key lifetime, and after a sweep, a repeat still meets it and
// asks the destination; it is not run as a new action.
func TestAnUnknownOutcomeNeverExpires(t *testing.T) {
	eachStore(t, func(t *testing.T, d *durable) {
		l := newLedger()
		l.setStep(func(n int) (bool, error) { return true, errReplyLost })
		l.setPending(true)
		clk := &jumpClock{}
		opts := func(s agenttool.Store) agenttool.Options {
			return agenttool.Options{Store: s, KeyTTL: time.Hour, Now: clk.Now}
		}
		first := newPay(t, l, opts(d.store())).Invoke(anaCtx(), lunchCharge)
		wantEnv(t, first, envelope.UnknownOutcome, envelope.CodeOutcomeUnknown)
		clk.Advance(30 * 24 * time.Hour)
		store := d.restart()
		tool := newPay(t, l, opts(store))
		op, err := agenttool.NewOperator(store, tool)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := op.SweepOnce(context.Background(), agenttool.SweeperOptions{}); err != nil {
			t.Fatal(err)
		}
		open, err := op.Unknown(context.Background(), "", 0)
		if err != nil || len(open) != 1 || open[0].Key != first.RequestRef {
			t.Fatalf("unknown records after a month and a sweep: %v, %v; want %s", open, err, first.RequestRef)
		}
		again := tool.Invoke(anaCtx(), lunchCharge)
		if again.Status != envelope.UnknownOutcome || again.RequestRef != first.RequestRef {
			t.Errorf("a month later: %s; want the action still unknown", again)
		}
		// Settled a month late, by the sweeper: the key lifetime runs from
		// the settlement, so the repeat that follows is replayed.
		l.setPending(false)
		if r, err := op.SweepOnce(context.Background(), agenttool.SweeperOptions{}); err != nil || r.Applied != 1 {
			t.Fatalf("sweep %+v, %v; want the charge found applied", r, err)
		}
		settled := tool.Invoke(anaCtx(), lunchCharge)
		wantEnv(t, settled, envelope.Success, "")
		if !settled.Replayed || !settled.Reconciled {
			t.Errorf("after the sweeper settled it: %s; want the reconciled charge replayed", settled)
		}
		l.wantRuns(t, 1)
		l.wantEffects(t, 1)
	})
}

// Stripe keeps an idempotency key about 24 hours: a retry with the same key
// after that is a new request to it. A keyed tool in retrysafe retries an
// unknown action with its key only while the destination keeps it
// (DestinationKeyTTL); past that, without a reconciler, it waits for a
// person instead of charging again.
func TestAKeyedActionIsNotRetriedOnceTheDestinationMayHaveForgottenItsKey(t *testing.T) {
	eachStore(t, func(t *testing.T, d *durable) {
		l := newLedger()
		l.keyed = true
		l.setStep(func(n int) (bool, error) { return true, errReplyLost })
		clk := &jumpClock{}
		opts := func(s agenttool.Store) agenttool.Options {
			return agenttool.Options{Store: s, Class: agenttool.Keyed, Now: clk.Now}
		}
		first := newPay(t, l, opts(d.store())).Invoke(anaCtx(), lunchCharge)
		wantEnv(t, first, envelope.UnknownOutcome, envelope.CodeOutcomeUnknown)
		runs := l.runs.Load()
		clk.Advance(25 * time.Hour)
		l.setStep(nil)
		l.keyed = false // it forgot the key
		later := newPay(t, l, opts(d.restart())).Invoke(anaCtx(), lunchCharge)
		wantEnv(t, later, envelope.UnknownOutcome, envelope.CodeOutcomeUnknown)
		if later.Next != envelope.AskHuman || l.runs.Load() != runs {
			t.Errorf("%s after %d more runs; want ask_human and no run", later, l.runs.Load()-runs)
		}
		l.wantEffects(t, 1)
	})
}

// The IETF draft and Stripe take the key from the client (an
// Idempotency-Key header) and Powertools from the event. retrysafe differs
// on purpose (I3): the caller of an agent's tool is a model, which makes up
// new keys on every turn, so trusted code makes the key and a key the model
// supplies — in any spelling, or a request reference pasted from an earlier
// answer — is refused and nothing is run or stored; with StripModelKeys the
// field is dropped and cannot make a second action of the same charge.
func TestAKeyTheModelSuppliesIsRefusedAndRunsNothing(t *testing.T) {
	eachStore(t, func(t *testing.T, d *durable) {
		l := newLedger()
		tool := newPay(t, l, agenttool.Options{Store: d.store()})
		for _, in := range []string{
			`{"customer":"cus_ana","amount":1000,"memo":"lunch","Idempotency-Key":"8e03978e-40d5-43e8-bc93-6894a57f9324"}`,
			`{"customer":"cus_ana","amount":1000,"memo":"lunch","idempotency_key":"8e03978e-40d5-43e8-bc93-6894a57f9324"}`,
			`{"customer":"cus_ana","amount":1000,"memo":"lunch","request_id":"req-1"}`,
		} {
			env := tool.Invoke(anaCtx(), in)
			wantEnv(t, env, envelope.DefiniteFailure, envelope.CodeModelSuppliedKey)
		}
		first := tool.Invoke(anaCtx(), lunchCharge)
		wantEnv(t, first, envelope.Success, "")
		if first.Replayed {
			t.Errorf("%s: the refused calls stored something", first)
		}
		pasted := tool.Invoke(anaCtx(), `{"customer":"cus_ana","amount":1000,"memo":"`+first.RequestRef+`"}`)
		wantEnv(t, pasted, envelope.DefiniteFailure, envelope.CodeModelSuppliedKey)

		strip := newPay(t, l, agenttool.Options{Store: d.store(), ModelKeys: agenttool.StripModelKeys})
		again := strip.Invoke(anaCtx(), `{"customer":"cus_ana","amount":1000,"memo":"lunch","idempotency_key":"a-new-key-every-turn"}`)
		wantEnv(t, again, envelope.Success, "")
		if !again.Replayed || again.RequestRef != first.RequestRef {
			t.Errorf("with the model's key stripped: %s; want the first charge replayed", again)
		}
		l.wantRuns(t, 1)
		l.wantEffects(t, 1)
	})
}

// Stripe scopes keys to an account, and the IETF draft's security section
// asks for a composite key with attributes of the client, so that one
// client cannot reach another's cached response. In retrysafe the key is
// bound to the principal (I6): one input, even under one action id, is two
// actions for two principals; neither is replayed to the other, nor shown
// to an operator narrowed to the other.
func TestOneActionOfTwoPrincipalsIsTwoActionsNeverReplayedAcross(t *testing.T) {
	eachStore(t, func(t *testing.T, d *durable) {
		l := newLedger()
		store := d.store()
		tool := newPay(t, l, agenttool.Options{Store: store})
		ana := agenttool.WithActionID(agenttool.WithScope(context.Background(), "tenant-1/ana", "conversation-1"), "order-42")
		bob := agenttool.WithActionID(agenttool.WithScope(context.Background(), "tenant-2/bob", "conversation-1"), "order-42")
		forAna := tool.Invoke(ana, lunchCharge)
		forBob := tool.Invoke(bob, lunchCharge)
		wantEnv(t, forAna, envelope.Success, "")
		wantEnv(t, forBob, envelope.Success, "")
		if forBob.Replayed || forBob.RequestRef == forAna.RequestRef || string(forBob.Result) == string(forAna.Result) {
			t.Errorf("bob's charge %s\nanswers with ana's %s", forBob, forAna)
		}
		for who, ctx := range map[string]context.Context{"ana": ana, "bob": bob} {
			env := tool.Invoke(ctx, lunchCharge)
			want := map[string]envelope.Envelope{"ana": forAna, "bob": forBob}[who]
			wantEnv(t, env, envelope.Success, "")
			wantSameResult(t, env, want)
		}
		op, err := agenttool.NewOperator(store, tool)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := op.ForPrincipal("tenant-2/bob").Show(context.Background(), forAna.RequestRef); !errors.Is(err, agenttool.ErrNotFound) {
			t.Errorf("bob's operator sees ana's record: %v", err)
		}
		l.wantRuns(t, 2)
		l.wantEffects(t, 2)
	})
}

// Powertools keys each idempotent function by its name, so two functions
// given one payload both run. In retrysafe the key is bound to the tool: a
// charge and a refund with one input are two actions, each run once.
func TestOneInputToTwoToolsIsTwoActions(t *testing.T) {
	eachStore(t, func(t *testing.T, d *durable) {
		l := newLedger()
		charge := newPay(t, l, agenttool.Options{Store: d.store()})
		refund, err := agenttool.New("refund", "Refund a customer.", l.charge, agenttool.Options{
			Store: d.store(), Class: agenttool.Reconcilable, Reconciler: l, IdentifyingFields: []string{"customer", "amount"}, Retry: payRetry,
		})
		if err != nil {
			t.Fatal(err)
		}
		for range 2 {
			for _, tool := range []*agenttool.Tool{charge, refund} {
				wantEnv(t, tool.Invoke(anaCtx(), lunchCharge), envelope.Success, "")
			}
		}
		if l.runs.Load() != 2 {
			t.Errorf("the tools ran %d times, want 2", l.runs.Load())
		}
		l.wantEffects(t, 2)
	})
}

// Powertools hashed a missing key as null, so that every request without
// it shared one record and got the first one's result
// (powertools-lambda-typescript#1501, powertools-lambda-python#2465,
// powertools-lambda-java#1200); it raises IdempotencyKeyError when told
// to (raise_on_no_idempotency_key). Stripe saves no result for a request
// that failed validation: the corrected request runs. retrysafe refuses an
// action without its identifying values (invalid_input), runs and stores
// nothing, and the corrected call is the action's first.
func TestAnActionWithoutItsIdentifyingValuesIsRefusedAndNothingStored(t *testing.T) {
	eachStore(t, func(t *testing.T, d *durable) {
		l := newLedger()
		tool := newPay(t, l, agenttool.Options{Store: d.store()})
		for _, in := range []string{
			`{"customer":"   ","amount":1000,"memo":"lunch"}`,
			`{"customer":null,"amount":1000,"memo":"lunch"}`,
			`{"amount":1000,"memo":"lunch"}`,
			`{}`,
		} {
			env := tool.Invoke(anaCtx(), in)
			wantEnv(t, env, envelope.DefiniteFailure, envelope.CodeInvalidInput)
			if env.Next != envelope.FixInput {
				t.Errorf("%s: next %s, want fix_input", in, env.Next)
			}
		}
		if l.runs.Load() != 0 {
			t.Fatalf("the tool ran %d times on input without its identifying values", l.runs.Load())
		}
		env := tool.Invoke(anaCtx(), lunchCharge)
		wantEnv(t, env, envelope.Success, "")
		if env.Replayed {
			t.Errorf("%s: a refused call stored something", env)
		}
		l.wantEffects(t, 1)
	})
}

// Powertools tests that falsy values (0, False) are not taken for a
// missing key. In retrysafe only null, "", [] and {} are empty: an amount
// of 0 identifies an action like any other, runs once and is replayed.
func TestZeroIsAValueThatIdentifiesAnAction(t *testing.T) {
	eachStore(t, func(t *testing.T, d *durable) {
		l := newLedger()
		tool := newPay(t, l, agenttool.Options{Store: d.store()})
		zero := `{"customer":"cus_ana","amount":0,"memo":"card check"}`
		first := tool.Invoke(anaCtx(), zero)
		wantEnv(t, first, envelope.Success, "")
		again := tool.Invoke(anaCtx(), zero)
		wantEnv(t, again, envelope.Success, "")
		wantSameResult(t, again, first)
		if !again.Replayed || l.runs.Load() != 1 {
			t.Errorf("%s after %d runs; want the zero charge replayed", again, l.runs.Load())
		}
		l.wantEffects(t, 1)
	})
}

// Powertools tests a handler that mutates its event (it passes a copy), and
// the DESIGN's "key computed twice" pitfall wrote the completion under
// another key than the claim. A tool that changes its input in retrysafe
// changes neither the key nor the fingerprint: they are derived once, up
// front, and the repeat is replayed.
func TestAToolThatChangesItsInputKeepsItsKey(t *testing.T) {
	eachStore(t, func(t *testing.T, d *durable) {
		l := newLedger()
		meddling := func(ctx context.Context, in payIn) (payOut, error) {
			for i := range in.Tags {
				in.Tags[i] = "changed by the tool"
			}
			in.Tags = append(in.Tags, "added by the tool")
			in.Customer, in.Memo = "cus_someone_else", ""
			return l.charge(ctx, in)
		}
		tool, err := agenttool.New("charge", "Charge a customer.", meddling, agenttool.Options{
			Store: d.store(), Class: agenttool.Reconcilable, Reconciler: l, Retry: payRetry,
		})
		if err != nil {
			t.Fatal(err)
		}
		in := `{"customer":"cus_ana","amount":1000,"memo":"lunch","tags":["team","friday"]}`
		first := tool.Invoke(anaCtx(), in)
		wantEnv(t, first, envelope.Success, "")
		again := tool.Invoke(anaCtx(), in)
		wantEnv(t, again, envelope.Success, "")
		wantSameResult(t, again, first)
		if !again.Replayed || l.runs.Load() != 1 {
			t.Errorf("%s after %d runs; want the first charge replayed", again, l.runs.Load())
		}
		l.wantEffects(t, 1)
	})
}

// Fiber's middleware leaves safe methods alone (a GET is never cached): a
// read has no effect to protect.
// A ReadOnly tool in retrysafe runs on every call, stores nothing and is
// never replayed.
func TestAReadOnlyToolRunsEveryTimeAndKeepsNothing(t *testing.T) {
	var runs atomic.Int64
	look, err := agenttool.New("balance", "Read a customer's balance.", func(ctx context.Context, in struct {
		Customer string `json:"customer"`
	}) (int64, error) {
		return runs.Add(1), nil
	}, agenttool.Options{Class: agenttool.ReadOnly})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		env := look.Invoke(anaCtx(), `{"customer":"cus_ana"}`)
		wantEnv(t, env, envelope.Success, "")
		if env.Replayed || string(env.Result) != string(rune('1'+i)) {
			t.Errorf("read %d: %s; want a fresh read", i+1, env)
		}
	}
}

// Stripe answers a retry with the same key by replaying the first result,
// and the IETF draft answers 409 while the first request is still being
// processed. A keyed tool in retrysafe retries an attempt whose reply was
// lost with the same key: the destination's replay is the action's one
// effect. If every retry meets a 409 or a refusal, the first attempt may
// still have landed: the call must not say that nothing was applied.
func TestAKeyedRetryAfterALostReplyChargesOnceAndNeverSaysNothingHappened(t *testing.T) {
	conflict := &envelope.HTTPError{StatusCode: 409, Method: "POST", Message: "a request with this key is being processed"}
	reused := &envelope.HTTPError{StatusCode: 422, Method: "POST", Message: "this key was used with another request"}
	cases := []struct {
		name  string
		retry error // what the destination answers the retries
		want  envelope.Status
	}{
		{name: "replayed by the destination", retry: nil, want: envelope.Success},
		{name: "409 until the retries run out", retry: conflict, want: envelope.UnknownOutcome},
		{name: "422 on the retry", retry: reused, want: envelope.UnknownOutcome},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			eachStore(t, func(t *testing.T, d *durable) {
				l := newLedger()
				l.keyed = true
				l.setStep(func(n int) (bool, error) {
					if n == 1 {
						return true, errReplyLost
					}
					return c.retry == nil, c.retry
				})
				opts := agenttool.Options{Store: d.store(), Class: agenttool.Keyed}
				env := newPay(t, l, opts).Invoke(anaCtx(), lunchCharge)
				if env.Status != c.want {
					t.Fatalf("%s\nwant %s: the first attempt was charged", env, c.want)
				}
				l.wantEffects(t, 1)
				if c.want == envelope.Success {
					l.mu.Lock()
					want, _ := json.Marshal(l.results[env.RequestRef])
					l.mu.Unlock()
					if string(env.Result) != string(want) {
						t.Errorf("result %s, want the first charge's %s", env.Result, want)
					}
					return
				}
				// The destination is done with the first request: the
				// next call's retry with the same key is answered by it.
				l.setStep(nil)
				opts.Store = d.restart()
				later := newPay(t, l, opts).Invoke(anaCtx(), lunchCharge)
				wantEnv(t, later, envelope.Success, "")
				if later.RequestRef != env.RequestRef {
					t.Errorf("%s answers another action than %s", later, env.RequestRef)
				}
				l.wantEffects(t, 1)
			})
		})
	}
}

// Powertools raises IdempotencyAlreadyInProgressError to a second request
// and, when the first fails, deletes the record so that the next request
// runs. A call of retrysafe that waits for the first call of its action
// (WaitTimeout) gets the first's outcome when it ends: its success or its
// refusal replayed, its unknown outcome without a second run; and only
// when the first applied nothing and gave the key back does the waiting
// call run the action itself, once. Here and in another replica.
func TestACallWaitingForTheFirstGetsItsOutcome(t *testing.T) {
	cases := []struct {
		name string
		// first is the destination's answer to the first call's attempts.
		first      func(n int) (bool, error)
		wantFirst  envelope.Status
		wantWaiter envelope.Status
		waiterRuns bool
		effects    int
	}{
		{name: "succeeded", first: nil, wantFirst: envelope.Success, wantWaiter: envelope.Success, effects: 1},
		{name: "refused", first: func(int) (bool, error) {
			return false, envelope.MarkDefinite(errors.New("your card was declined"), "card_declined")
		}, wantFirst: envelope.DefiniteFailure, wantWaiter: envelope.DefiniteFailure},
		{name: "unknown", first: func(int) (bool, error) { return true, errReplyLost },
			wantFirst: envelope.UnknownOutcome, wantWaiter: envelope.UnknownOutcome, effects: 1},
		{name: "gave the key back", first: func(n int) (bool, error) {
			if n <= payRetry.MaxAttempts {
				return false, &envelope.HTTPError{StatusCode: 503, Method: "POST"}
			}
			return true, nil
		}, wantFirst: envelope.DefiniteFailure, wantWaiter: envelope.Success, waiterRuns: true, effects: 1},
	}
	for _, c := range cases {
		for _, where := range []string{"here", "in another replica"} {
			t.Run(c.name+" "+where, func(t *testing.T) {
				eachStore(t, func(t *testing.T, d *durable) {
					l := newLedger()
					l.setStep(c.first)
					if c.name == "unknown" {
						l.setPending(true)
					}
					opts := agenttool.Options{Store: d.store(), WaitTimeout: time.Minute}
					tool := newPay(t, l, opts)
					waiter := tool
					if where != "here" {
						opts.Store = d.replica()
						waiter = newPay(t, l, opts)
					}
					h := l.pause(1)
					firstOut := make(chan envelope.Envelope, 1)
					go func() { firstOut <- tool.Invoke(anaCtx(), lunchCharge) }()
					within(t, h.started, "the first charge to start")
					waited := make(chan envelope.Envelope, 1)
					go func() { waited <- waiter.Invoke(anaCtx(), lunchCharge) }()
					close(h.release)
					first := <-firstOut
					if first.Status != c.wantFirst {
						t.Fatalf("first call %s; want %s", first, c.wantFirst)
					}
					runs := l.runs.Load()
					second := <-waited
					if second.Status != c.wantWaiter || second.RequestRef != first.RequestRef {
						t.Fatalf("waiting call %s\nwant %s for the first's action (first: %s)", second, c.wantWaiter, first)
					}
					ranAgain := l.runs.Load() > runs
					if c.waiterRuns {
						// It ran after the first gave the key back, or it
						// met the key free and ran before it waited at all.
						if second.Replayed {
							t.Errorf("waiting call %s; the first applied nothing, so it did not replay a result", second)
						}
					} else {
						if ranAgain {
							t.Errorf("the waiting call ran the tool again")
						}
						if c.wantWaiter != envelope.UnknownOutcome && (!second.Replayed || string(second.Result) != string(first.Result) ||
							(first.Error != nil && *second.Error != *first.Error)) {
							t.Errorf("waiting call %s\nwant the first's envelope replayed: %s", second, first)
						}
					}
					l.wantEffects(t, c.effects)
				})
			})
		}
	}
}

// Powertools deletes the record when the handler raises, so a handler that
// fails after its effect runs again on the retry. A Go tool that panics
// after its effect leaves retrysafe's call with no answer (the panic goes
// to the caller), and its action is neither free nor done: a repeat while
// the lease lasts is in progress, and once the lease lapsed the destination
// is asked and the charge is not run again.
func TestAToolThatPanicsAfterItsEffectIsReconciledNotRunAgain(t *testing.T) {
	eachStore(t, func(t *testing.T, d *durable) {
		l := newLedger()
		panicky := func(ctx context.Context, in payIn) (payOut, error) {
			out, err := l.charge(ctx, in)
			if l.runs.Load() == 1 {
				panic("payments client: unexpected end of JSON input")
			}
			return out, err
		}
		build := func(opts agenttool.Options) *agenttool.Tool {
			opts.Class, opts.Reconciler, opts.Retry, opts.IdentifyingFields = agenttool.Reconcilable, l, payRetry, []string{"customer", "amount"}
			tool, err := agenttool.New("charge", "Charge a customer.", panicky, opts)
			if err != nil {
				t.Fatal(err)
			}
			return tool
		}
		tool := build(agenttool.Options{Store: d.store(), WaitTimeout: 20 * time.Millisecond})
		func() {
			defer func() {
				if recover() == nil {
					t.Fatal("the tool's panic did not reach the caller")
				}
			}()
			env := tool.Invoke(anaCtx(), lunchCharge)
			t.Fatalf("the call answered %s", env)
		}()
		again := tool.Invoke(anaCtx(), lunchCharge)
		wantEnv(t, again, envelope.UnknownOutcome, envelope.CodeInProgress)
		later := build(agenttool.Options{Store: d.restart(), Now: (&jumpClock{ahead: 5 * time.Minute}).Now}).Invoke(anaCtx(), lunchCharge)
		wantEnv(t, later, envelope.Success, "")
		if !later.Reconciled || l.runs.Load() != 1 {
			t.Errorf("%s after %d runs; want the charge reconciled, not run again", later, l.runs.Load())
		}
		l.wantEffects(t, 1)
	})
}

// Powertools lets another invocation run once an in-progress record's
// expiry (the Lambda's remaining time) has passed, trusting that the first
// is gone; but any lease can end while its holder is only paused (a GC, a
// VM migration). In retrysafe
// a call that finds a lease lapsed takes the action over, and a
// destination that keeps the fencing token refuses the paused holder's
// late request (the DESIGN's "a paused holder"): one charge, and the
// paused call, when it wakes, answers with what became of the action.
func TestAPausedHolderIsFencedOutByTheDestination(t *testing.T) {
	eachStore(t, func(t *testing.T, d *durable) {
		l := newLedger()
		paused := newPay(t, l, agenttool.Options{Store: d.store()})
		h := l.stall(1)
		out := make(chan envelope.Envelope, 1)
		go func() { out <- paused.Invoke(anaCtx(), lunchCharge) }()
		within(t, h.started, "the first call to stall")
		// Another replica, after the paused holder's lease lapsed.
		taker := newPay(t, l, agenttool.Options{Store: d.replica(), Now: (&jumpClock{ahead: 5 * time.Minute}).Now})
		took := taker.Invoke(anaCtx(), lunchCharge)
		wantEnv(t, took, envelope.Success, "")
		close(h.release)
		woke := <-out
		wantEnv(t, woke, envelope.Success, "")
		wantSameResult(t, woke, took)
		if l.runs.Load() != 2 {
			t.Errorf("%d runs, want 2 (the stalled one refused by the destination)", l.runs.Load())
		}
		l.wantEffects(t, 1)
	})
}

// Stripe charges again for a request with another key, whatever its
// parameters: the client decides what is new. retrysafe differs on purpose
// (README, "What counts as one action"): its caller is a model that repeats
// itself, so in one scope the same charge is one action however often it is
// asked for, and a genuine second charge needs a new session or an action
// id from trusted code.
func TestTheSameChargeInOneConversationIsOneAction(t *testing.T) {
	eachStore(t, func(t *testing.T, d *durable) {
		l := newLedger()
		tool := newPay(t, l, agenttool.Options{Store: d.store()})
		first := tool.Invoke(anaCtx(), lunchCharge)
		again := tool.Invoke(anaCtx(), lunchCharge)
		wantEnv(t, again, envelope.Success, "")
		if !again.Replayed || again.RequestRef != first.RequestRef {
			t.Errorf("the same charge asked for again in one conversation: %s; want it replayed", again)
		}
		nextConversation := tool.Invoke(agenttool.WithScope(context.Background(), "tenant-1/ana", "conversation-2"), lunchCharge)
		secondOrder := tool.Invoke(agenttool.WithActionID(anaCtx(), "msg-8812"), lunchCharge)
		for _, env := range []envelope.Envelope{nextConversation, secondOrder} {
			wantEnv(t, env, envelope.Success, "")
			if env.Replayed || env.RequestRef == first.RequestRef {
				t.Errorf("%s; want a new action", env)
			}
		}
		l.wantEffects(t, 3)
	})
}

// The payload validation of Powertools and the IETF draft, under load:
// callers of one key with two inputs (lunch and dinner) at once, in two
// replicas, while the first run succeeds or fails and gives the key back.
// The key is charged at most once, and a success is only ever answered to
// a caller whose input is the one charged — never another input's result.
func TestConcurrentCallsWithTwoInputsForOneKeyNeverAnswerForTheOther(t *testing.T) {
	for _, first := range []string{"succeeds", "gives the key back"} {
		t.Run(first, func(t *testing.T) {
			eachStore(t, func(t *testing.T, d *durable) {
				const callers = 16
				l := newLedger()
				if first != "succeeds" {
					l.setStep(func(n int) (bool, error) {
						if n <= payRetry.MaxAttempts {
							return false, &envelope.HTTPError{StatusCode: 503, Method: "POST"}
						}
						return true, nil
					})
				}
				var started atomic.Int64
				allStarted := make(chan struct{})
				opts := agenttool.Options{Store: d.store(), WaitTimeout: time.Minute, Hooks: agenttool.Hooks{
					Start: func(ctx context.Context, _ agenttool.StartEvent) context.Context {
						if started.Add(1) == callers {
							close(allStarted)
						}
						return ctx
					},
				}}
				tools := []*agenttool.Tool{newPay(t, l, opts)}
				opts.Store = d.replica()
				tools = append(tools, newPay(t, l, opts))
				h := l.pause(1)
				inputs := []string{lunchCharge, dinnerCharge}
				memos := []string{"lunch", "dinner"}
				envs := make([]envelope.Envelope, callers)
				var wg sync.WaitGroup
				for i := range envs {
					wg.Go(func() { envs[i] = tools[i%2].Invoke(anaCtx(), inputs[(i/2)%2]) })
				}
				within(t, h.started, "the first charge to start")
				within(t, allStarted, "every caller to start")
				close(h.release)
				wg.Wait()
				l.wantEffects(t, 1)
				ref := envs[0].RequestRef
				l.mu.Lock()
				charged, result := l.memos[ref], l.results[ref]
				l.mu.Unlock()
				want, _ := json.Marshal(result)
				successes := 0
				for i, env := range envs {
					if env.RequestRef != ref {
						t.Fatalf("caller %d answered for %s, not the key %s", i, env.RequestRef, ref)
					}
					switch env.Status {
					case envelope.Success:
						successes++
						if memos[(i/2)%2] != charged || string(env.Result) != string(want) {
							t.Errorf("caller %d asked for %s and was told %s; the charge was for %s", i, memos[(i/2)%2], env, charged)
						}
					case envelope.DefiniteFailure:
						if c := env.Error.Code; c != envelope.CodeKeyReused && c != envelope.CodeUnavailable {
							t.Errorf("caller %d: %s", i, env)
						}
					default:
						t.Errorf("caller %d: %s", i, env)
					}
				}
				if successes == 0 {
					t.Errorf("no caller was told of the charge")
				}
			})
		})
	}
}

// orderDesk is an existing text tool (a langchaingo tools.Tool, by its
// method set) that places orders at the ledger.
type orderDesk struct{ l *ledger }

func (orderDesk) Name() string        { return "place_order" }
func (orderDesk) Description() string { return "Place an order." }

func (o orderDesk) Call(ctx context.Context, input string) (string, error) {
	var in payIn
	if err := json.Unmarshal([]byte(input), &in); err != nil {
		return "", envelope.MarkDefinite(err, "bad_order")
	}
	out, err := o.l.charge(ctx, in)
	if err != nil {
		return "", err
	}
	b, _ := json.Marshal(out)
	return string(b), nil
}

// Powertools' key from a JMESPath subset of the event with the rest
// validated, for a tool retrysafe wraps as it is (Wrap): the identifying
// fields make the key, everything else the model sends is fingerprinted —
// another memo, or a member the tool ignores (a "nonce" a model adds to
// make a new request) — and refused, not run as a new action; the same
// input in another order or spacing is replayed.
func TestAWrappedToolRefusesItsKeyWithAnotherInputAndRunsNothing(t *testing.T) {
	eachStore(t, func(t *testing.T, d *durable) {
		l := newLedger()
		tool, err := agenttool.Wrap(orderDesk{l}, agenttool.Options{Store: d.store(), Class: agenttool.Reconcilable, Reconciler: l,
			IdentifyingFields: []string{"customer", "amount"}, Retry: payRetry})
		if err != nil {
			t.Fatal(err)
		}
		first := tool.Invoke(anaCtx(), lunchCharge)
		wantEnv(t, first, envelope.Success, "")
		again := tool.Invoke(anaCtx(), ` { "memo" : "lunch" , "customer":"cus_ana", "amount":1000 } `)
		wantEnv(t, again, envelope.Success, "")
		wantSameResult(t, again, first)
		for _, in := range []string{dinnerCharge, `{"customer":"cus_ana","amount":1000,"memo":"lunch","nonce":"7f3a"}`} {
			env := tool.Invoke(anaCtx(), in)
			wantEnv(t, env, envelope.DefiniteFailure, envelope.CodeKeyReused)
			if env.Earlier == nil || env.Earlier.State != envelope.ActionSucceeded {
				t.Errorf("%s; want earlier.state succeeded", env)
			}
		}
		l.wantRuns(t, 1)
		l.wantEffects(t, 1)
	})
}

// Stripe: a retry with the key of a request that may have been processed
// is answered by the destination; until it is, the client cannot know. A
// keyed tool's later call of an action left unknown retries with the same
// key; when those retries meet 503s or a 422, an earlier call's attempt may
// still have charged: the call says the outcome is unknown, never that
// nothing was applied — on every store, across restarts.
func TestALaterCallOfAnUnknownKeyedActionNeverSaysNothingHappened(t *testing.T) {
	eachStore(t, func(t *testing.T, d *durable) {
		l := newLedger()
		l.keyed = true
		l.setStep(func(n int) (bool, error) { return true, errReplyLost })
		opts := func(s agenttool.Store) agenttool.Options {
			return agenttool.Options{Store: s, Class: agenttool.Keyed}
		}
		first := newPay(t, l, opts(d.store())).Invoke(anaCtx(), lunchCharge)
		wantEnv(t, first, envelope.UnknownOutcome, envelope.CodeOutcomeUnknown)
		for _, answer := range []error{
			&envelope.HTTPError{StatusCode: 503, Method: "POST"},
			&envelope.HTTPError{StatusCode: 422, Method: "POST", Message: "this key was used with another request"},
			envelope.MarkDefinite(errors.New("no such customer"), "no_customer"),
		} {
			l.setStep(func(int) (bool, error) { return false, answer })
			env := newPay(t, l, opts(d.restart())).Invoke(anaCtx(), lunchCharge)
			if env.Status != envelope.UnknownOutcome {
				t.Errorf("a later call whose retries met %v: %s\nwant unknown_outcome: the first call's attempt was charged", answer, env)
			}
		}
		l.setStep(nil)
		env := newPay(t, l, opts(d.restart())).Invoke(anaCtx(), lunchCharge)
		wantEnv(t, env, envelope.Success, "")
		if env.RequestRef != first.RequestRef {
			t.Errorf("%s answers another action than %s", env, first.RequestRef)
		}
		l.wantEffects(t, 1)
	})
}

// With Powertools, a record stuck in progress expires, or is deleted from
// the table by hand, and the next call runs whatever happened. In
// retrysafe a person settles an unknown action through the Operator, bound
// to the attempt they looked at: found not applied, the next calls — two at
// once, in two replicas — charge once with the same key; found applied,
// the next call replays the person's finding; a finding about an attempt
// that is no longer the record's settles nothing.
func TestAnOperatorsFindingSettlesTheActionOnce(t *testing.T) {
	for _, finding := range []string{"not applied", "applied", "stale"} {
		t.Run(finding, func(t *testing.T) {
			eachStore(t, func(t *testing.T, d *durable) {
				l := newLedger()
				l.setStep(func(n int) (bool, error) { return finding == "applied", errReplyLost })
				// Nothing can ask this destination: people settle its unknown outcomes.
				settledByPeople := func(store agenttool.Store) *agenttool.Tool {
					tool, err := agenttool.New("charge", "Charge a customer.", l.charge, agenttool.Options{
						Store: store, Class: agenttool.Reconcilable, SettledByOperators: true,
						IdentifyingFields: []string{"customer", "amount"}, Retry: payRetry, ClockSkew: -1,
					})
					if err != nil {
						t.Fatal(err)
					}
					return tool
				}
				store := d.store()
				tool := settledByPeople(store)
				first := tool.Invoke(anaCtx(), lunchCharge)
				wantEnv(t, first, envelope.UnknownOutcome, envelope.CodeOutcomeUnknown)
				l.setStep(nil)
				op, err := agenttool.NewOperator(store, tool)
				if err != nil {
					t.Fatal(err)
				}
				rec, err := op.Show(context.Background(), first.RequestRef)
				if err != nil || rec.State != agenttool.Unknown {
					t.Fatalf("record %+v, %v; want it unknown", rec, err)
				}
				ctx := context.Background()
				switch finding {
				case "not applied":
					err = op.ResolveNotApplied(ctx, first.RequestRef, rec.Attempts, "ops@example.com", "not in the payment log")
				case "applied":
					err = op.ResolveApplied(ctx, first.RequestRef, rec.Attempts, json.RawMessage(`{"charge":"ch_found","amount":1000}`), "ops@example.com", "in the payment log")
				case "stale":
					err = op.ResolveNotApplied(ctx, first.RequestRef, rec.Attempts-1, "ops@example.com", "looked at an older attempt")
					if !errors.Is(err, agenttool.ErrStale) {
						t.Fatalf("a finding about another attempt: %v; want ErrStale", err)
					}
					err = nil
				}
				if err != nil {
					t.Fatal(err)
				}
				runs := l.runs.Load()
				beside := settledByPeople(d.replica())
				envs := make([]envelope.Envelope, 2)
				var wg sync.WaitGroup
				for i, tl := range []*agenttool.Tool{tool, beside} {
					wg.Go(func() { envs[i] = tl.Invoke(anaCtx(), lunchCharge) })
				}
				wg.Wait()
				for _, env := range envs {
					switch finding {
					case "not applied":
						wantEnv(t, env, envelope.Success, "")
						wantSameResult(t, env, envs[0])
					case "applied":
						wantEnv(t, env, envelope.Success, "")
						if string(env.Result) != `{"charge":"ch_found","amount":1000}` {
							t.Errorf("%s; want the operator's finding", env)
						}
					case "stale":
						if env.Status != envelope.UnknownOutcome {
							t.Errorf("%s; want the action still unknown", env)
						}
					}
				}
				ran := l.runs.Load() - runs
				if want := map[string]int64{"not applied": 1}[finding]; ran != want {
					t.Errorf("the tool ran %d times after the finding, want %d", ran, want)
				}
				l.wantEffects(t, map[string]int{"not applied": 1, "applied": 1}[finding])
			})
		})
	}
}

// falsyDesk is a text tool whose answers are falsy: nothing, 0, false, an
// empty object or list.
type falsyDesk struct{ runs *atomic.Int64 }

var falsyAnswers = map[string]string{"say nothing": "", "say zero": "0", "say false": "false", "say {}": "{}", "say []": "[]"}

func (falsyDesk) Name() string        { return "answer" }
func (falsyDesk) Description() string { return "Answer a customer." }

func (f falsyDesk) Call(_ context.Context, in string) (string, error) {
	f.runs.Add(1)
	return falsyAnswers[in], nil
}

// Powertools did not store a falsy response (0, False, "", {}, []) and ran
// the function again on the repeat (powertools-lambda-python#8090), and its
// response hook and Middy middleware mishandled a function that returned
// nothing (#5150, powertools-lambda-typescript#2987). A tool of retrysafe
// whose result is null, nothing, 0, false, {} or [] is recorded, and
// replayed as exactly that, from every store and after a restart.
func TestAFalsyResultIsReplayedAsItWas(t *testing.T) {
	eachStore(t, func(t *testing.T, d *durable) {
		var runs atomic.Int64
		tools := func(store agenttool.Store) (*agenttool.Tool, *agenttool.Tool) {
			null, err := agenttool.New("notify", "Notify a customer.", func(ctx context.Context, in payIn) (*payOut, error) {
				runs.Add(1)
				return nil, nil
			}, agenttool.Options{Store: store, Class: agenttool.Keyed})
			if err != nil {
				t.Fatal(err)
			}
			text, err := agenttool.Wrap(falsyDesk{&runs}, agenttool.Options{Store: store, Class: agenttool.Keyed, TextInput: true})
			if err != nil {
				t.Fatal(err)
			}
			return null, text
		}
		want := map[string]string{"say nothing": `""`, "say zero": "0", "say false": "false", "say {}": "{}", "say []": "[]"}
		null, text := tools(d.store())
		first := null.Invoke(anaCtx(), lunchCharge)
		firsts := map[string]envelope.Envelope{}
		for in := range want {
			firsts[in] = text.Invoke(anaCtx(), in)
		}
		null, text = tools(d.restart())
		again := null.Invoke(anaCtx(), lunchCharge)
		wantEnv(t, first, envelope.Success, "")
		wantEnv(t, again, envelope.Success, "")
		if !again.Replayed || string(first.Result) != "null" || string(again.Result) != "null" {
			t.Errorf("%s then %s; want null, replayed as null", first, again)
		}
		for in, w := range want {
			env := text.Invoke(anaCtx(), in)
			wantEnv(t, env, envelope.Success, "")
			if !env.Replayed || string(firsts[in].Result) != w || string(env.Result) != w {
				t.Errorf("%q: %s then %s; want %s, replayed as %s", in, firsts[in], env, w, w)
			}
		}
		if runs.Load() != int64(1+len(want)) {
			t.Errorf("the tools ran %d times, want %d", runs.Load(), 1+len(want))
		}
	})
}

// The payload validation path Powertools' Java version skipped met an
// in-progress record; one whose holder died (its lease lapsed) is met too:
// another input under its key is refused, nothing runs, the record is left
// for the action's own resend, which asks the destination first.
func TestTheSameKeyWithAnotherInputIsRefusedWhenTheHolderDied(t *testing.T) {
	eachStore(t, func(t *testing.T, d *durable) {
		l := newLedger()
		dead := &faultyStore{Store: d.store()}
		dead.die()
		first := newPay(t, l, agenttool.Options{Store: dead}).Invoke(anaCtx(), lunchCharge)
		wantEnv(t, first, envelope.Success, "")
		later := newPay(t, l, agenttool.Options{Store: d.restart(), Now: (&jumpClock{ahead: 5 * time.Minute}).Now})
		refused := later.Invoke(anaCtx(), dinnerCharge)
		wantEnv(t, refused, envelope.DefiniteFailure, envelope.CodeKeyReused)
		if refused.Earlier == nil || refused.Earlier.RequestRef != first.RequestRef || refused.Earlier.State == envelope.ActionFailed {
			t.Errorf("refusal %s; want it to name %s, not failed", refused, first.RequestRef)
		}
		if l.runs.Load() != 1 || l.checks.Load() != 0 {
			t.Errorf("the refused call ran the tool or asked the destination (%d runs, %d checks)", l.runs.Load(), l.checks.Load())
		}
		resend := later.Invoke(anaCtx(), lunchCharge)
		wantEnv(t, resend, envelope.Success, "")
		if !resend.Reconciled || l.runs.Load() != 1 {
			t.Errorf("the first action's resend %s after %d runs; want it reconciled, not run again", resend, l.runs.Load())
		}
		l.wantEffects(t, 1)
	})
}

// A repeat of an action already done whose claim fails while the store
// can still read the key is answered with the action's success. One that
// cannot reach the store — its context cancelled before it ran, or the
// store down — answers definite_failure for itself (I4: nothing ran), but
// its note must not let the model tell the user the action failed: the
// earlier call did it.
func TestARepeatThatCannotReachTheStoreDoesNotSayTheActionFailed(t *testing.T) {
	eachStore(t, func(t *testing.T, d *durable) {
		l := newLedger()
		store := &faultyStore{Store: d.store()}
		tool := newPay(t, l, agenttool.Options{Store: store})
		wantEnv(t, tool.Invoke(anaCtx(), lunchCharge), envelope.Success, "")

		cancelled, cancel := context.WithCancel(anaCtx())
		cancel()
		// Its claim failing, the key's record still read: the repeat is
		// answered with what became of the action.
		store.failClaim.Store(true)
		if env := tool.Invoke(anaCtx(), lunchCharge); env.Status != envelope.Success || !env.Replayed {
			t.Errorf("a repeat whose claim fails, the record read: %s; want its success replayed", env)
		}
		store.down()
		for _, c := range []struct {
			name string
			ctx  context.Context
			code string
		}{{"cancelled", cancelled, envelope.CodeCancelled}, {"store down", anaCtx(), envelope.CodeStoreUnavailable}} {
			env := tool.Invoke(c.ctx, lunchCharge)
			wantEnv(t, env, envelope.DefiniteFailure, c.code)
			if !strings.Contains(env.Note, "earlier call of the same action") || !strings.Contains(env.Note, "do not tell the user it failed") {
				t.Errorf("%s: note %q; want it to say an earlier call may have done the action, and not to report a failure", c.name, env.Note)
			}
		}
		l.wantEffects(t, 1)
	})
}
