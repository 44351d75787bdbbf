package mcpguard_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/mcpguard"
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
