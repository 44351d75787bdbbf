package console_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/console"
	"github.com/retrysafe/retrysafe/agenttool/memstore"
	"github.com/retrysafe/retrysafe/agenttool/storekit"
	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/reconcile"
)

// The principals of the tests, as trusted code names them.
const (
	ana = "tenant-1/ana"
	bob = "tenant-2/bob"
)

// clock is a clock that moves only when told.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

type chargeInput struct {
	Card   string `json:"card"`
	Amount int    `json:"amount"`
}

type emailInput struct {
	To   string `json:"to"`
	Body string `json:"body"`
}

// world is an application with two guarded tools, an operator and a
// console, on a loopback server.
type world struct {
	t         *testing.T
	clock     *clock
	store     *raceStore
	approvals *console.Approvals
	// charge_card is at-most-once: the card processor can neither dedupe
	// nor be asked. It has an approver (the console's) and a refund.
	charge *agenttool.Tool
	// send_email is reconcilable: its reconciler answers verdict.
	email   *agenttool.Tool
	op      *agenttool.Operator
	console *console.Handler
	srv     *httptest.Server

	charges   atomic.Int32           // charges that reached the card processor
	emails    atomic.Int32           // emails that reached the mail server
	loseReply atomic.Bool            // the next effect happens, and its reply is lost
	lostWith  atomic.Pointer[string] // the error text of a lost charge's reply, if set
	log       syncBuffer             // the console's audit log, as JSON lines
	verdict   atomic.Value           // the mail server's answer to the reconciler (reconcile.Answer)
	mu        sync.Mutex
	refunded  []string // compensations, by reference
}

// viewers are the people the test application knows, by the X-User header
// its authentication sets.
var viewers = map[string]console.Viewer{
	"maria":  {Name: "maria", All: true},
	"ana":    {Name: "ana@tenant-1", Principals: []string{ana}},
	"bob":    {Name: "bob@tenant-2", Principals: []string{bob}},
	"both":   {Name: "support@tenants", Principals: []string{ana, bob}},
	"nobody": {Name: "new-hire"},
}

func newWorld(t *testing.T, mount func(h http.Handler) http.Handler) *world {
	t.Helper()
	w := &world{t: t, clock: &clock{now: time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)}, store: &raceStore{Store: memstore.New()}, approvals: &console.Approvals{}}
	w.verdict.Store(reconcile.StillPending())
	fast := agenttool.RetryPolicy{MaxAttempts: 1}
	var err error
	w.charge, err = agenttool.New("charge_card", "Charge a card.", func(ctx context.Context, in chargeInput) (map[string]string, error) {
		w.charges.Add(1)
		if w.loseReply.Swap(false) {
			text := "read tcp 127.0.0.1:4242: connection reset by peer"
			if s := w.lostWith.Load(); s != nil {
				text = *s
			}
			return nil, envelope.MarkUnknown(errors.New(text))
		}
		return map[string]string{"charge_id": "ch_" + strconv.Itoa(int(w.charges.Load()))}, nil
	}, agenttool.Options{
		Store: w.store, Class: agenttool.AtMostOnce, Approver: w.approvals, Retry: fast, Now: w.clock.Now, ClockSkew: -1, // one process, one clock: an attempt that ended cannot still land
		Compensate: func(ctx context.Context, info agenttool.CallInfo) error {
			w.mu.Lock()
			defer w.mu.Unlock()
			w.refunded = append(w.refunded, info.RequestRef)
			return nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	w.email, err = agenttool.New("send_email", "Send an email.", func(ctx context.Context, in emailInput) (map[string]string, error) {
		w.emails.Add(1)
		if w.loseReply.Swap(false) {
			return nil, envelope.MarkUnknown(errors.New("EOF"))
		}
		return map[string]string{"message_id": "m-" + strconv.Itoa(int(w.emails.Load()))}, nil
	}, agenttool.Options{
		Store: w.store, Class: agenttool.Reconcilable, Retry: fast, Now: w.clock.Now, ClockSkew: -1,
		Reconciler: reconcile.Func(func(ctx context.Context, ref string) reconcile.Answer {
			return w.verdict.Load().(reconcile.Answer)
		}),
	})
	if err != nil {
		t.Fatal(err)
	}
	if w.op, err = agenttool.NewOperator(w.store, w.charge, w.email); err != nil {
		t.Fatal(err)
	}
	w.console, err = console.New(console.Options{
		Operator:  w.op,
		Approvals: w.approvals,
		Who: func(r *http.Request) (console.Viewer, error) {
			v, ok := viewers[r.Header.Get("X-User")]
			if !ok {
				return console.Viewer{}, errors.New("not signed in")
			}
			return v, nil
		},
		ShowScope: func(s agenttool.Scope) string {
			name := map[string]string{ana: "Ana Lima (tenant 1)", bob: "Bob Stone (tenant 2)"}[s.Principal]
			if s.Session != "" {
				name += ", " + s.Session
			}
			return name
		},
		Now:    w.clock.Now,
		Logger: slog.New(slog.NewJSONHandler(&w.log, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	var h http.Handler = w.console
	if mount != nil {
		h = mount(h)
	}
	w.srv = httptest.NewServer(h)
	t.Cleanup(w.srv.Close)
	return w
}

// raceStore is the world's store. Its between function, once set, runs
// just before the next claim that takes a record over (an operator's hold):
// what another party does after the console read the record and before the
// decision holds it.
type raceStore struct {
	*memstore.Store
	between atomic.Pointer[func()]
}

func (s *raceStore) Claim(ctx context.Context, r storekit.ClaimRequest) (storekit.ClaimResult, error) {
	if r.TakeOver {
		if f := s.between.Swap(nil); f != nil {
			(*f)()
		}
	}
	return s.Store.Claim(ctx, r)
}

// syncBuffer is a buffer safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// ctx is the trusted context of a call by principal, labelled label.
func ctx(principal, label string) context.Context {
	c := agenttool.WithScope(context.Background(), principal, "conversation-1")
	if label != "" {
		c = agenttool.WithLabel(c, label)
	}
	return c
}

const (
	chargeAna = `{"card":"4242","amount":1200}`
	chargeBob = `{"card":"5555","amount":900}`
	emailAna  = `{"to":"ana@example.com","body":"Lunch?"}`
)

// lostCharge makes a charge whose reply is lost: an unknown at-most-once
// action, which the agent then asks about once (next ask_human).
func (w *world) lostCharge(principal, label, input string) envelope.Envelope {
	w.t.Helper()
	w.loseReply.Store(true)
	first := w.charge.Invoke(ctx(principal, label), input)
	if first.Status != envelope.UnknownOutcome {
		w.t.Fatalf("the lost charge answered %s", first)
	}
	again := w.charge.Invoke(ctx(principal, label), input)
	if again.Status != envelope.UnknownOutcome || again.Next != envelope.AskHuman {
		w.t.Fatalf("asked again, the lost charge answered %s; want unknown_outcome, ask_human", again)
	}
	return again
}

// lostEmail makes an email whose reply is lost and that the mail server
// cannot place yet: an unknown reconcilable action.
func (w *world) lostEmail(principal, label string) envelope.Envelope {
	w.t.Helper()
	w.loseReply.Store(true)
	env := w.email.Invoke(ctx(principal, label), emailAna)
	if env.Status != envelope.UnknownOutcome {
		w.t.Fatalf("the lost email answered %s", env)
	}
	return env
}

// page is one HTTP answer.
type page struct {
	status   int
	body     string
	location string
	url      *url.URL
}

// do sends a request as user (the X-User header, standing in for the
// application's authentication), without following redirects.
func (w *world) do(user, method, path string, form url.Values, header ...string) page {
	w.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, w.srv.URL+path, body)
	if err != nil {
		w.t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	req.Header.Set("X-User", user)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Do(req)
	if err != nil {
		w.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return page{status: resp.StatusCode, body: string(b), location: resp.Header.Get("Location"), url: resp.Request.URL}
}

func (w *world) get(user, path string) page { return w.do(user, http.MethodGet, path, nil) }

func detailPath(ref string) string { return "/action?ref=" + url.QueryEscape(ref) }

var tokenField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// token reads the form token from a page user sees.
func (w *world) token(user, ref string) string {
	w.t.Helper()
	p := w.get(user, detailPath(ref))
	m := tokenField.FindStringSubmatch(p.body)
	if m == nil {
		w.t.Fatalf("%s's page of %s (%d) has no form token:\n%s", user, ref, p.status, p.body)
	}
	return m[1]
}

// decide makes a decision as user from the form of the page, as a browser
// would: with the page's token and the attempts it shows.
func (w *world) decide(user, ref, do string, attempts int, reason string, extra ...string) page {
	w.t.Helper()
	form := url.Values{"csrf": {w.token(user, ref)}, "ref": {ref}, "do": {do},
		"attempts": {strconv.Itoa(attempts)}, "reason": {reason}}
	for i := 0; i+1 < len(extra); i += 2 {
		form.Set(extra[i], extra[i+1])
	}
	return w.do(user, http.MethodPost, "/action", form)
}

// record reads ref's record as the operator of all principals.
func (w *world) record(ref string) agenttool.Record {
	w.t.Helper()
	rec, err := w.op.Show(context.Background(), ref)
	if err != nil {
		w.t.Fatal(err)
	}
	return rec
}

// awaiting reports whether ref still awaits a decision, untouched.
func (w *world) awaiting(ref string) bool {
	rec := w.record(ref)
	return rec.State == agenttool.Unknown && !rec.RetryApproved && rec.Resolution == nil
}

// text is what a person reads of an HTML page: no tags, entities decoded,
// spaces collapsed.
func text(html string) string {
	html = regexp.MustCompile(`(?s)<style>.*?</style>`).ReplaceAllString(html, " ")
	html = regexp.MustCompile(`<[^>]*>`).ReplaceAllString(html, " ")
	r := strings.NewReplacer("&lt;", "<", "&gt;", ">", "&#34;", `"`, "&#39;", "'", "&#43;", "+", "&amp;", "&", "&quot;", `"`)
	return strings.Join(strings.Fields(r.Replace(html)), " ")
}

func httptestGet(path string) *http.Request {
	r := httptest.NewRequest(http.MethodGet, path, nil)
	return r
}

func httptestPost(form url.Values) *http.Request {
	r := httptest.NewRequest(http.MethodPost, "/action", strings.NewReader(form.Encode()))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return r
}

func serve(h http.Handler, r *http.Request) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	return rec
}
