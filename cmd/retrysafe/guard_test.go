package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/retrysafe/retrysafe/agenttool/mcptool"
	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/internal/pgtest"
)

// stdioAirline runs this test binary as a plain MCP server over stdio,
// written with the Go SDK as a third party would: book takes an
// idempotency_key and honours it, book_once takes none. Every booking is
// a line in $AIRLINE_LOG, so a test counts them across processes; with
// $AIRLINE_DIE (a file) present, the process removes it and dies right
// after its next booking, before it answers — a server killed mid-call.
func stdioAirline() {
	logPath, die := os.Getenv("AIRLINE_LOG"), os.Getenv("AIRLINE_DIE")
	var mu sync.Mutex
	type in struct {
		Flight    string `json:"flight"`
		Passenger string `json:"passenger"`
		Key       string `json:"idempotency_key,omitempty"`
	}
	type out struct {
		ID string `json:"id"`
	}
	book := func(_ context.Context, _ *mcp.CallToolRequest, a in) (*mcp.CallToolResult, out, error) {
		mu.Lock()
		defer mu.Unlock()
		lines := readLines(logPath)
		if a.Key != "" {
			for i, l := range lines {
				if strings.HasPrefix(l, a.Key+" ") {
					return nil, out{ID: fmt.Sprintf("BK-%d", i+1)}, nil
				}
			}
		}
		f, err := os.OpenFile(logPath, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
		if err != nil {
			return nil, out{}, err
		}
		key := a.Key
		if key == "" {
			key = "-"
		}
		fmt.Fprintf(f, "%s %s %s\n", key, a.Flight, a.Passenger)
		f.Close()
		if die != "" {
			if _, err := os.Stat(die); err == nil {
				os.Remove(die)
				os.Exit(3) // killed after the booking, before the answer
			}
		}
		return nil, out{ID: fmt.Sprintf("BK-%d", len(lines)+1)}, nil
	}
	s := mcp.NewServer(&mcp.Implementation{Name: "airline", Version: "1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "book", Description: "Book one seat."}, book)
	mcp.AddTool(s, &mcp.Tool{Name: "book_once", Description: "Book one seat (no key)."},
		func(ctx context.Context, r *mcp.CallToolRequest, a struct {
			Flight    string `json:"flight"`
			Passenger string `json:"passenger"`
		}) (*mcp.CallToolResult, out, error) {
			return book(ctx, r, in{Flight: a.Flight, Passenger: a.Passenger})
		})
	if err := s.Run(context.Background(), &mcp.StdioTransport{}); err != nil {
		os.Exit(1)
	}
	os.Exit(0)
}

func readLines(path string) []string {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	return lines
}

// guardFiles writes a guard configuration in front of the stdio airline.
func guardFiles(t *testing.T, extra string) (dir, config, log, die string) {
	t.Helper()
	dir = t.TempDir()
	log, die = filepath.Join(dir, "bookings.log"), filepath.Join(dir, "die")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cfg := map[string]any{
		"principal": "ana@example.com",
		"store":     map[string]any{"path": filepath.Join(dir, "guard.db")},
		"mcpServers": map[string]any{"airline": map[string]any{
			"command": exe,
			"env":     map[string]string{"RETRYSAFE_TEST_AS_AIRLINE": "1", "AIRLINE_LOG": log, "AIRLINE_DIE": die},
			"tools": map[string]any{
				"book":      map[string]any{"class": "keyed", "key_argument": "idempotency_key"},
				"book_once": map[string]any{"class": "at_most_once"},
			},
		}},
	}
	if extra != "" {
		cfg["tokens"] = map[string]string{"ana@example.com": "${GUARD_TEST_TOKEN}"}
	}
	b, _ := json.Marshal(cfg)
	config = filepath.Join(dir, "guard.json")
	if err := os.WriteFile(config, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return dir, config, log, die
}

// guardCommand is the retrysafe guard command as a process of its own.
func guardCommand(t *testing.T, args ...string) *exec.Cmd {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, append([]string{"guard"}, args...)...)
	cmd.Env = append(os.Environ(), "RETRYSAFE_TEST_AS_COMMAND=1")
	return cmd
}

func envelopeOf(t *testing.T, res *mcp.CallToolResult) envelope.Envelope {
	t.Helper()
	var env envelope.Envelope
	b, _ := json.Marshal(res.Meta[mcptool.MetaEnvelope])
	if err := json.Unmarshal(b, &env); err != nil {
		t.Fatalf("no envelope in _meta: %v: %s", err, b)
	}
	return env
}

// A desktop client launches `retrysafe guard` in place of the server, over
// stdio; the guard launches the server. The server is killed mid-call,
// right after it booked: the keyed booking is resent by the guard with its
// key to a new server process, which answers the first booking; the
// at-most-once one answers unknown_outcome and is not sent again. One
// booking each.
func TestGuardCommand_StdioServerKilledMidCallBooksOnce(t *testing.T) {
	_, config, log, die := guardFiles(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "desktop", Version: "1"}, nil).
		Connect(ctx, &mcp.CommandTransport{Command: guardCommand(t, "-config", config)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	callTool := func(name string, args map[string]any) envelope.Envelope {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return envelopeOf(t, res)
	}

	os.WriteFile(die, nil, 0o600)
	env := callTool("book", map[string]any{"flight": "TP1234", "passenger": "Ana Lima"})
	t.Logf("keyed, server killed after booking: %s", env)
	if env.Status != envelope.Success {
		t.Errorf("the keyed booking: %s; want success (resent with its key to the restarted server)", env)
	}
	if n := len(readLines(log)); n != 1 {
		t.Fatalf("%d bookings after the keyed call, want 1: %q", n, readLines(log))
	}

	os.WriteFile(die, nil, 0o600)
	env = callTool("book_once", map[string]any{"flight": "TP9", "passenger": "Bob"})
	t.Logf("at most once, server killed after booking: %s", env)
	if env.Status != envelope.UnknownOutcome {
		t.Errorf("the at-most-once booking: %s; want unknown_outcome", env)
	}
	again := callTool("book_once", map[string]any{"flight": "TP9", "passenger": "Bob"})
	reworded := callTool("book_once", map[string]any{"flight": "TP9", "passenger": "Bob Stone"})
	t.Logf("retry: %s\nreworded: %s", again, reworded)
	if again.Status == envelope.Success || reworded.Status == envelope.Success {
		t.Error("a retry or a reworded copy after an unknown outcome answered success")
	}
	if n := len(readLines(log)); n != 2 {
		t.Errorf("%d bookings in all, want 2: %q", n, readLines(log))
	}
}

// Over HTTP (-listen), the guard takes only the configuration's bearer
// tokens, each the principal it stands for; a guard without tokens does
// not start.
func TestGuardCommand_HTTPNeedsATokenOfTheConfiguration(t *testing.T) {
	_, config, log, _ := guardFiles(t, "tokens")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()

	noTokens := guardCommand(t, "-config", config, "-listen", addr)
	out, err := noTokens.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "tokens.ana@example.com") {
		t.Errorf("a guard whose token variable is unset started, or said: %v %s", err, out)
	}

	cmd := guardCommand(t, "-config", config, "-listen", addr)
	cmd.Env = append(cmd.Env, "GUARD_TEST_TOKEN=s3cret")
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Signal(os.Interrupt); cmd.Wait() }()
	url := "http://" + addr
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized {
				t.Errorf("a request without a token: %s", resp.Status)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the guard did not listen")
		}
		time.Sleep(50 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	hc := &http.Client{Transport: bearer{"s3cret"}}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, nil).
		Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: hc}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "book", Arguments: map[string]any{"flight": "TP1", "passenger": "Ana"}})
	if err != nil {
		t.Fatal(err)
	}
	if env := envelopeOf(t, res); env.Status != envelope.Success {
		t.Errorf("a booking with the token: %s", env)
	}
	if n := len(readLines(log)); n != 1 {
		t.Errorf("%d bookings, want 1", n)
	}
	// DNS rebinding: a page elsewhere that resolves its own name to
	// loopback reaches the guard with its own Host, and is refused.
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
	req.Host = "evil.example"
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if resp, err := (&http.Client{Transport: bearer{"s3cret"}}).Do(req); err != nil || resp.StatusCode != http.StatusForbidden {
		status := ""
		if resp != nil {
			status = resp.Status
			resp.Body.Close()
		}
		t.Errorf("a request with a foreign Host header: %s, %v; want 403", status, err)
	} else {
		resp.Body.Close()
	}
	bad := &http.Client{Transport: bearer{"guess"}}
	if _, err := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, nil).
		Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: bad}, nil); err == nil {
		t.Error("a client with a wrong token connected")
	}
}

type bearer struct{ token string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// With OpenTelemetry's own variables set, the guard sends a span per
// guarded call to the collector they name (OTLP over HTTP), flushed when
// it stops; none carries the call's input.
func TestGuardCommand_SendsSpansWhereOpenTelemetrySays(t *testing.T) {
	var (
		mu     sync.Mutex
		bodies [][]byte
	)
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if r.URL.Path == "/v1/traces" {
			mu.Lock()
			bodies = append(bodies, b)
			mu.Unlock()
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer collector.Close()
	_, config, _, _ := guardFiles(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := guardCommand(t, "-config", config)
	cmd.Env = append(cmd.Env, "OTEL_EXPORTER_OTLP_ENDPOINT="+collector.URL, "OTEL_SERVICE_NAME=guard-under-test")
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "desktop", Version: "1"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "book", Arguments: map[string]any{"flight": "TP1234", "passenger": "Ana Lima"}})
	if err != nil {
		t.Fatal(err)
	}
	if env := envelopeOf(t, res); env.Status != envelope.Success {
		t.Fatalf("the booking: %s", env)
	}
	cs.Close() // the guard stops, and flushes its spans
	cmd.Wait()
	mu.Lock()
	all := bytes.Join(bodies, nil)
	mu.Unlock()
	for _, want := range []string{"execute_tool", "book", "guard-under-test"} {
		if !bytes.Contains(all, []byte(want)) {
			t.Errorf("the collector got no %q in %d exports", want, len(bodies))
		}
	}
	if bytes.Contains(all, []byte("Ana Lima")) {
		t.Error("a span carries the call's input")
	}
}

// Two `retrysafe guard` processes over stdio share one PostgreSQL store,
// each with its own airline process (one bookings log). On guard A the
// server dies after an at-most-once booking (unknown); guard A is then
// killed (SIGKILL). On guard B the model repeats the call, rewords it,
// and books keyed with its server dying mid-call. No second booking of
// the unknown action; no success without a booking.
func TestGuardCommand_TwoStdioGuardsOnPostgreSQLAKilledGuardsUnknownHolds(t *testing.T) {
	pg := pgtest.StartServer(t)
	_, config, logPath, die := guardFiles(t, "")
	var cfg map[string]any
	b, _ := os.ReadFile(config)
	json.Unmarshal(b, &cfg)
	cfg["store"] = map[string]any{"postgres": pg.URL()}
	b, _ = json.Marshal(cfg)
	os.WriteFile(config, b, 0o600)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := func() (*mcp.ClientSession, func()) {
		cmd := guardCommand(t, "-config", config)
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "desktop", Version: "1"}, nil).
			Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return cs, func() { cmd.Process.Kill() }
	}
	callTool := func(cs *mcp.ClientSession, name string, args map[string]any) envelope.Envelope {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return envelopeOf(t, res)
	}
	csA, killA := start()
	csB, killB := start()
	defer killB()
	defer csB.Close()

	os.WriteFile(die, nil, 0o600)
	env := callTool(csA, "book_once", map[string]any{"flight": "TP9", "passenger": "Bob"})
	t.Logf("A, server killed after booking: %s", env)
	killA()
	csA.Close()
	again := callTool(csB, "book_once", map[string]any{"flight": "TP9", "passenger": "Bob"})
	reworded := callTool(csB, "book_once", map[string]any{"flight": "TP9", "passenger": "Bob Stone"})
	t.Logf("B retry: %s\nB reworded: %s", again, reworded)
	if again.Status == envelope.Success || reworded.Status == envelope.Success {
		t.Error("a retry or reworded copy after an unknown outcome answered success")
	}
	if n := len(readLines(logPath)); n != 1 {
		t.Errorf("%d bookings after the at-most-once calls, want 1: %q", n, readLines(logPath))
	}
	os.WriteFile(die, nil, 0o600)
	k := callTool(csB, "book", map[string]any{"flight": "TP1", "passenger": "Ana"})
	k2 := callTool(csB, "book", map[string]any{"flight": "TP1", "passenger": "Ana"})
	t.Logf("B keyed: %s\nB keyed again: %s", k, k2)
	if n := len(readLines(logPath)); n != 2 {
		t.Errorf("%d bookings in all, want 2: %q", n, readLines(logPath))
	}
}
