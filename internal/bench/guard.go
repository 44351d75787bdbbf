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
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	bolt "go.etcd.io/bbolt"

	"github.com/retrysafe/retrysafe/agenttool/boltstore"
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
	// benchLoadEnv makes the process the 64 clients and the server of
	// the run that gives the guard a core of its own (its value: the
	// directory for the guard's files, and the calls each client makes).
	benchLoadEnv = "RETRYSAFE_BENCH_LOAD"
	// benchProxyEnv makes the process a minimal proxy over stdio in
	// front of a server it starts; benchProxyHTTPEnv one on streamable
	// HTTP in front of the server at its value's URL, on a free port of
	// 127.0.0.1 it prints as its first line (minimalProxy).
	benchProxyEnv     = "RETRYSAFE_BENCH_PROXY"
	benchProxyHTTPEnv = "RETRYSAFE_BENCH_PROXY_HTTP"
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
	// look is book's read-only twin: through the guard, passed through
	// untouched, it costs the second MCP round trip alone.
	mcp.AddTool(s, &mcp.Tool{Name: "look", Description: "Look.", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(_ context.Context, _ *mcp.CallToolRequest, in struct {
			Seat string `json:"seat"`
		}) (*mcp.CallToolResult, map[string]int64, error) {
			return nil, map[string]int64{"bookings": n.Load()}, nil
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
	case os.Getenv(benchLoadEnv) != "":
		if err := runLoad(os.Getenv(benchLoadEnv)); err != nil {
			fmt.Fprintln(os.Stderr, "bench load:", err)
			os.Exit(1)
		}
		return true
	case os.Getenv(benchGuardEnv) != "" || os.Getenv(benchGuardHTTPEnv) != "":
		mcpguard.TuneRuntime() // as retrysafe guard runs
		path := os.Getenv(benchGuardEnv) + os.Getenv(benchGuardHTTPEnv)
		cfg, err := mcpguard.LoadConfig(path)
		if err == nil {
			var g *mcpguard.Guard
			if g, err = mcpguard.New(context.Background(), cfg, &mcpguard.Options{Logger: slog.New(slog.DiscardHandler)}); err == nil {
				addStoreTimeTool(g)
				if os.Getenv(benchGuardEnv) != "" {
					err = g.Server().Run(context.Background(), &mcp.StdioTransport{})
				} else {
					err = serveHTTP(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return g.Server() }, nil))
				}
				g.Close()
			}
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench guard:", err)
			os.Exit(1)
		}
		return true
	case os.Getenv(benchProxyEnv) != "" || os.Getenv(benchProxyHTTPEnv) != "":
		mcpguard.TuneRuntime() // as the guard runs: the same garbage collection
		if err := runProxy(os.Getenv(benchProxyHTTPEnv)); err != nil {
			fmt.Fprintln(os.Stderr, "bench proxy:", err)
			os.Exit(1)
		}
		return true
	}
	return false
}

// minimalProxy is an MCP server that serves every tool of the server
// behind cs, as cs lists them, by calling it there, and does nothing else:
// what any proxy built on the Go SDK costs, the floor the guard's own
// work stands on.
func minimalProxy(ctx context.Context, cs *mcp.ClientSession) (*mcp.Server, error) {
	s := mcp.NewServer(&mcp.Implementation{Name: "bench-proxy", Version: "1"}, nil)
	for t, err := range cs.Tools(ctx, nil) {
		if err != nil {
			return nil, err
		}
		s.AddTool(t, func(ctx context.Context, r *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return cs.CallTool(ctx, &mcp.CallToolParams{Meta: r.Params.Meta, Name: r.Params.Name, Arguments: r.Params.Arguments})
		})
	}
	return s, nil
}

// runProxy runs a minimal proxy: over stdio in front of the bench server
// it starts (url ""), or on streamable HTTP in front of the server at
// url, until its standard input closes.
func runProxy(url string) error {
	ctx := context.Background()
	var t mcp.Transport = benchHTTPTransport(url, "")
	if url == "" {
		self, err := os.Executable()
		if err != nil {
			return err
		}
		t = &mcp.CommandTransport{Command: benchCommand(self, benchServerEnv+"=1")}
	}
	cs, err := benchConnect(ctx, t)
	if err != nil {
		return err
	}
	defer cs.Close()
	s, err := minimalProxy(ctx, cs)
	if err != nil {
		return err
	}
	if url == "" {
		return s.Run(ctx, &mcp.StdioTransport{})
	}
	return serveHTTP(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil))
}

// benchStoreTime is a tool the bench's guard serves beside the server's:
// the time its bbolt store has spent in its commits so far (pages and
// meta written and synced, the tree spilled and rebalanced).
const benchStoreTime = "bench_store_time"

type storeTime struct {
	Nanoseconds int64 `json:"ns"`
}

func addStoreTimeTool(g *mcpguard.Guard) {
	mcp.AddTool(g.Server(), &mcp.Tool{Name: benchStoreTime, Description: "The time the guard's store has spent in its commits."},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, storeTime, error) {
			b, ok := g.Store().(*boltstore.Store)
			if !ok {
				return nil, storeTime{}, fmt.Errorf("the guard's store is %T, want boltstore", g.Store())
			}
			st := b.DB().Stats().TxStats
			return nil, storeTime{int64(st.GetWriteTime() + st.GetSpillTime() + st.GetRebalanceTime())}, nil
		})
}

// storeTimeOf asks the guard behind cs for its store's time so far.
func storeTimeOf(ctx context.Context, cs *mcp.ClientSession) (time.Duration, error) {
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: benchStoreTime})
	if err != nil {
		return 0, err
	}
	var st storeTime
	b, _ := json.Marshal(res.StructuredContent)
	if res.IsError || json.Unmarshal(b, &st) != nil {
		return 0, fmt.Errorf("the guard's store time: %+v", res.Content)
	}
	return time.Duration(st.Nanoseconds), nil
}

// loneResult is one caller's calls straight to the server and through the
// guard, measured in turns.
type loneResult struct {
	Direct, Guarded time.Duration // p50 of the calls
	Store           time.Duration // the guard's commits, a call
	Beyond          time.Duration // through the guard beyond straight and the store's commits: the median of the blocks'
	// Hop is what a read-only call passed through the guard adds to
	// straight: the second MCP round trip alone (the median of the
	// blocks').
	Hop time.Duration
	// Proxy is what the same keyed call through a minimal proxy
	// (minimalProxy) adds to straight: the median of the blocks'.
	Proxy time.Duration
}

// lone makes n calls straight, n through the guard, n read-only ones
// passed through it and n through a minimal proxy, one caller, in blocks
// of loneBlock that take turns (straight first, then last), so that the
// machine's drift hits all alike. Each turn gives what the guard added
// beyond its store's commits — the guarded block's mean less the straight
// one's and the commits' time a call, read from the guard around its
// block — what the second round trip alone adds (the passed-through
// block's mean less the straight one's), and what the minimal proxy adds.
// The medians of those are the figures; the p50s of the calls are beside
// them.
func lone(ctx context.Context, straight, guarded, proxied *mcp.ClientSession, tag string, n int) (loneResult, error) {
	var direct, through, passed, viaProxy, beyond, hop, proxy []time.Duration
	var store time.Duration
	i := 0
	block := func(cs *mcp.ClientSession, tool string, into *[]time.Duration) (time.Duration, error) {
		var sum time.Duration
		for range loneBlock {
			i++
			start := time.Now()
			r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: map[string]any{"seat": tag + strconv.Itoa(i)}})
			if err != nil {
				return 0, err
			}
			if r.IsError {
				return 0, fmt.Errorf("%s: the call failed: %+v", tag, r.Content)
			}
			d := time.Since(start)
			*into = append(*into, d)
			sum += d
		}
		return sum / loneBlock, nil
	}
	for b := 0; b < max(1, n/loneBlock); b++ {
		var ds, dg, dp, dx, before, after time.Duration
		turn := []func() error{
			func() (err error) { ds, err = block(straight, "book", &direct); return err },
			func() (err error) {
				if before, err = storeTimeOf(ctx, guarded); err != nil {
					return err
				}
				if dg, err = block(guarded, "book", &through); err != nil {
					return err
				}
				after, err = storeTimeOf(ctx, guarded)
				return err
			},
			func() (err error) { dp, err = block(guarded, "look", &passed); return err },
			func() (err error) { dx, err = block(proxied, "book", &viaProxy); return err },
		}
		if b%2 == 1 {
			slices.Reverse(turn)
		}
		for _, f := range turn {
			if err := f(); err != nil {
				return loneResult{}, err
			}
		}
		store += after - before
		beyond = append(beyond, dg-ds-(after-before)/loneBlock)
		hop = append(hop, dp-ds)
		proxy = append(proxy, dx-ds)
	}
	return loneResult{Direct: percentile(direct, 50), Guarded: percentile(through, 50),
		Store: store / time.Duration(len(through)), Beyond: percentile(beyond, 50), Hop: percentile(hop, 50), Proxy: percentile(proxy, 50)}, nil
}

const loneBlock = 20

// serveHTTP serves h on a free port of 127.0.0.1, whose URL it prints
// first, until its standard input closes.
func serveHTTP(h http.Handler) error {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h}
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
	// StoreTimePerCall is the time the stdio guard's store spent in its
	// commits, per call: what the goal calls the store's own commit.
	StoreTimePerCall     time.Duration `json:"store_time_per_call_ns"`
	HTTPStoreTimePerCall time.Duration `json:"http_store_time_per_call_ns"`
	// StdioBeyond and HTTPBeyond are what a call through the guard adds
	// beyond the call straight and its store's commits (lone); StdioHop
	// and HTTPHop what a read-only call passed through it adds: the
	// second MCP round trip, of which the guard's own work is the rest.
	StdioBeyond time.Duration `json:"stdio_beyond_store_ns"`
	HTTPBeyond  time.Duration `json:"http_beyond_store_ns"`
	StdioHop    time.Duration `json:"stdio_passthrough_added_ns"`
	HTTPHop     time.Duration `json:"http_passthrough_added_ns"`
	// StdioProxy and HTTPProxy are what the same keyed call through a
	// minimal proxy built on the Go SDK adds (minimalProxy): the floor of
	// any proxy, the guard's own work apart.
	StdioProxy    time.Duration `json:"stdio_sdk_proxy_added_ns"`
	HTTPProxy     time.Duration `json:"http_sdk_proxy_added_ns"`
	HTTP64Direct  float64       `json:"http_64_direct_calls_per_s"`
	HTTP64Guarded float64       `json:"http_64_guarded_calls_per_s"`
	// The same with the guard on a core of its own, the clients and the
	// server on another (Linux, two cores or more, taskset); absent
	// where it could not run, and OwnCoreNot says why.
	OwnCore    *loadResult `json:"own_core,omitempty"`
	OwnCoreNot string      `json:"own_core_not_measured,omitempty"`
}

// loadResult is a 64-client run: calls/s straight to the server and
// through the guard.
type loadResult struct {
	Direct  float64 `json:"direct_calls_per_s"`
	Guarded float64 `json:"guarded_calls_per_s"`
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

	// stdio: straight to a server process, and through a guard process
	// that starts its own, in turns.
	if !asJSON {
		fmt.Fprintln(os.Stderr, "guard: stdio, one caller …")
	}
	straight, err := benchConnect(ctx, &mcp.CommandTransport{Command: benchCommand(self, benchServerEnv+"=1")})
	if err != nil {
		return err
	}
	defer straight.Close()
	path, err := guardConfig(dir, "stdio", map[string]any{"command": self, "env": map[string]string{benchServerEnv: "1"}})
	if err != nil {
		return err
	}
	guarded, err := benchConnect(ctx, &mcp.CommandTransport{Command: benchCommand(self, benchGuardEnv+"="+path)})
	if err != nil {
		return err
	}
	defer guarded.Close()
	proxied, err := benchConnect(ctx, &mcp.CommandTransport{Command: benchCommand(self, benchProxyEnv+"=1")})
	if err != nil {
		return err
	}
	defer proxied.Close()
	l, err := lone(ctx, straight, guarded, proxied, "s", n)
	if err != nil {
		return err
	}
	res.StdioDirectP50, res.StdioGuardedP50, res.StoreTimePerCall, res.StdioBeyond, res.StdioHop = l.Direct, l.Guarded, l.Store, l.Beyond, l.Hop
	res.StdioProxy = l.Proxy
	straight.Close()
	guarded.Close()
	proxied.Close()

	// HTTP: the server in this process, stateless so that 64 sessions
	// share nothing; the guard in a process of its own, as retrysafe
	// guard -listen runs.
	if !asJSON {
		fmt.Fprintln(os.Stderr, "guard: streamable HTTP, one caller and 64 …")
	}
	up := httptest.NewServer(benchHTTPServer())
	defer up.Close()
	if path, err = guardConfig(dir, "http", map[string]any{"url": up.URL}); err != nil {
		return err
	}
	frontURL, stop, err := startHTTPGuard(benchCommand(self, benchGuardHTTPEnv+"="+path))
	if err != nil {
		return err
	}
	defer stop()
	if straight, err = benchConnect(ctx, benchHTTPTransport(up.URL, "")); err != nil {
		return err
	}
	defer straight.Close()
	if guarded, err = benchConnect(ctx, benchHTTPTransport(frontURL, "lone")); err != nil {
		return err
	}
	defer guarded.Close()
	proxyURL, stopProxy, err := startHTTPGuard(benchCommand(self, benchProxyHTTPEnv+"="+up.URL))
	if err != nil {
		return err
	}
	defer stopProxy()
	if proxied, err = benchConnect(ctx, benchHTTPTransport(proxyURL, "")); err != nil {
		return err
	}
	defer proxied.Close()
	if l, err = lone(ctx, straight, guarded, proxied, "h", n); err != nil {
		return err
	}
	res.HTTPDirectP50, res.HTTPGuardedP50, res.HTTPStoreTimePerCall, res.HTTPBeyond, res.HTTPHop = l.Direct, l.Guarded, l.Store, l.Beyond, l.Hop
	res.HTTPProxy = l.Proxy
	straight.Close()
	guarded.Close()
	proxied.Close()
	stopProxy()
	if res.HTTP64Direct, err = manyClients(ctx, up.URL, "md", calls64); err != nil {
		return err
	}
	if res.HTTP64Guarded, err = manyClients(ctx, frontURL, "mg", calls64); err != nil {
		return err
	}
	stop()

	// The same 64 clients with the guard on a core of its own.
	if !asJSON {
		fmt.Fprintln(os.Stderr, "guard: streamable HTTP, 64 clients, the guard on a core of its own …")
	}
	if res.OwnCore, res.OwnCoreNot, err = ownCoreRun(self, dir, calls64); err != nil {
		return err
	}

	if res.BoltCommitP50, err = boltCommitP50(filepath.Join(dir, "commit.db"), n/4); err != nil {
		return err
	}
	return printGuard(w, asJSON, res)
}

// ownCoreRun runs the 64 clients and the server on CPU 0 and the guard on
// CPU 1, with taskset: what the guard takes from a server when it does
// not share the server's cores (a guard on a host of its own, or beside
// the server with a core to spare). It says why not where it cannot run.
func ownCoreRun(self, dir string, calls int) (*loadResult, string, error) {
	if runtime.NumCPU() < 2 {
		return nil, "one CPU", nil
	}
	taskset, err := exec.LookPath("taskset")
	if err != nil {
		return nil, "no taskset (util-linux)", nil
	}
	cmd := exec.Command(taskset, "-c", "0", self)
	cmd.Env = append(os.Environ(), benchLoadEnv+"="+dir+","+strconv.Itoa(calls))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, "", fmt.Errorf("the run with the guard on a core of its own: %w", err)
	}
	var r loadResult
	if err := json.Unmarshal(out, &r); err != nil {
		return nil, "", fmt.Errorf("the run with the guard on a core of its own printed %q: %w", out, err)
	}
	return &r, "", nil
}

// runLoad is the process of ownCoreRun's clients and server (on CPU 0):
// it starts the guard on CPU 1, and prints the 64 clients' calls/s
// straight to the server and through the guard.
func runLoad(arg string) error {
	dir, n, _ := strings.Cut(arg, ",")
	calls, err := strconv.Atoi(n)
	if err != nil {
		return fmt.Errorf("%s=%q: want DIR,CALLS", benchLoadEnv, arg)
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	up := httptest.NewServer(benchHTTPServer())
	defer up.Close()
	path, err := guardConfig(dir, "own-core", map[string]any{"url": up.URL})
	if err != nil {
		return err
	}
	cmd := exec.Command("taskset", "-c", "1", self)
	cmd.Env = append(slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, benchLoadEnv+"=") }),
		benchGuardHTTPEnv+"="+path)
	cmd.Stderr = os.Stderr
	frontURL, stop, err := startHTTPGuard(cmd)
	if err != nil {
		return err
	}
	defer stop()
	ctx := context.Background()
	var r loadResult
	if r.Direct, err = manyClients(ctx, up.URL, "od", calls); err != nil {
		return err
	}
	if r.Guarded, err = manyClients(ctx, frontURL, "og", calls); err != nil {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(r)
}

// benchHTTPServer is the server on streamable HTTP, stateless so that
// sessions share nothing.
func benchHTTPServer() http.Handler {
	return mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return benchServer() },
		&mcp.StreamableHTTPOptions{Stateless: true})
}

// benchCommand runs this program with one more environment variable.
func benchCommand(self, env string) *exec.Cmd {
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), env)
	cmd.Stderr = os.Stderr
	return cmd
}

func benchConnect(ctx context.Context, t mcp.Transport) (*mcp.ClientSession, error) {
	return mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil).Connect(ctx, t, nil)
}

// guardConfig writes the guard's configuration for server: book is
// keyed, and over HTTP each client is a conversation of its own, as 64
// users' chats are (one conversation's writes of a tool run one at a
// time, the unknown fence; 64 clients in one would take turns).
func guardConfig(dir, name string, server map[string]any) (string, error) {
	server["tools"] = map[string]any{"book": map[string]any{"class": "keyed", "key_argument": "idempotency_key"}, "look": map[string]any{"class": "read_only"}}
	b, err := json.Marshal(map[string]any{"principal": "bench", "store": map[string]any{"path": filepath.Join(dir, name+".db")},
		"conversation": map[string]any{"header": benchConversationHeader}, "mcpServers": map[string]any{"bench": server}})
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, name+".json")
	return path, os.WriteFile(path, b, 0o600)
}

// startHTTPGuard starts cmd, a guard on streamable HTTP, and returns its
// URL; stop ends it (it may be called more than once).
func startHTTPGuard(cmd *exec.Cmd) (url string, stop func(), err error) {
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return "", nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return "", nil, err
	}
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	var once sync.Once
	stop = func() { once.Do(func() { stdin.Close(); cmd.Wait() }) }
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		stop()
		return "", nil, fmt.Errorf("the guard process did not start: %w", err)
	}
	return strings.TrimSpace(line), stop, nil
}

// benchHTTPTransport is one client's transport to url, in conversation
// (none: the guard's default), on connections of its own, as a user's
// client is: net/http's shared pool keeps two a host, and 64 clients
// sharing it would dial for most calls.
func benchHTTPTransport(url, conversation string) mcp.Transport {
	var rt http.RoundTripper = http.DefaultTransport.(*http.Transport).Clone()
	if conversation != "" {
		rt = headerTransport{benchConversationHeader, conversation, rt}
	}
	return &mcp.StreamableClientTransport{Endpoint: url, MaxRetries: -1, HTTPClient: &http.Client{Transport: rt}}
}

// manyClients runs 64 clients, each in a session and a conversation of
// its own, each making calls calls to url, and returns the calls/s.
func manyClients(ctx context.Context, url, tag string, calls int) (float64, error) {
	sessions := make([]*mcp.ClientSession, 64)
	for i := range sessions {
		var err error
		if sessions[i], err = benchConnect(ctx, benchHTTPTransport(url, "client-"+strconv.Itoa(i))); err != nil {
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
			for j := range calls {
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
	return float64(64*calls) / time.Since(start).Seconds(), nil
}

// benchConversationHeader carries each HTTP client's conversation to the
// guard (its config's "conversation").
const benchConversationHeader = "X-Bench-Conversation"

// headerTransport sends every request with one header more.
type headerTransport struct {
	name, value string
	base        http.RoundTripper
}

func (h headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set(h.name, h.value)
	return h.base.RoundTrip(r)
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
	shared := r.HTTP64Guarded / r.HTTP64Direct
	beyondStdio, beyondHTTP := ms(r.StdioBeyond), ms(r.HTTPBeyond)
	metStdio, metHTTP := beyondStdio <= 0.5, beyondHTTP <= 0.5
	figures := []Figure{
		{Name: "guard_stdio_added_p50_ms", What: "stdio, one caller: a keyed call's p50 through the guard minus straight to the server, ms", Value: ms(addedStdio)},
		{Name: "guard_http_added_p50_ms", What: "streamable HTTP, one caller: the same, ms", Value: ms(addedHTTP)},
		{Name: "guard_store_time_per_call_ms", What: "the guard's store, stdio, one caller: the time its commits took a call (bbolt writing and syncing pages and meta, spilling and rebalancing), ms", Value: ms(r.StoreTimePerCall)},
		{Name: "guard_http_store_time_per_call_ms", What: "the guard's store, streamable HTTP, one caller: the same, ms", Value: ms(r.HTTPStoreTimePerCall)},
		{Name: "guard_stdio_added_beyond_store_ms", What: "stdio, one caller: the time a call through the guard adds beyond the call straight and the store's own commits, the median of blocks of 20 calls taking turns with 20 straight, ms", Value: beyondStdio, Goal: "≤ 0.5", Met: &metStdio},
		{Name: "guard_http_added_beyond_store_ms", What: "streamable HTTP, one caller: the same, ms", Value: beyondHTTP, Goal: "≤ 0.5", Met: &metHTTP},
		{Name: "guard_stdio_passthrough_added_ms", What: "stdio, one caller: what a read-only call passed through the guard adds to straight (the second MCP round trip alone), the median of blocks, ms", Value: ms(r.StdioHop)},
		{Name: "guard_http_passthrough_added_ms", What: "streamable HTTP, one caller: the same, ms", Value: ms(r.HTTPHop)},
		{Name: "guard_stdio_sdk_proxy_added_ms", What: "stdio, one caller: what the keyed call through a minimal proxy built on the Go SDK (a server whose tools call the server's) adds to straight, the median of blocks, ms", Value: ms(r.StdioProxy)},
		{Name: "guard_http_sdk_proxy_added_ms", What: "streamable HTTP, one caller: the same, ms", Value: ms(r.HTTPProxy)},
		{Name: "guard_bolt_commit_p50_ms", What: "one bare bbolt Update on the same disk, ms, for scale (a guarded call commits twice)", Value: ms(r.BoltCommitP50)},
		{Name: "guard_http_64_vs_direct_shared_cores", What: "streamable HTTP, 64 clients each in its own session, the clients, the server and the guard on the same cores: calls per second through the guard (bbolt) against straight", Value: shared},
	}
	var ownCore float64
	if r.OwnCore != nil {
		ownCore = r.OwnCore.Guarded / r.OwnCore.Direct
		met := ownCore >= 0.8
		figures = append(figures, Figure{Name: "guard_http_64_vs_direct", What: "the same with the guard on a core of its own, the clients and the server on another: what the guard takes from the server's calls per second", Value: ownCore, Goal: "≥ 0.8", Met: &met})
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
	fmt.Fprintf(tw, "one caller, ms\tstraight, p50\tthrough the guard, p50\tadded\tthe store's commits\tbeyond them (blocks' median)\tof which the second round trip\ta minimal SDK proxy adds\n")
	fmt.Fprintf(tw, "stdio\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f (goal ≤ 0.5)\t%.3f\t%.3f\n", ms(r.StdioDirectP50), ms(r.StdioGuardedP50), ms(addedStdio), ms(r.StoreTimePerCall), beyondStdio, ms(r.StdioHop), ms(r.StdioProxy))
	fmt.Fprintf(tw, "streamable HTTP\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f (goal ≤ 0.5)\t%.3f\t%.3f\n", ms(r.HTTPDirectP50), ms(r.HTTPGuardedP50), ms(addedHTTP), ms(r.HTTPStoreTimePerCall), beyondHTTP, ms(r.HTTPHop), ms(r.HTTPProxy))
	fmt.Fprintf(tw, "one bare bbolt Update, for scale\t%.3f\t\t\t\n\n", ms(r.BoltCommitP50))
	fmt.Fprintf(tw, "64 HTTP clients, calls/s\tstraight\tthrough the guard\tratio\n")
	fmt.Fprintf(tw, "clients, server and guard on the same cores\t%.0f\t%.0f\t%.2f\n", r.HTTP64Direct, r.HTTP64Guarded, shared)
	if r.OwnCore != nil {
		fmt.Fprintf(tw, "the guard on a core of its own\t%.0f\t%.0f\t%.2f (goal ≥ 0.8)\n", r.OwnCore.Direct, r.OwnCore.Guarded, ownCore)
	} else {
		fmt.Fprintf(tw, "the guard on a core of its own\tnot measured: %s\t\t\n", r.OwnCoreNot)
	}
	return tw.Flush()
}
