package opcmd_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/boltstore"
	"github.com/retrysafe/retrysafe/agenttool/opcmd"
	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/reconcile"
)

// errReset is a reply lost on the way back: the outcome is unknown.
var errReset = errors.New("read tcp 127.0.0.1:25: connection reset by peer")

// destination is a fake mail server or payment API: it applies requests
// by reference, can lose a reply (after applying the request, or before),
// answers its reconciler's questions, and undoes a request on demand.
type destination struct {
	mu        sync.Mutex
	applied   map[string]int // request reference → times applied
	undone    []string
	runs      int
	lose      string                      // "after" applies and loses the reply; "before" loses the request
	lostWith  error                       // the error of a lost reply; errReset if nil
	verdicts  map[string]reconcile.Answer // the reconciler's answer by reference; pending if none
	blockRuns chan struct{}               // if set, a run waits for it to close
	running   chan string                 // if set, a run sends its reference here first
}

func newDestination() *destination {
	return &destination{applied: map[string]int{}, verdicts: map[string]reconcile.Answer{}}
}

func (d *destination) do(ctx context.Context) error {
	ref := agenttool.RequestRef(ctx)
	d.mu.Lock()
	d.runs++
	lose, block, running, lostWith := d.lose, d.blockRuns, d.running, d.lostWith
	d.mu.Unlock()
	if lostWith == nil {
		lostWith = errReset
	}
	if running != nil {
		running <- ref
	}
	if block != nil {
		<-block
	}
	if lose == "before" {
		return lostWith
	}
	d.mu.Lock()
	d.applied[ref]++
	d.mu.Unlock()
	if lose == "after" {
		return lostWith
	}
	return nil
}

func (d *destination) set(f func(d *destination)) {
	d.mu.Lock()
	defer d.mu.Unlock()
	f(d)
}

func (d *destination) count(ref string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.applied[ref]
}

func (d *destination) runCount() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.runs
}

func (d *destination) undoneRefs() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.undone...)
}

func (d *destination) Check(ctx context.Context, req reconcile.Request) reconcile.Answer {
	d.mu.Lock()
	defer d.mu.Unlock()
	if a, ok := d.verdicts[req.Ref]; ok {
		return a
	}
	return reconcile.StillPending()
}

type emailInput struct {
	To      string `json:"to"`
	Subject string `json:"subject"`
}

type refundInput struct {
	Order  string `json:"order"`
	Amount string `json:"amount"`
}

// fixture is an application with two guarded tools on one store:
// send_email (reconcilable: its reconciler asks the mail server) and
// refund_payment (at most once, with a compensating action), and an
// operator for both.
type fixture struct {
	t             *testing.T
	store         agenttool.Store
	mail, pay     *destination
	email, refund *agenttool.Tool
	op            *agenttool.Operator
	now           func() time.Time // opcmd's clock; time.Now unless a test sets it
}

var fastRetry = agenttool.RetryPolicy{MaxAttempts: 1}

func newFixture(t *testing.T, store agenttool.Store, tune ...func(*agenttool.Options)) *fixture {
	t.Helper()
	tuned := func(o agenttool.Options) agenttool.Options {
		for _, fn := range tune {
			fn(&o)
		}
		return o
	}
	f := &fixture{t: t, store: store, mail: newDestination(), pay: newDestination(), now: time.Now}
	var err error
	f.email, err = agenttool.New("send_email", "Send an email.", func(ctx context.Context, in emailInput) (map[string]string, error) {
		if err := f.mail.do(ctx); err != nil {
			return nil, err
		}
		return map[string]string{"message_id": "<" + agenttool.RequestRef(ctx) + "@mail.test>"}, nil
	}, tuned(agenttool.Options{Store: store, Class: agenttool.Reconcilable, Reconciler: f.mail, Retry: fastRetry, WaitTimeout: -1,
		ClockSkew: -1})) // one process, one clock: an attempt that ended cannot still land
	if err != nil {
		t.Fatal(err)
	}
	f.refund, err = agenttool.New("refund_payment", "Refund a payment.", func(ctx context.Context, in refundInput) (string, error) {
		return "refunded", f.pay.do(ctx)
	}, tuned(agenttool.Options{Store: store, Class: agenttool.AtMostOnce, Retry: fastRetry, WaitTimeout: -1, ClockSkew: -1,
		Compensate: func(ctx context.Context, info agenttool.CallInfo) error {
			f.pay.set(func(d *destination) { d.undone = append(d.undone, info.RequestRef) })
			return nil
		}}))
	if err != nil {
		t.Fatal(err)
	}
	f.op, err = agenttool.NewOperator(store, f.email, f.refund)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// boltFixture is a fixture on a bbolt file of its own.
func boltFixture(t *testing.T) *fixture {
	t.Helper()
	store, err := boltstore.Open(filepath.Join(t.TempDir(), "app.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	return newFixture(t, store)
}

// ctxFor is the trusted context of a call by principal in a session, with
// a label. (Each test action has a session of its own: the unknown fence
// holds back a session's new actions while one is unknown.)
func ctxFor(principal, session, label string) context.Context {
	ctx := agenttool.WithScope(context.Background(), principal, session)
	if label != "" {
		ctx = agenttool.WithLabel(ctx, label)
	}
	return ctx
}

// sendEmail calls send_email for principal, to the address.
func (f *fixture) sendEmail(principal, label, to string) envelope.Envelope {
	return f.email.Invoke(ctxFor(principal, "conversation-"+to, label), `{"to":"`+to+`","subject":"Lunch on Friday?"}`)
}

// lostEmail sends an email whose reply is lost (lose: "after" if the
// server applied it, "before" if it never got it): its outcome is unknown.
func (f *fixture) lostEmail(principal, label, to, lose string) envelope.Envelope {
	f.t.Helper()
	f.mail.set(func(d *destination) { d.lose = lose })
	defer f.mail.set(func(d *destination) { d.lose = "" })
	env := f.sendEmail(principal, label, to)
	if env.Status != envelope.UnknownOutcome {
		f.t.Fatalf("a lost email: %s, want unknown_outcome", env)
	}
	return env
}

func (f *fixture) refundOrder(principal, label, order string) envelope.Envelope {
	return f.refund.Invoke(ctxFor(principal, "conversation-"+order, label), `{"order":"`+order+`","amount":"12.50"}`)
}

// lostRefund refunds an order through a lost reply: the refund was made
// (lose "after") or the request never reached the bank ("before").
func (f *fixture) lostRefund(principal, label, order, lose string) envelope.Envelope {
	f.t.Helper()
	f.pay.set(func(d *destination) { d.lose = lose })
	defer f.pay.set(func(d *destination) { d.lose = "" })
	env := f.refundOrder(principal, label, order)
	if env.Status != envelope.UnknownOutcome {
		f.t.Fatalf("a lost refund: %s, want unknown_outcome", env)
	}
	return env
}

// result is what one command printed and returned.
type result struct {
	code           int
	stdout, stderr string
}

// run runs the operator command line, mounted as "myapp retrysafe".
func (f *fixture) run(args ...string) result {
	return f.runWith(context.Background(), &opcmd.Options{Name: "myapp retrysafe", Now: f.now}, args...)
}

func (f *fixture) runWith(ctx context.Context, opts *opcmd.Options, args ...string) result {
	f.t.Helper()
	var out, errs bytes.Buffer
	code := opcmd.Run(ctx, f.op, args, &out, &errs, opts)
	return result{code, out.String(), errs.String()}
}

// ok fails the test unless the command succeeded.
func (r result) ok(t *testing.T) result {
	t.Helper()
	if r.code != opcmd.ExitOK {
		t.Fatalf("exit %d, want 0\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	return r
}

// exits fails the test unless the command exited with code and said each
// of says on stderr.
func (r result) exits(t *testing.T, code int, says ...string) result {
	t.Helper()
	if r.code != code {
		t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", r.code, code, r.stdout, r.stderr)
	}
	for _, s := range says {
		if !strings.Contains(r.stderr, s) {
			t.Errorf("stderr does not say %q:\n%s", s, r.stderr)
		}
	}
	return r
}

// lines decodes -json output: one object per line.
func (r result) lines(t *testing.T) []map[string]any {
	t.Helper()
	var objs []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("not one JSON object per line: %q: %v", line, err)
		}
		objs = append(objs, m)
	}
	return objs
}

// row returns the table row of stdout that starts with ref, split into
// its columns (two spaces or more apart).
func (r result) row(t *testing.T, ref string) []string {
	t.Helper()
	for _, line := range strings.Split(r.stdout, "\n") {
		if strings.HasPrefix(line, ref+" ") {
			var cols []string
			for _, c := range strings.Split(line, "  ") {
				if c = strings.TrimSpace(c); c != "" {
					cols = append(cols, c)
				}
			}
			return cols
		}
	}
	t.Fatalf("no row for %s in:\n%s", ref, r.stdout)
	return nil
}

// record reads a record as the application's operator sees it.
func (f *fixture) record(ref string) agenttool.Record {
	f.t.Helper()
	rec, err := f.op.Show(context.Background(), ref)
	if err != nil {
		f.t.Fatal(err)
	}
	return rec
}
