package mcpguard_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/mcpguard"
	"github.com/retrysafe/retrysafe/agenttool/pgstore"
	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/internal/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// A server reached over streamable HTTP, with the headers the
// configuration gives it (a token from the guard's environment), stateful
// (it refuses a request carrying a protocol version it did not negotiate:
// the client's per-connection _meta is not passed on): the guard's calls
// reach it, and a lost reply of a keyed booking is resent with its key,
// one booking.
func TestGuard_AnHTTPServerBehindTheGuard(t *testing.T) {
	t.Setenv("AIRLINE_TOKEN", "up-s3cret")
	a := &airline{}
	up := a.server()
	handler := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return up }, nil)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer up-s3cret" {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		handler.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	cs := connect(t, guardOver(t, nil, `{"principal": "ana@example.com", "mcpServers": {"airline": {"type": "http",
	  "url": "`+srv.URL+`", "headers": {"Authorization": "Bearer ${AIRLINE_TOKEN}"},
	  "tools": {"book": {"class": "keyed", "key_argument": "idempotency_key"}, "list_flights": {"class": "read_only"}}}}}`, mcpguard.Options{}))
	if res, _ := call(t, cs, "list_flights", map[string]any{"from": "LIS"}, nil); !strings.Contains(resultText(res), "TP1234") {
		t.Errorf("a read-only tool over HTTP: %s", resultText(res))
	}
	a.lose(1)
	_, env := call(t, cs, "book", lunchFlight, nil)
	if env.Status != envelope.Success || a.count() != 1 {
		t.Errorf("a keyed booking over HTTP whose first reply was lost: %s, %d bookings; want success, one", env, a.count())
	}
}

// Two guards share one PostgreSQL store, in front of one server: the
// same booking sent to both at once, over and over, is made once; every
// answer is a success or says the booking is in progress — never a
// second booking.
func TestGuard_TwoGuardsOnOnePostgreSQLStoreBookOnce(t *testing.T) {
	store := pgtest.Open(t)
	a := &airline{}
	up := a.server()
	cfg := configWith(`{"class": "at_most_once"}`, "")
	var clients []*mcp.ClientSession
	for range 2 {
		parsed, err := mcpguard.ParseConfig([]byte(cfg))
		if err != nil {
			t.Fatal(err)
		}
		g, err := mcpguard.New(context.Background(), parsed, &mcpguard.Options{Store: store, Logger: discard(),
			Transport: serving(up),
			Tune:      func(_ string, o *agenttool.Options) { o.WaitTimeout = 5e9 }})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { g.Close() })
		clients = append(clients, connect(t, g), connect(t, g))
	}
	var wg sync.WaitGroup
	envs := make([]envelope.Envelope, 16)
	for i := range envs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, envs[i] = call(t, clients[i%len(clients)], "book", lunchFlight, nil)
		}()
	}
	wg.Wait()
	for i, env := range envs {
		if env.Status != envelope.Success && (env.Error == nil || env.Error.Code != envelope.CodeInProgress) {
			t.Errorf("call %d: %s; want success, or in_progress", i, env)
		}
	}
	if n := a.count(); n != 1 {
		t.Errorf("%d bookings for one action sent to two guards, want 1", n)
	}
}

// guardsOnOnePostgreSQL starts n guards with cfg in front of up, sharing one
// PostgreSQL store, and returns a client of each.
func guardsOnOnePostgreSQL(t *testing.T, up *mcp.Server, cfg string, n int) ([]*mcpguard.Guard, []*mcp.ClientSession) {
	t.Helper()
	store := pgtest.Open(t)
	var gs []*mcpguard.Guard
	var cs []*mcp.ClientSession
	for range n {
		parsed, err := mcpguard.ParseConfig([]byte(cfg))
		if err != nil {
			t.Fatal(err)
		}
		g, err := mcpguard.New(context.Background(), parsed, &mcpguard.Options{Store: store, Logger: discard(), Transport: serving(up),
			Tune: func(_ string, o *agenttool.Options) {
				o.Retry = agenttool.RetryPolicy{MaxAttempts: 2, InitialInterval: time.Millisecond, MaxElapsed: time.Second}
				o.WaitTimeout = time.Second
			}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { g.Close() })
		gs = append(gs, g)
		cs = append(cs, connect(t, g))
	}
	return gs, cs
}

// lagging is a booking server whose lookup answers from a search index
// that lags writes, and says so in its text after the JSON.
type lagging struct {
	mu       sync.Mutex
	bookings []string
	lose     int
	note     string // what follows the JSON in the lookup's text
	answer   string // the lookup's whole text, when set
}

func (l *lagging) count() int { l.mu.Lock(); defer l.mu.Unlock(); return len(l.bookings) }

func (l *lagging) server() *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "lagging", Version: "1"}, nil)
	type in struct {
		Flight    string `json:"flight"`
		Passenger string `json:"passenger"`
		Reference string `json:"client_reference,omitempty"`
	}
	mcp.AddTool(s, &mcp.Tool{Name: "book", Description: "Book."},
		func(ctx context.Context, _ *mcp.CallToolRequest, in in) (*mcp.CallToolResult, map[string]string, error) {
			l.mu.Lock()
			defer l.mu.Unlock()
			l.bookings = append(l.bookings, in.Reference)
			if l.lose > 0 {
				l.lose--
				return nil, nil, errReplyLost
			}
			return nil, map[string]string{"id": fmt.Sprint(len(l.bookings))}, nil
		})
	s.AddTool(&mcp.Tool{Name: "lookup", Description: "Look up.", InputSchema: map[string]any{"type": "object",
		"properties": map[string]any{"client_reference": map[string]any{"type": "string"}}, "required": []any{"client_reference"}}},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			// The index has not caught up: it finds nothing, and says the
			// answer may be incomplete.
			if l.answer != "" {
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: l.answer}}}, nil
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: `{"found": false}` + l.note}}}, nil
		})
	return s
}

const laggingConfig = `{"principal": "ana@example.com", "mcpServers": {"lagging": {"command": "x", "tools": {
  "book": {"class": "reconcilable", "ref_argument": "client_reference", "attempt_timeout": "100ms", "listen_late": "0s",
    "check": {"tool": "lookup", "arguments": {"client_reference": "${ref}"},
      "applied": {"pointer": "/found", "equals": true}, "not_applied": {"pointer": "/found", "equals": false}}},
  "lookup": {"class": "read_only"}}}}}`

// A check whose text is a JSON value followed by more (a warning, a
// second value) is not "its text as JSON": it must read as cannot say,
// never as not applied. The reply of a booking is lost on replica A; the
// model retries on replica B once the window has passed.
func TestGuard_ACheckWhoseTextIsNotOneJSONValueNeverLetsASecondAttemptGo(t *testing.T) {
	for _, note := range []string{
		"\n\nWarning: the search index lags writes by up to 5 minutes; a booking made since may not show yet.",
		"\n{\"found\": true}",
	} {
		l := &lagging{lose: 1, note: note}
		_, cs := guardsOnOnePostgreSQL(t, l.server(), laggingConfig, 2)
		_, env := call(t, cs[0], "book", lunchFlight, nil)
		t.Logf("first call on replica A: %s", env)
		time.Sleep(1500 * time.Millisecond)
		_, again := call(t, cs[1], "book", lunchFlight, nil)
		t.Logf("the retry on replica B: %s", again)
		if n := l.count(); n != 1 {
			t.Errorf("note %q: %d bookings for one action, want 1 (the check's text was not one JSON value, yet read as not applied)", note, n)
		}
	}
}

const slowNotedConfig = `{"principal": "ana@example.com", "mcpServers": {"airline": {"command": "airline-mcp", "tools": {
  "book_noted": {"class": "reconcilable", "ref_argument": "client_reference", "attempt_timeout": "1s", "listen_late": "0s",
    "check": {"tool": "find_booking", "arguments": {"client_reference": "${ref}"},
      "applied": {"pointer": "/found", "equals": true}, "not_applied": {"pointer": "/found", "equals": false}}},
  "find_booking": {"class": "read_only"}}}}}`

// retryLoop calls book_noted on cs every step until d has passed, and
// checks each answer against the bookings made.
func retryLoop(t *testing.T, cs *mcp.ClientSession, a *airline, d, step time.Duration) {
	t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(step) {
		_, env := call(t, cs, "book_noted", lunchFlight, nil)
		if env.Status == envelope.Success && a.count() == 0 {
			t.Errorf("success with no booking made: %s", env)
		}
		if env.Status == envelope.DefiniteFailure && a.count() > 0 {
			t.Logf("definite_failure with a booking made (maybe of this action): %s", env)
		}
	}
}

// A client cancels its call on replica A (notifications/cancelled) while
// the server's commit goes on; the model asks again and again on replica
// B. One booking.
func TestGuard_ACancelledCallOnOneReplicaIsNotSentAgainOnTheOther(t *testing.T) {
	a := &airline{}
	_, cs := guardsOnOnePostgreSQL(t, slowAirline(a, 800*time.Millisecond), slowNotedConfig, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	_, err := cs[0].CallTool(ctx, &mcp.CallToolParams{Name: "book_noted", Arguments: lunchFlight})
	cancel()
	t.Logf("the first call, cancelled: %v", err)
	retryLoop(t, cs[1], a, 3500*time.Millisecond, 250*time.Millisecond)
	time.Sleep(time.Second)
	if n := a.count(); n != 1 {
		t.Errorf("%d bookings for one action, want 1", n)
	}
}

// Replica A is killed (closed) with a call in flight at the server,
// whose commit goes on; the model asks again on replica B. One booking.
func TestGuard_AReplicaKilledMidCallNeverLetsTheOtherBookAgain(t *testing.T) {
	a := &airline{}
	gs, cs := guardsOnOnePostgreSQL(t, slowAirline(a, 800*time.Millisecond), slowNotedConfig, 2)
	done := make(chan struct{})
	go func() {
		defer close(done)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := cs[0].CallTool(ctx, &mcp.CallToolParams{Name: "book_noted", Arguments: lunchFlight})
		t.Logf("the first call, its guard killed: %v", err)
	}()
	time.Sleep(200 * time.Millisecond)
	gs[0].Close()
	<-done
	retryLoop(t, cs[1], a, 4*time.Second, 250*time.Millisecond)
	time.Sleep(time.Second)
	if n := a.count(); n != 1 {
		t.Errorf("%d bookings for one action, want 1", n)
	}
}

// Keyed: a lost reply on A, A restarted; the model rewords on B, then
// retries on B. One booking; no success without it.
func TestGuard_KeyedRewordedAfterUnknownOnTheOtherReplica(t *testing.T) {
	a := &airline{}
	gs, cs := guardsOnOnePostgreSQL(t, a.server(), guardConfig, 2)
	a.lose(2)
	_, env := call(t, cs[0], "book", lunchFlight, nil)
	if env.Status != envelope.UnknownOutcome {
		t.Fatalf("%s", env)
	}
	gs[0].Close()
	_, reworded := call(t, cs[1], "book", map[string]any{"flight": "TP1234", "passenger": "Ana Lima (window seat)"}, nil)
	t.Logf("reworded on B: %s", reworded)
	_, again := call(t, cs[1], "book", lunchFlight, nil)
	t.Logf("retry on B: %s", again)
	if n := a.count(); n != 1 {
		t.Errorf("%d bookings, want 1", n)
	}
	if again.Status != envelope.Success {
		t.Errorf("the retry: %s; want success", again)
	}
}

// at_most_once: parallel identical calls through both replicas while the
// first reply is lost; then reworded calls in parallel. One booking, and
// no success.
func TestGuard_AtMostOnceParallelThroughBothReplicas(t *testing.T) {
	a := &airline{}
	_, cs := guardsOnOnePostgreSQL(t, a.server(), configWith(`{"class": "at_most_once"}`, ""), 2)
	a.lose(1)
	var wg sync.WaitGroup
	envs := make([]envelope.Envelope, 12)
	for i := range envs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			args := lunchFlight
			if i >= 6 {
				args = map[string]any{"flight": "TP1234", "passenger": fmt.Sprintf("Ana Lima %d", i)}
			}
			_, envs[i] = call(t, cs[i%2], "book", args, nil)
		}()
	}
	wg.Wait()
	n := a.count()
	for i, env := range envs {
		t.Logf("call %d: %s %v", i, env.Status, env.Error)
		if env.Status == envelope.Success && n == 0 {
			t.Errorf("call %d: success, nothing booked", i)
		}
	}
	if n > 1 {
		// several distinct reworded actions may run before any is unknown;
		// count only those answered success or unknown
		t.Logf("%d bookings", n)
	}
}

// dbDownAfterEffect is a server whose book stops the guard's database
// after it booked (the operator's PostgreSQL crashes mid-call).
func dbDownAfterEffect(a *airline, stop func()) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "airline", Version: "1"}, nil)
	var once sync.Once
	mcp.AddTool(s, &mcp.Tool{Name: "book", Description: "Book one seat."},
		func(ctx context.Context, _ *mcp.CallToolRequest, in bookIn) (*mcp.CallToolResult, booking, error) {
			res, b, err := a.book(in)
			once.Do(stop)
			return res, b, err
		})
	mcp.AddTool(s, &mcp.Tool{Name: "find_booking", Description: "Find."},
		func(ctx context.Context, _ *mcp.CallToolRequest, in struct {
			Reference string `json:"client_reference"`
		}) (*mcp.CallToolResult, map[string]any, error) {
			return nil, map[string]any{"found": a.count() > 0}, nil
		})
	return s
}

// The database crashes after the server acted and before the outcome is
// recorded; it comes back; the model retries on the other replica. The
// first answer must not be definite_failure, and there is one booking.
func TestGuard_TheDatabaseCrashesBetweenTheEffectAndItsRecord(t *testing.T) {
	for _, class := range []string{`{"class": "at_most_once"}`, `{"class": "keyed", "key_argument": "idempotency_key"}`} {
		pg := pgtest.StartServer(t)
		a := &airline{}
		up := dbDownAfterEffect(a, pg.Stop)
		cfg := `{"principal": "ana@example.com", "mcpServers": {"airline": {"command": "x", "tools": {"book": ` + class + `}}}}`
		store1, err := pgstore.Open(context.Background(), &pgstore.Options{URL: pg.URL(), Schema: "rv"})
		if err != nil {
			t.Fatal(err)
		}
		var cs []*mcp.ClientSession
		for range 2 {
			parsed, err := mcpguard.ParseConfig([]byte(cfg))
			if err != nil {
				t.Fatal(err)
			}
			g, err := mcpguard.New(context.Background(), parsed, &mcpguard.Options{Store: store1, Logger: discard(), Transport: serving(up),
				Tune: func(_ string, o *agenttool.Options) {
					o.Retry = agenttool.RetryPolicy{MaxAttempts: 2, InitialInterval: time.Millisecond, MaxElapsed: time.Second}
					o.WaitTimeout = time.Second
					o.Lease = 2 * time.Second
				}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { g.Close() })
			cs = append(cs, connect(t, g))
		}
		_, env := call(t, cs[0], "book", lunchFlight, nil)
		t.Logf("%s: the call whose record failed: %s", class, env)
		if env.Status == envelope.DefiniteFailure && a.count() > 0 {
			t.Errorf("%s: definite_failure, yet the booking was made", class)
		}
		pg.Start()
		var last envelope.Envelope
		for i := 0; i < 12; i++ {
			_, last = call(t, cs[1], "book", lunchFlight, nil)
			if last.Status == envelope.Success {
				break
			}
			time.Sleep(500 * time.Millisecond)
		}
		t.Logf("%s: the retry on B: %s", class, last)
		if n := a.count(); n != 1 {
			t.Errorf("%s: %d bookings, want 1", class, n)
		}
		store1.Close()
		pg.Stop()
	}
}

// A check configured as the interop run configures server-memory's
// (applied: /bookings/0 exists; not applied: /bookings/0 absent) gets an
// answer of another shape: no isError, but not the listing it reads —
// an error object, a bare JSON string, a null listing. "No such member"
// needs a listing to lack it: an answer where /bookings cannot be walked
// proves nothing, and must read as cannot say, never as not applied.
func TestGuard_ACheckAnswerOfAnotherShapeIsNotProofOfAbsence(t *testing.T) {
	const cfg = `{"principal": "ana@example.com", "mcpServers": {"lagging": {"command": "x", "tools": {
  "book": {"class": "reconcilable", "ref_argument": "client_reference", "attempt_timeout": "100ms", "listen_late": "0s",
    "check": {"tool": "lookup", "arguments": {"client_reference": "${ref}"},
      "applied": {"pointer": "/bookings/0"}, "not_applied": {"pointer": "/bookings/0", "absent": true}}},
  "lookup": {"class": "read_only"}}}}}`
	for _, answer := range []string{
		`{"error": "search backend timed out", "retry_after": 2}`,
		`"rate limited: try again in 2s"`,
		`{"bookings": null, "error": "shard unavailable"}`,
	} {
		l := &lagging{lose: 1, answer: answer}
		_, cs := guardsOnOnePostgreSQL(t, l.server(), cfg, 2)
		_, env := call(t, cs[0], "book", lunchFlight, nil)
		t.Logf("first call on replica A: %s", env.Status)
		time.Sleep(1500 * time.Millisecond)
		_, again := call(t, cs[1], "book", lunchFlight, nil)
		t.Logf("the retry on replica B: %s", again.Status)
		if n := l.count(); n != 1 {
			t.Errorf("check answer %s: %d bookings for one action, want 1 (an answer that has no listing was read as not applied)", answer, n)
		}
	}
}

// httpReplicas starts two guards of cfg (with tokens) over up, sharing a
// PostgreSQL store, each behind its own streamable HTTP front, and
// returns a client of each, with token.
func httpReplicas(t *testing.T, up *mcp.Server, cfg, token string) []*mcp.ClientSession {
	t.Helper()
	store := pgtest.Open(t)
	var cs []*mcp.ClientSession
	for range 2 {
		parsed, err := mcpguard.ParseConfig([]byte(cfg))
		if err != nil {
			t.Fatal(err)
		}
		g, err := mcpguard.New(context.Background(), parsed, &mcpguard.Options{Store: store, Logger: discard(), Transport: serving(up),
			Tune: func(_ string, o *agenttool.Options) {
				o.Retry = agenttool.RetryPolicy{MaxAttempts: 2, InitialInterval: time.Millisecond, MaxElapsed: time.Second}
				o.WaitTimeout = time.Second
			}})
		if err != nil {
			t.Fatal(err)
		}
		h, err := g.HTTPHandler()
		if err != nil {
			t.Fatal(err)
		}
		front := httptest.NewServer(h)
		t.Cleanup(func() { g.Close() })
		t.Cleanup(front.Close)
		c, err := mcp.NewClient(&mcp.Implementation{Name: "desktop", Version: "1"}, nil).Connect(context.Background(),
			&mcp.StreamableClientTransport{Endpoint: front.URL, HTTPClient: &http.Client{Transport: bearerTransport(token)}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		cs = append(cs, c)
	}
	return cs
}

// Over streamable HTTP, two replicas: the client gives up on a slow
// reconcilable booking on A (it cancels); the model asks again and again
// on B; then the same call in parallel through both. One booking.
func TestGuard_HTTPCancelledOnOneReplicaAndParallelRetriesOnBoth(t *testing.T) {
	t.Setenv("REVIEW_TOKEN", "tok-ana")
	cfg := strings.Replace(slowNotedConfig, `"principal": "ana@example.com",`, `"tokens": {"ana@example.com": "${REVIEW_TOKEN}"},`, 1)
	a := &airline{}
	cs := httpReplicas(t, slowAirline(a, 800*time.Millisecond), cfg, "tok-ana")
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	_, err := cs[0].CallTool(ctx, &mcp.CallToolParams{Name: "book_noted", Arguments: lunchFlight})
	cancel()
	t.Logf("the first call, given up: %v", err)
	for end := time.Now().Add(3500 * time.Millisecond); time.Now().Before(end); time.Sleep(300 * time.Millisecond) {
		var wg sync.WaitGroup
		for i := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, env := call(t, cs[i], "book_noted", lunchFlight, nil)
				if env.Status == envelope.Success && a.count() == 0 {
					t.Errorf("success with nothing booked: %s", env)
				}
			}()
		}
		wg.Wait()
	}
	time.Sleep(time.Second)
	if n := a.count(); n != 1 {
		t.Errorf("%d bookings for one action, want 1", n)
	}
}

// Over streamable HTTP, two replicas, keyed: lost replies, parallel
// identical calls through both, then a reworded one. One booking per key,
// and the reworded one does not run while the first is unknown.
func TestGuard_HTTPKeyedParallelThroughBothReplicas(t *testing.T) {
	t.Setenv("REVIEW_TOKEN", "tok-ana")
	cfg := strings.Replace(guardConfig, `"principal": "ana@example.com",`, `"tokens": {"ana@example.com": "${REVIEW_TOKEN}"},`, 1)
	a := &airline{}
	cs := httpReplicas(t, a.server(), cfg, "tok-ana")
	a.lose(5)
	var wg sync.WaitGroup
	envs := make([]envelope.Envelope, 8)
	for i := range envs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, envs[i] = call(t, cs[i%2], "book", lunchFlight, nil)
		}()
	}
	wg.Wait()
	for i, env := range envs {
		t.Logf("call %d: %s %v", i, env.Status, env.Error)
	}
	_, reworded := call(t, cs[1], "book", map[string]any{"flight": "TP1234", "passenger": "Ana Lima, aisle"}, nil)
	t.Logf("reworded: %s", reworded)
	if n := a.count(); n != 1 && !(n == 2 && reworded.Status == envelope.Success) {
		t.Errorf("%d bookings, reworded %s", n, reworded.Status)
	}
}

// honest is a server whose first book request fails before booking (it
// answers an error: unknown to the guard), and whose slow lookup answers
// truthfully.
type honest struct {
	mu       sync.Mutex
	bookings []string
	failNext int
	calls    int
}

func (h *honest) count() int { h.mu.Lock(); defer h.mu.Unlock(); return len(h.bookings) }

func (h *honest) server(checkDelay time.Duration) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "lagging", Version: "1"}, nil)
	type in struct {
		Flight    string `json:"flight"`
		Passenger string `json:"passenger"`
		Reference string `json:"client_reference,omitempty"`
	}
	mcp.AddTool(s, &mcp.Tool{Name: "book", Description: "Book."},
		func(ctx context.Context, _ *mcp.CallToolRequest, in in) (*mcp.CallToolResult, map[string]string, error) {
			h.mu.Lock()
			defer h.mu.Unlock()
			h.calls++
			if h.failNext > 0 {
				h.failNext--
				return nil, nil, errReplyLost // nothing booked
			}
			h.bookings = append(h.bookings, in.Reference)
			return nil, map[string]string{"id": fmt.Sprint(len(h.bookings))}, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "lookup", Description: "Look up."},
		func(ctx context.Context, _ *mcp.CallToolRequest, in struct {
			Reference string `json:"client_reference"`
		}) (*mcp.CallToolResult, map[string]any, error) {
			time.Sleep(checkDelay)
			h.mu.Lock()
			defer h.mu.Unlock()
			for _, r := range h.bookings {
				if r == in.Reference {
					return nil, map[string]any{"found": true}, nil
				}
			}
			return nil, map[string]any{"found": false}, nil
		})
	return s
}

// The first attempt truly did nothing; once the window passed, the model
// retries on both replicas at once (and twice on each): each replica's
// slow check answers not applied; only one more attempt may go.
func TestGuard_ParallelRetriesOnBothReplicasAfterNotAppliedSendOnce(t *testing.T) {
	for _, delay := range []time.Duration{0, 300 * time.Millisecond, 1500 * time.Millisecond} {
		h := &honest{failNext: 1}
		_, cs := guardsOnOnePostgreSQL(t, h.server(delay), laggingConfig, 2)
		_, env := call(t, cs[0], "book", lunchFlight, nil)
		t.Logf("first: %s", env.Status)
		time.Sleep(1500 * time.Millisecond)
		var wg sync.WaitGroup
		envs := make([]envelope.Envelope, 4)
		for i := range envs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, envs[i] = call(t, cs[i%2], "book", lunchFlight, nil)
			}()
		}
		wg.Wait()
		for i, e := range envs {
			t.Logf("delay %v retry %d: %s %v", delay, i, e.Status, e.Error)
		}
		if n := h.count(); n != 1 {
			t.Errorf("delay %v: %d bookings, want 1", delay, n)
		}
	}
}

// One action, one key: after an unknown outcome, the model repeats the
// call in another case and spacing (one action: the same key, another
// fingerprint). The answer is definite_failure key_reused (I5), of this
// call: it must say the action itself may have happened.
func TestGuard_ARecasedRepeatOfAnUnknownActionIsNotDefiniteFailure(t *testing.T) {
	for _, class := range []string{`{"class": "at_most_once"}`, `{"class": "keyed", "key_argument": "idempotency_key"}`} {
		a := &airline{}
		_, cs := guardsOnOnePostgreSQL(t, a.server(), configWith(class, ""), 2)
		a.lose(3)
		_, env := call(t, cs[0], "book", lunchFlight, nil)
		t.Logf("%s first: %s", class, env.Status)
		_, recased := call(t, cs[1], "book", map[string]any{"flight": "tp1234", "passenger": "ANA  LIMA"}, nil)
		t.Logf("%s recased on B: %s", class, recased)
		// Designed (I5): the refusal is of this call; Earlier must say the
		// action itself may have happened.
		if a.count() > 0 && recased.Status == envelope.DefiniteFailure &&
			(recased.Earlier == nil || recased.Earlier.State != envelope.ActionUnknown || recased.Next != envelope.AskHuman) {
			t.Errorf("%s: definite_failure for a repeat of an action that was applied, without saying so (%d bookings): %s", class, a.count(), recased)
		}
	}
}

// snapshot is a server whose book answers an error at once while its
// commit goes on and lands within the attempt timeout (900ms of 1s), and
// whose lookup reads its bookings when asked and answers slowly (2.5s: a
// queue, a busy replica). Its answer is true of when it read.
type snapshot struct {
	mu       sync.Mutex
	bookings []string
	first    bool
}

func (s *snapshot) count() int { s.mu.Lock(); defer s.mu.Unlock(); return len(s.bookings) }

func (s *snapshot) server() *mcp.Server {
	srv := mcp.NewServer(&mcp.Implementation{Name: "lagging", Version: "1"}, nil)
	type in struct {
		Flight    string `json:"flight"`
		Passenger string `json:"passenger"`
		Reference string `json:"client_reference,omitempty"`
	}
	mcp.AddTool(srv, &mcp.Tool{Name: "book", Description: "Book."},
		func(ctx context.Context, _ *mcp.CallToolRequest, in in) (*mcp.CallToolResult, map[string]string, error) {
			s.mu.Lock()
			defer s.mu.Unlock()
			if !s.first {
				s.first = true
				go func() { // the commit goes on, and lands within the attempt timeout
					time.Sleep(900 * time.Millisecond)
					s.mu.Lock()
					s.bookings = append(s.bookings, in.Reference)
					s.mu.Unlock()
				}()
				return nil, nil, errReplyLost
			}
			s.bookings = append(s.bookings, in.Reference)
			return nil, map[string]string{"id": fmt.Sprint(len(s.bookings))}, nil
		})
	mcp.AddTool(srv, &mcp.Tool{Name: "lookup", Description: "Look up."},
		func(ctx context.Context, _ *mcp.CallToolRequest, in struct {
			Reference string `json:"client_reference"`
		}) (*mcp.CallToolResult, map[string]any, error) {
			s.mu.Lock()
			found := false
			for _, r := range s.bookings {
				found = found || r == in.Reference
			}
			s.mu.Unlock()
			time.Sleep(2500 * time.Millisecond)
			return nil, map[string]any{"found": found}, nil
		})
	return srv
}

// A check that was asked while the first attempt could still land, and
// answers after that time, says nothing of what landed in between: its
// "not found" must not let a second attempt go.
func TestGuard_ALateCheckAnswerAskedWhileTheAttemptMayStillLandProvesNothing(t *testing.T) {
	const cfg = `{"principal": "ana@example.com", "mcpServers": {"lagging": {"command": "x", "tools": {
  "book": {"class": "reconcilable", "ref_argument": "client_reference", "attempt_timeout": "1s", "listen_late": "0s",
    "check": {"tool": "lookup", "arguments": {"client_reference": "${ref}"},
      "applied": {"pointer": "/found", "equals": true}, "not_applied": {"pointer": "/found", "equals": false}}},
  "lookup": {"class": "read_only"}}}}}`
	s := &snapshot{}
	_, cs := guardsOnOnePostgreSQL(t, s.server(), cfg, 2)
	_, env := call(t, cs[0], "book", lunchFlight, nil)
	t.Logf("first call on A: %s", env)
	_, again := call(t, cs[1], "book", lunchFlight, nil)
	t.Logf("retry on B: %s", again)
	time.Sleep(time.Second)
	if n := s.count(); n != 1 {
		t.Errorf("%d bookings for one action, want 1", n)
	}
}
