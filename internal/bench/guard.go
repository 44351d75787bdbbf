package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	bolt "go.etcd.io/bbolt"

	"github.com/retrysafe/retrysafe/agenttool/mcpguard"
)

// The guard's cost: a guarded call through `retrysafe guard` against the
// same call straight to the server, over stdio and streamable HTTP, one
// caller; and 64 HTTP clients, each in a session and a conversation of
// its own, through the guard (bbolt, group commit; a process of its own,
// as retrysafe guard -listen runs) against straight to the server.

// benchServerEnv makes this program an MCP server over stdio (the
// upstream), or the guard over stdio in front of one (its value is the
// configuration's path).
const (
	benchServerEnv = "RETRYSAFE_BENCH_SERVER"
	benchGuardEnv  = "RETRYSAFE_BENCH_GUARD"
	// benchGuardHTTPEnv makes the process a guard on streamable HTTP, on
	// a free port of 127.0.0.1 it prints as its first line.
	benchGuardHTTPEnv = "RETRYSAFE_BENCH_GUARD_HTTP"
)

// benchServer is the upstream: book takes an idempotency key and does
// nothing else, so that what is measured is the protocol and the guard.
func benchServer() *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "bench", Version: "1"}, nil)
	var n atomic.Int64
	mcp.AddTool(s, &mcp.Tool{Name: "book", Description: "Book."}, func(_ context.Context, _ *mcp.CallToolRequest, in struct {
		Seat string `json:"seat"`
		Key  string `json:"idempotency_key,omitempty"`
	}) (*mcp.CallToolResult, map[string]int64, error) {
		return nil, map[string]int64{"booking": n.Add(1)}, nil
	})
	return s
}

// asBenchProcess runs this program as the stdio server or the stdio
// guard, if the environment asks; it reports whether it did.
func asBenchProcess() bool {
	switch {
	case os.Getenv(benchServerEnv) != "":
		benchServer().Run(context.Background(), &mcp.StdioTransport{})
		return true
	case os.Getenv(benchGuardEnv) != "" || os.Getenv(benchGuardHTTPEnv) != "":
		if os.Getenv("GOGC") == "" {
			debug.SetGCPercent(400) // as retrysafe guard runs
		}
		path := os.Getenv(benchGuardEnv) + os.Getenv(benchGuardHTTPEnv)
		cfg, err := mcpguard.LoadConfig(path)
		if err == nil {
			var g *mcpguard.Guard
			if g, err = mcpguard.New(context.Background(), cfg, &mcpguard.Options{Logger: slog.New(slog.DiscardHandler)}); err == nil {
				if os.Getenv(benchGuardEnv) != "" {
					err = g.Server().Run(context.Background(), &mcp.StdioTransport{})
				} else {
					err = serveHTTPGuard(g)
				}
				g.Close()
			}
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench guard:", err)
			os.Exit(1)
		}
		return true
	}
	return false
}

// serveHTTPGuard serves g on streamable HTTP on a free port of 127.0.0.1,
// whose URL it prints first, until its standard input closes.
func serveHTTPGuard(g *mcpguard.Guard) error {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return g.Server() }, nil)}
	go srv.Serve(l)
	fmt.Printf("http://%s\n", l.Addr())
	io.Copy(io.Discard, os.Stdin)
	return srv.Close()
}

// GuardResult is the -guard run's figures.
type GuardResult struct {
	StdioDirectP50  time.Duration `json:"stdio_direct_p50_ns"`
	StdioGuardedP50 time.Duration `json:"stdio_guarded_p50_ns"`
	HTTPDirectP50   time.Duration `json:"http_direct_p50_ns"`
	HTTPGuardedP50  time.Duration `json:"http_guarded_p50_ns"`
	BoltCommitP50   time.Duration `json:"bolt_commit_p50_ns"` // one bbolt Update on the same disk, for scale
	HTTP64Direct    float64       `json:"http_64_direct_calls_per_s"`
	HTTP64Guarded   float64       `json:"http_64_guarded_calls_per_s"`
}

func runGuard(w io.Writer, asJSON bool, quick bool) error {
	n, calls64 := 2000, 100
	if quick {
		n, calls64 = 200, 10
	}
	dir, err := os.MkdirTemp("", "retrysafe-bench-guard")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	self, err := os.Executable()
	if err != nil {
		return err
	}
	ctx := context.Background()
	var res GuardResult

	// The upstream over HTTP, stateless so that 64 sessions share nothing.
	up := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return benchServer() },
		&mcp.StreamableHTTPOptions{Stateless: true}))
	defer up.Close()
	config := func(name string, server map[string]any) (string, error) {
		server["tools"] = map[string]any{"book": map[string]any{"class": "keyed", "key_argument": "idempotency_key"}}
		// Over HTTP each client is a conversation of its own, as 64 users'
		// chats are: one conversation's writes of a tool run one at a
		// time (the unknown fence), and 64 clients in one would take
		// turns.
		b, err := json.Marshal(map[string]any{"principal": "bench", "store": map[string]any{"path": filepath.Join(dir, name+".db")},
			"conversation": map[string]any{"header": benchConversationHeader}, "mcpServers": map[string]any{"bench": server}})
		if err != nil {
			return "", err
		}
		path := filepath.Join(dir, name+".json")
		return path, os.WriteFile(path, b, 0o600)
	}

	stdioCmd := func(env string) *exec.Cmd {
		cmd := exec.Command(self)
		cmd.Env = append(os.Environ(), env)
		cmd.Stderr = os.Stderr
		return cmd
	}
	lone := func(cs *mcp.ClientSession, tag string) (time.Duration, error) {
		d := make([]time.Duration, 0, n)
		for i := range n {
			start := time.Now()
			r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "book", Arguments: map[string]any{"seat": tag + strconv.Itoa(i)}})
			if err != nil {
				return 0, err
			}
			if r.IsError {
				return 0, fmt.Errorf("%s: the call failed: %+v", tag, r.Content)
			}
			d = append(d, time.Since(start))
		}
		return percentile(d, 50), nil
	}
	connect := func(t mcp.Transport) (*mcp.ClientSession, error) {
		return mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil).Connect(ctx, t, nil)
	}

	// stdio: straight to a server process, and through a guard process
	// that starts its own.
	if !asJSON {
		fmt.Fprintln(os.Stderr, "guard: stdio, one caller …")
	}
	cs, err := connect(&mcp.CommandTransport{Command: stdioCmd(benchServerEnv + "=1")})
	if err != nil {
		return err
	}
	res.StdioDirectP50, err = lone(cs, "sd")
	cs.Close()
	if err != nil {
		return err
	}
	path, err := config("stdio", map[string]any{"command": self, "env": map[string]string{benchServerEnv: "1"}})
	if err != nil {
		return err
	}
	cs, err = connect(&mcp.CommandTransport{Command: stdioCmd(benchGuardEnv + "=" + path)})
	if err != nil {
		return err
	}
	res.StdioGuardedP50, err = lone(cs, "sg")
	cs.Close()
	if err != nil {
		return err
	}

	// HTTP: the guard in this process, its front on streamable HTTP.
	if !asJSON {
		fmt.Fprintln(os.Stderr, "guard: streamable HTTP, one caller and 64 …")
	}
	path, err = config("http", map[string]any{"url": up.URL})
	if err != nil {
		return err
	}
	// The guard in a process of its own, as retrysafe guard -listen runs.
	guardProc := stdioCmd(benchGuardHTTPEnv + "=" + path)
	stdin, err := guardProc.StdinPipe()
	if err != nil {
		return err
	}
	stdout, err := guardProc.StdoutPipe()
	if err != nil {
		return err
	}
	if err := guardProc.Start(); err != nil {
		return err
	}
	defer func() { stdin.Close(); guardProc.Wait() }()
	frontURL, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		return fmt.Errorf("the guard process did not start: %w", err)
	}
	front := struct{ URL string }{strings.TrimSpace(frontURL)}
	httpTransport := func(url string, conversation ...string) mcp.Transport {
		t := &mcp.StreamableClientTransport{Endpoint: url, MaxRetries: -1}
		if len(conversation) > 0 {
			t.HTTPClient = &http.Client{Transport: headerTransport{benchConversationHeader, conversation[0]}}
		}
		return t
	}
	if cs, err = connect(httpTransport(up.URL)); err != nil {
		return err
	}
	res.HTTPDirectP50, err = lone(cs, "hd")
	cs.Close()
	if err != nil {
		return err
	}
	if cs, err = connect(httpTransport(front.URL, "lone")); err != nil {
		return err
	}
	res.HTTPGuardedP50, err = lone(cs, "hg")
	cs.Close()
	if err != nil {
		return err
	}
	many := func(url, tag string) (float64, error) {
		sessions := make([]*mcp.ClientSession, 64)
		for i := range sessions {
			if sessions[i], err = connect(httpTransport(url, "client-"+strconv.Itoa(i))); err != nil {
				return 0, err
			}
			defer sessions[i].Close()
		}
		var wg sync.WaitGroup
		var failed atomic.Value
		start := time.Now()
		for i, s := range sessions {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for j := range calls64 {
					r, err := s.CallTool(ctx, &mcp.CallToolParams{Name: "book", Arguments: map[string]any{"seat": fmt.Sprintf("%s%d-%d", tag, i, j)}})
					if err == nil && r.IsError {
						err = fmt.Errorf("the call failed: %+v", r.Content)
					}
					if err != nil {
						failed.Store(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		if err, _ := failed.Load().(error); err != nil {
			return 0, err
		}
		return float64(64*calls64) / time.Since(start).Seconds(), nil
	}
	if res.HTTP64Direct, err = many(up.URL, "md"); err != nil {
		return err
	}
	if res.HTTP64Guarded, err = many(front.URL, "mg"); err != nil {
		return err
	}
	if res.BoltCommitP50, err = boltCommitP50(filepath.Join(dir, "commit.db"), n/4); err != nil {
		return err
	}
	return printGuard(w, asJSON, res)
}

// benchConversationHeader carries each HTTP client's conversation to the
// guard (its config's "conversation").
const benchConversationHeader = "X-Bench-Conversation"

// headerTransport sends every request with one header more.
type headerTransport struct{ name, value string }

func (h headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set(h.name, h.value)
	return http.DefaultTransport.RoundTrip(r)
}

// boltCommitP50 is the median time of one bbolt Update that writes a
// key, on the same disk: a guarded call's own commits cost about two.
func boltCommitP50(path string, n int) (time.Duration, error) {
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		return 0, err
	}
	defer db.Close()
	d := make([]time.Duration, 0, n)
	for i := range n {
		start := time.Now()
		if err := db.Update(func(tx *bolt.Tx) error {
			b, err := tx.CreateBucketIfNotExists([]byte("k"))
			if err != nil {
				return err
			}
			return b.Put([]byte(strconv.Itoa(i)), []byte("v"))
		}); err != nil {
			return 0, err
		}
		d = append(d, time.Since(start))
	}
	return percentile(d, 50), nil
}

func printGuard(w io.Writer, asJSON bool, r GuardResult) error {
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	addedStdio, addedHTTP := r.StdioGuardedP50-r.StdioDirectP50, r.HTTPGuardedP50-r.HTTPDirectP50
	ratio := r.HTTP64Guarded / r.HTTP64Direct
	met := ratio >= 0.8
	figures := []Figure{
		{Name: "guard_stdio_added_p50_ms", What: "stdio, one caller: a keyed call's p50 through the guard minus straight to the server, ms", Value: ms(addedStdio)},
		{Name: "guard_http_added_p50_ms", What: "streamable HTTP, one caller: the same, ms", Value: ms(addedHTTP)},
		{Name: "guard_bolt_commit_p50_ms", What: "one bbolt Update on the same disk, ms (a guarded call commits twice)", Value: ms(r.BoltCommitP50)},
		{Name: "guard_http_64_vs_direct", What: "streamable HTTP, 64 clients each in its own session: calls per second through the guard (bbolt) against straight", Value: ratio, Goal: "≥ 0.8", Met: &met},
	}
	if asJSON {
		b, err := json.Marshal(struct {
			Figures []Figure    `json:"figures"`
			Guard   GuardResult `json:"guard"`
		}{figures, r})
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(w, string(b))
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "retrysafe guard, %s\n\n", goVersion())
	fmt.Fprintf(tw, "one caller, p50 ms\tstraight\tthrough the guard\tadded\n")
	fmt.Fprintf(tw, "stdio\t%.3f\t%.3f\t%.3f\n", ms(r.StdioDirectP50), ms(r.StdioGuardedP50), ms(addedStdio))
	fmt.Fprintf(tw, "streamable HTTP\t%.3f\t%.3f\t%.3f\n", ms(r.HTTPDirectP50), ms(r.HTTPGuardedP50), ms(addedHTTP))
	fmt.Fprintf(tw, "one bbolt Update (the store's own commit, twice a call)\t%.3f\t\t\n\n", ms(r.BoltCommitP50))
	fmt.Fprintf(tw, "64 HTTP clients, calls/s\tstraight\tthrough the guard\tratio\n")
	fmt.Fprintf(tw, "\t%.0f\t%.0f\t%.2f (goal ≥ 0.8)\n", r.HTTP64Direct, r.HTTP64Guarded, ratio)
	return tw.Flush()
}
