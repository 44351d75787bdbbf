package mcpguard

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/boltstore"
	"github.com/retrysafe/retrysafe/agenttool/mcptool"
	"github.com/retrysafe/retrysafe/agenttool/observe"
	"github.com/retrysafe/retrysafe/agenttool/pgstore"
	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/reconcile"
)

// Options tune a guard beyond its configuration: for a program that
// embeds one, and for tests. The zero value is what `retrysafe guard`
// uses.
type Options struct {
	// Store, if set, keeps keys and outcomes in place of Config.Store's;
	// Close leaves it open.
	Store agenttool.Store
	// Logger receives a line per call and the guard's warnings. nil means
	// standard error, text.
	Logger *slog.Logger
	// Hooks, if set, observe every guarded call besides the log line:
	// agenttool/otelhooks makes them OpenTelemetry spans and metrics.
	Hooks agenttool.Hooks
	// Transport, if set, makes the transport that reaches a server, in
	// place of the one its configuration says (a command over stdio, or
	// streamable HTTP): an in-memory one in tests.
	Transport func(name string, s *Server) (mcp.Transport, error)
	// Principal says who acts in a call. Default: the UserID of the
	// request's verified bearer token, else Config.Principal.
	Principal func(ctx context.Context, c mcptool.Caller) (string, error)
	// Tune, if set, adjusts the options of each guarded tool after the
	// guard made them (Lease, Retry, hooks), by its name as the client
	// sees it.
	Tune func(tool string, o *agenttool.Options)
	// Label, if set, labels each guarded call's action for operators
	// (agenttool.WithLabel: `retrysafe list -label`, the console). Default:
	// the client's name, as it gave it when it connected, and the
	// conversation, if the call carries one.
	Label func(ctx context.Context, req *mcp.CallToolRequest) string
	// Implementation names the guard to its clients. Default:
	// retrysafe-guard.
	Implementation *mcp.Implementation
	// RetryConnect is the longest wait between attempts to reach a server
	// that is down. 0 means 30s.
	RetryConnect time.Duration
}

// Guard stands in front of MCP servers: a client connects to its
// [Guard.Server], which lists the servers' tools and guards each call as
// its configuration says.
type Guard struct {
	cfg   *Config
	opts  Options
	log   *slog.Logger
	store agenttool.Store
	owned io.Closer // the store the guard opened
	front *mcp.Server
	ups   []*upstream

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex
	listed   map[string]string // the name a client sees → its server's name
	internal map[string]string // a guarded tool's name in the store → the name a client sees

	// progress maps the progress tokens the guard sends servers to the
	// client call that asked for progress, while the call runs.
	progress sync.Map // string → progressTo
	tokens   atomic.Uint64

	// clients is who has sent the front requests: its one client's
	// session while there has been one, and many once a second has.
	clients struct {
		sync.Mutex
		one  *mcp.ServerSession
		many bool
	}
}

// progressGrace is how long a call's progress token is kept after the
// call ends, for the notifications its server sent before its answer.
const progressGrace = 5 * time.Second

// progressTo is where a server's progress notifications go: the client's
// session, under the client's own token.
type progressTo struct {
	session *mcp.ServerSession
	token   any
	server  string // the server the call went to: only it may notify
}

// New connects to the configured servers, lists their tools, and builds
// the front server that lists them to clients. A configuration error —
// one Config.Check finds, or a tool the configuration names that its
// server does not list, a check tool that does not read only, a keyed
// tool whose schema lacks its key argument — stops it with the field's
// path and the fix. A server that cannot be reached is tried again in the
// background: the tools its configuration names answer definite_failure
// unavailable until it is up and its tools check out.
func New(ctx context.Context, cfg *Config, opts *Options) (*Guard, error) {
	if cfg == nil {
		return nil, errors.New("mcpguard: New needs a configuration")
	}
	if err := cfg.Check(); err != nil {
		return nil, err
	}
	if opts != nil && opts.Principal != nil {
		for _, name := range slices.Sorted(maps.Keys(cfg.MCPServers)) {
			for _, tn := range slices.Sorted(maps.Keys(cfg.MCPServers[name].Tools)) {
				if t := cfg.MCPServers[name].Tools[tn]; t != nil && t.KeyArgument == MetaKey {
					return nil, &ConfigError{Path: "mcpServers." + name + ".tools." + tn + ".key_argument",
						Problem: "a retrysafe server keys a repeated call by its own caller, the guard, whoever Options.Principal says acts: " +
							"use at_most_once or reconcilable for this tool, or run one guard per user"}
				}
			}
		}
	}
	g := &Guard{cfg: cfg, listed: map[string]string{}, internal: map[string]string{}}
	if opts != nil {
		g.opts = *opts
	}
	g.log = g.opts.Logger
	if g.log == nil {
		g.log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	if g.opts.RetryConnect <= 0 {
		g.opts.RetryConnect = 30 * time.Second
	}
	impl := g.opts.Implementation
	if impl == nil {
		impl = &mcp.Implementation{Name: "retrysafe-guard", Version: "1"}
	}
	if err := g.openStore(ctx); err != nil {
		return nil, err
	}
	g.front = mcp.NewServer(impl, &mcp.ServerOptions{Logger: g.log, Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{ListChanged: true}}})
	g.front.AddReceivingMiddleware(g.receive)
	g.ctx, g.cancel = context.WithCancel(context.WithoutCancel(ctx))
	for _, name := range slices.Sorted(maps.Keys(cfg.MCPServers)) {
		g.ups = append(g.ups, newUpstream(g, name, cfg.MCPServers[name]))
	}
	var errs []error
	for _, u := range g.ups {
		s, err := u.connect(ctx)
		if err != nil {
			g.log.Warn("mcpguard: the server cannot be reached; trying again in the background", "server", u.name, "err", err)
			if err := u.placeholders(); err != nil {
				errs = append(errs, err)
			}
			g.wg.Add(1)
			go u.retry()
			continue
		}
		if err := u.list(ctx, s, true); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		g.Close()
		return nil, err
	}
	return g, nil
}

// Server is the front: the MCP server clients connect to, over any
// transport (mcp.StdioTransport for a desktop client, the SDK's
// streamable HTTP handler behind a token check).
func (g *Guard) Server() *mcp.Server { return g.front }

// Store is the store the guard keeps its keys and outcomes in, for an
// operator's tools.
func (g *Guard) Store() agenttool.Store { return g.store }

// Close stops the guard: its sessions to the servers end (a server it
// started over stdio is stopped), and a store it opened is closed.
func (g *Guard) Close() error {
	if g.cancel != nil {
		g.cancel()
	}
	for _, u := range g.ups {
		u.close()
	}
	g.wg.Wait()
	if g.owned != nil {
		return g.owned.Close()
	}
	return nil
}

// openStore opens the configured store, unless Options gives one.
func (g *Guard) openStore(ctx context.Context) error {
	if g.opts.Store != nil {
		g.store = g.opts.Store
		return nil
	}
	if url := g.cfg.Store.Postgres; url != "" {
		s, err := pgstore.Open(ctx, &pgstore.Options{URL: os.ExpandEnv(url)})
		if err != nil {
			return fmt.Errorf("mcpguard: store.postgres: %w", err)
		}
		g.store, g.owned = s, s
		return nil
	}
	path := g.cfg.Store.Path
	if path == "" {
		path = "retrysafe-guard.db"
	}
	s, err := boltstore.Open(path, nil)
	if err != nil {
		return fmt.Errorf("mcpguard: store.path: %w", err)
	}
	g.store, g.owned = s, s
	return nil
}

// principal is the default Options.Principal.
func (g *Guard) principal(ctx context.Context, c mcptool.Caller) (string, error) {
	if g.opts.Principal != nil {
		return g.opts.Principal(ctx, c)
	}
	if c.Token != nil && c.Token.UserID != "" {
		return c.Token.UserID, nil
	}
	return g.cfg.Principal, nil
}

// conversationKey carries a call's conversation, read by the
// conversation middleware, to the tool's Session function.
type conversationKey struct{}

// unreadableConversation is the conversation of a call that carries one
// the guard cannot read (not a string), as the type it is: such a call's
// scope is unknown, and a guarded call of it runs nothing.
type unreadableConversation string

// receive prepares each tools/call before its handler: a progress token
// of the guard's own for the server (progressTo), the conversation the
// call carries where the configuration says a client puts one, and the
// action's label.
func (g *Guard) receive(next mcp.MethodHandler) mcp.MethodHandler {
	cv := g.cfg.Conversation
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if s, ok := req.GetSession().(*mcp.ServerSession); ok {
			g.heard(s)
		}
		call, ok := req.(*mcp.CallToolRequest)
		if !ok || call.Params == nil {
			return next(ctx, method, req)
		}
		if tok := call.Params.GetProgressToken(); tok != nil && call.Session != nil {
			// The client asked for progress: the server gets a token of
			// the guard's (tokens of several clients may clash), and its
			// notifications go back under the client's.
			var nonce [12]byte
			rand.Read(nonce[:])
			ours := fmt.Sprintf("retrysafe-guard-%d-%s", g.tokens.Add(1), hex.EncodeToString(nonce[:]))
			g.mu.Lock()
			server := g.listed[call.Params.Name]
			g.mu.Unlock()
			g.progress.Store(ours, progressTo{session: call.Session, token: tok, server: server})
			// The server's notifications are handled apart from its answer
			// and may be read after it: the token is kept a little longer.
			defer time.AfterFunc(progressGrace, func() { g.progress.Delete(ours) })
			call.Params.SetProgressToken(ours)
		}
		var id string
		switch {
		case cv == nil:
		case cv.Meta != "":
			v, present := call.Params.Meta[cv.Meta]
			var isString bool
			id, isString = v.(string)
			if present && v != nil && !isString {
				// A conversation the guard cannot read as a string is not
				// the principal's default one: two conversations the
				// client tells apart (numbered 7 and 8) would share its
				// actions. A guarded call of it runs nothing (session).
				ctx = context.WithValue(ctx, conversationKey{}, unreadableConversation(fmt.Sprintf("%T", v)))
			}
		case call.Extra != nil:
			id = call.Extra.Header.Get(cv.Header)
		}
		if id != "" {
			ctx = context.WithValue(ctx, conversationKey{}, id)
		}
		return next(g.labelled(ctx, call, id), method, req)
	}
}

// oneUser reports whether the guard acts for one user only, as its
// configuration says: no bearer tokens or OAuth (which let several users
// in over HTTP), and no Options.Principal (which says who acts call by
// call). Only then may a question a server asks during a call be passed
// on (Guard.ask), and does the guard tell its servers it can be asked.
func (g *Guard) oneUser() bool {
	return len(g.cfg.Tokens) == 0 && g.cfg.OAuth == nil && g.opts.Principal == nil
}

// heard notes that the client of s sent the front a request.
func (g *Guard) heard(s *mcp.ServerSession) {
	g.clients.Lock()
	defer g.clients.Unlock()
	switch {
	case g.clients.many, g.clients.one == s:
	case g.clients.one == nil:
		g.clients.one = s
	default:
		g.clients.one, g.clients.many = nil, true
	}
}

// soleClient returns the session of the front's one client, if it has had
// one only (a desktop client over stdio): nil once a second has sent a
// request.
func (g *Guard) soleClient() *mcp.ServerSession {
	g.clients.Lock()
	defer g.clients.Unlock()
	return g.clients.one
}

// ask passes a server's question, asked during a call (elicitation/create,
// as servers of the revisions before 2026-07-28 ask), to the client whose
// call it is, and returns its answer. The server sees one caller, the
// guard, and its question does not say which call it is for: the guard
// passes it on only while its front has had one client, whose call it
// must be — never to a client that may be another user.
//
// Nor while the guard's own check runs at the server: the question may be
// the check's, and a check answers with what the server knows, never with
// the user's word (a check's question in a multi-round-trip result is not
// passed on either).
//
// A question is passed on only while the guard waits for every call of
// its own that runs on the session it came on, and lives no longer than
// they do (flights.during).
func (g *Guard) ask(ctx context.Context, u *upstream, calls *flights, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
	server := u.name
	if u.checking.Load() > 0 {
		g.log.Warn("mcpguard: a server asked a question while a check of the guard's ran there; it is not passed on, since it may be the check's", "server", server)
		return nil, errors.New("retrysafe guard: the question cannot be passed on: a check of the guard's runs at this server, and the question may be its own; a check is never answered by the user")
	}
	s := g.soleClient()
	if s == nil {
		g.log.Warn("mcpguard: a server asked a question during a call; it cannot be passed on, since the guard serves several clients and cannot tell whose call asked it", "server", server)
		return nil, errors.New("retrysafe guard: the question cannot be passed on: the guard serves several clients, and cannot tell whose call asked it")
	}
	ctx, stop, why := calls.during(ctx)
	if why != nil {
		g.log.Warn("mcpguard: a server asked a question that may be for no call the guard still waits for; it is not passed on", "server", server, "why", why)
		return nil, fmt.Errorf("retrysafe guard: the question cannot be passed on: %w", why)
	}
	defer stop()
	res, err := s.Elicit(ctx, req.Params)
	if why := context.Cause(ctx); errors.Is(why, errCallsEnded) || errors.Is(why, errCallGivenUp) {
		// Withdrawn — even if the client's answer came meanwhile: it
		// must not reach a server the guard no longer listens to.
		g.log.Warn("mcpguard: a question a server asked during a call was withdrawn from the client: a call it may be for ended first", "server", server,
			"why", context.Cause(ctx))
		return nil, fmt.Errorf("retrysafe guard: the question was withdrawn: %w", context.Cause(ctx))
	}
	if err != nil {
		return nil, fmt.Errorf("retrysafe guard: the question could not be passed to the client: %w", err)
	}
	return res, nil
}

// labelled returns ctx with the call's label (Options.Label).
func (g *Guard) labelled(ctx context.Context, call *mcp.CallToolRequest, conversation string) context.Context {
	if g.opts.Label != nil {
		return agenttool.WithLabel(ctx, g.opts.Label(ctx, call))
	}
	var parts []string
	if call.Session != nil {
		if p := call.Session.InitializeParams(); p != nil && p.ClientInfo != nil && p.ClientInfo.Name != "" {
			parts = append(parts, p.ClientInfo.Name)
		}
	}
	if conversation != "" {
		parts = append(parts, "conversation "+conversation)
	}
	if len(parts) == 0 {
		return ctx
	}
	return agenttool.WithLabel(ctx, strings.Join(parts, ", "))
}

// session is the guarded tools' Session function: the conversation the
// call carries, or else one per principal.
func (g *Guard) session(ctx context.Context, c mcptool.Caller) (string, error) {
	switch id := ctx.Value(conversationKey{}).(type) {
	case string:
		if id != "" {
			return "conversation:" + id, nil
		}
	case unreadableConversation:
		return "", fmt.Errorf("the call's conversation (_meta %q) is a %s, not a string; nothing was run", g.cfg.Conversation.Meta, string(id))
	}
	return mcptool.OneSession(ctx, c)
}

// claimName records that the client sees the tool name as the server's,
// and that the store knows it as toolName(name), or returns the error of
// a clash.
func (g *Guard) claimName(name, server string) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if other, ok := g.listed[name]; ok && other != server {
		return &ConfigError{Path: "mcpServers." + server + ".prefix",
			Problem: fmt.Sprintf("its tool %q clashes with one of mcpServers.%s: give one of the two servers a prefix", name, other)}
	}
	in := toolName(name)
	if other, ok := g.internal[in]; ok && other != name {
		// Two names a client tells apart must never share actions.
		return &ConfigError{Path: "mcpServers." + server + ".prefix",
			Problem: fmt.Sprintf("its tool %q would be recorded as %q, as %q is: rename one with a prefix", name, in, other)}
	}
	g.listed[name] = server
	g.internal[in] = name
	return nil
}

// upstream is one server behind the guard, and the guard's session to it.
// It gives the guarded tools their session ([mcptool.Sessions]).
type upstream struct {
	g    *Guard
	name string
	cfg  *Server

	http *http.Transport // for a server on HTTP: one for all its sessions

	// checking counts the guard's own checks running at the server: a
	// question the server asks meanwhile may be a check's, which is never
	// the user's to answer (Guard.ask).
	checking atomic.Int64

	// landing is, for each guarded tool of the server (by its name
	// there), how long after the guard gives up on a call of it the
	// call's request may still land, as the tool's rules count it
	// (flights.ended).
	landing sync.Map // string → landing

	mu      sync.Mutex
	session *mcp.ClientSession
	schemas map[string]string // tool → its input schema as listed, for a re-listing to compare
	// defs is each tool's input and output schemas as first listed, and
	// unfit, for each check tool of the server's reconcilable tools that
	// no longer reads as the configuration wrote the check for it, why:
	// the server changed its schemas since (or lists it no more), or it
	// takes none of an argument the check gives it. Such a check's answer
	// settles nothing (checker.Check): a check that asks where the action
	// is not may find nothing, and read as not applied.
	defs   map[string]string
	unfit  map[string]string
	closed bool
}

func newUpstream(g *Guard, name string, cfg *Server) *upstream {
	u := &upstream{g: g, name: name, cfg: cfg}
	if cfg.URL != "" {
		// The calls of every client share the one session, each a
		// request of its own: keep as many connections open as calls
		// run at once, not net/http's two per host, or each call past
		// the second dials (and, on https, shakes hands) anew.
		u.http = http.DefaultTransport.(*http.Transport).Clone()
		u.http.MaxIdleConnsPerHost = upstreamIdleConns
	}
	return u
}

// transport makes the transport to the server.
func (u *upstream) transport() (mcp.Transport, error) {
	if u.g.opts.Transport != nil {
		return u.g.opts.Transport(u.name, u.cfg)
	}
	if u.cfg.Command != "" {
		cmd := exec.Command(os.ExpandEnv(u.cfg.Command), expandAll(u.cfg.Args)...)
		cmd.Env = os.Environ()
		for _, k := range slices.Sorted(maps.Keys(u.cfg.Env)) {
			cmd.Env = append(cmd.Env, k+"="+os.ExpandEnv(u.cfg.Env[k]))
		}
		cmd.Stderr = os.Stderr
		return &mcp.CommandTransport{Command: cmd}, nil
	}
	hc := &http.Client{Transport: u.http}
	if len(u.cfg.Headers) > 0 {
		h := http.Header{}
		for k, v := range u.cfg.Headers {
			h.Set(k, os.ExpandEnv(v))
		}
		hc.Transport = headerTransport{h: h, base: u.http}
	}
	if u.cfg.Type == "sse" {
		return &mcp.SSEClientTransport{Endpoint: os.ExpandEnv(u.cfg.URL), HTTPClient: hc}, nil
	}
	return &mcp.StreamableClientTransport{Endpoint: os.ExpandEnv(u.cfg.URL), HTTPClient: hc, MaxRetries: -1}, nil
}

// upstreamIdleConns is how many idle connections the guard keeps to an
// HTTP server: enough for the calls of many clients at once.
const upstreamIdleConns = 256

// newStreamableHandler serves the guard's front as streamable HTTP.
func newStreamableHandler(g *Guard) http.Handler {
	return mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return g.Server() }, nil)
}

func expandAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = os.ExpandEnv(s)
	}
	return out
}

// headerTransport adds the configured headers to every request.
type headerTransport struct {
	h    http.Header
	base http.RoundTripper
}

func (t headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range t.h {
		r.Header[k] = v
	}
	return t.base.RoundTrip(r)
}

// connect opens a new session to the server and makes it the current one.
func (u *upstream) connect(ctx context.Context) (*mcp.ClientSession, error) {
	tr, err := u.transport()
	if err != nil {
		return nil, err
	}
	// The calls of this session: a question the server asks on it is for
	// one of them (Guard.ask).
	calls := &flights{u: u}
	opts := &mcp.ClientOptions{
		// A server's request for input (multi-round-trip) comes back as
		// the call's answer, which mcptool reads as nothing done: the
		// SDK's own handling would ask this client, which answers none,
		// and its failure after the server's answer reads as unknown.
		MultiRoundTrip: &mcp.MultiRoundTripOptions{Disabled: true},
		ProgressNotificationHandler: func(ctx context.Context, req *mcp.ProgressNotificationClientRequest) {
			key, _ := req.Params.ProgressToken.(string)
			if v, ok := u.g.progress.Load(key); ok && v.(progressTo).server == u.name {
				to := v.(progressTo)
				p := *req.Params
				p.ProgressToken = to.token
				to.session.NotifyProgress(ctx, &p)
			}
		},
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
			u.g.wg.Add(1)
			go func() {
				defer u.g.wg.Done()
				if s, err := u.Session(u.g.ctx); err == nil {
					if err := u.list(u.g.ctx, s, false); err != nil {
						u.g.log.Error("mcpguard: the server's new tool list was not taken", "server", u.name, "err", err)
					}
				}
			}()
		},
	}
	if u.g.oneUser() {
		// A server of an earlier revision asks during the call: the
		// question goes to the client whose call it is, if the guard can
		// tell (Guard.ask). The handler declares forms only: a URL
		// question's completion would not be followed. A guard of several
		// users could pass no question on: it declares none, and a server
		// that falls back when its client cannot be asked does so.
		opts.ElicitationHandler = func(ctx context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			return u.g.ask(ctx, u, calls, req)
		}
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "retrysafe-guard", Version: "1"}, opts)
	client.AddSendingMiddleware(calls.track)
	// Watched, so that a call refused before it was written is told apart
	// from one the server answered with a "closing" code (WatchesWrites).
	s, err := client.Connect(ctx, mcptool.WatchWrites(tr), nil)
	if err != nil {
		return nil, fmt.Errorf("connecting to mcpServers.%s: %w", u.name, err)
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.closed {
		s.Close()
		return nil, errors.New("the guard is closed")
	}
	if u.session != nil {
		go u.session.Close()
	}
	u.session = s
	return s, nil
}

// Session gives a call the current session, or connects again if there is
// none (the server's process ended, or the server forgot the session).
func (u *upstream) Session(ctx context.Context) (*mcp.ClientSession, error) {
	u.mu.Lock()
	s, closed := u.session, u.closed
	u.mu.Unlock()
	switch {
	case closed:
		return nil, errors.New("the guard is closing")
	case s != nil:
		return s, nil
	}
	s, err := u.connect(ctx)
	if err != nil {
		return nil, err
	}
	if err := u.list(ctx, s, false); err != nil {
		u.g.log.Error("mcpguard: the server's tools changed while it was away", "server", u.name, "err", err)
	}
	return s, nil
}

// flights are the guard's calls in flight on one session to a server
// (tools/call), and the questions the server asked on it that the guard
// passed on. A question says nothing of the call it is for, and the
// server sees one caller: it may be for any call of the guard's that ran
// on the session when it was asked. It lives no longer than the guard
// waits for all of them (the server answered, or the guard gave up: its
// attempt timeout and late window passed, or the client cancelled), nor
// past the guard giving up on any one with effects: an answer the user
// gives after that must not reach a server that may act on it, unheard,
// when a check may read the action as not applied and a retry act again.
type flights struct {
	u *upstream

	mu        sync.Mutex
	live      map[*flight]struct{}
	questions map[*question]struct{}
	// quiet is until when a call the guard gave up on may still land, as
	// its tool's rules count it: a question asked before then may be its.
	quiet time.Time
}

// flight is one call in flight.
type flight struct {
	sent    time.Time
	landing landing
}

// landing is how long a guarded tool's request may land, as its rules
// count it: the attempt ends AttemptTimeout after it was sent at the
// latest, and its request may land until the tool's in-flight time
// (agenttool.Settings.InFlight) has passed after that.
type landing struct {
	effects           bool // an at_most_once or reconcilable tool's: false for a keyed one, a read-only one, a check
	attempt, inFlight time.Duration
}

// question is a question passed on, and the calls it may be for.
type question struct {
	waiting map[*flight]struct{}
	cancel  context.CancelCauseFunc
}

var (
	errNoCall      = errors.New("no call of the guard's runs at this server, and only a question asked during a call is passed on")
	errCallsEnded  = errors.New("every call of the guard's that ran at the server when it was asked has ended")
	errCallGivenUp = errors.New("the guard gave up on a call that ran at the server when it was asked, which it may be for")
	errQuiet       = errors.New("the guard gave up on a call at this server whose request may still land, which it may be for")
)

// track keeps f: each tools/call the guard sends is in flight from before
// it is sent until its answer comes or the guard stops waiting for it.
func (f *flights) track(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if method != "tools/call" {
			return next(ctx, method, req)
		}
		c := &flight{sent: time.Now()}
		if p, ok := req.GetParams().(*mcp.CallToolParams); ok && p != nil {
			if l, ok := f.u.landing.Load(p.Name); ok {
				c.landing = l.(landing)
			}
		}
		f.mu.Lock()
		if f.live == nil {
			f.live = make(map[*flight]struct{})
		}
		f.live[c] = struct{}{}
		f.mu.Unlock()
		res, err := next(ctx, method, req)
		// With no answer (the guard stopped waiting, the session or its
		// stream failed, or an error the guard cannot tell from a
		// proxy's), the server may still run the call.
		f.ended(c, err != nil)
		return res, err
	}
}

// ended takes c out of f, and withdraws the questions that must not
// outlive it: each that ran only as long as c, and, if the guard gave up
// on c and c has effects, each that may be c's.
func (f *flights) ended(c *flight, unanswered bool) {
	gaveUp := unanswered && c.landing.effects
	type withdrawal struct {
		cancel context.CancelCauseFunc
		why    error
	}
	var out []withdrawal
	f.mu.Lock()
	delete(f.live, c)
	if gaveUp {
		// The attempt ended at its deadline at the latest, or when the
		// guard gave up if sooner; its request may land until the tool's
		// in-flight time has passed after that.
		end := time.Now()
		if deadline := c.sent.Add(c.landing.attempt); c.landing.attempt > 0 && deadline.Before(end) {
			end = deadline
		}
		if until := end.Add(c.landing.inFlight); until.After(f.quiet) {
			f.quiet = until
		}
	}
	for q := range f.questions {
		if _, ok := q.waiting[c]; !ok {
			continue
		}
		delete(q.waiting, c)
		switch {
		case gaveUp:
			out = append(out, withdrawal{q.cancel, errCallGivenUp})
		case len(q.waiting) == 0:
			out = append(out, withdrawal{q.cancel, errCallsEnded})
		default:
			continue
		}
		delete(f.questions, q)
	}
	f.mu.Unlock()
	for _, w := range out {
		w.cancel(w.why)
	}
}

// during returns ctx ended as soon as a call of the guard's in flight on
// the session now ends — every one of them, or one with effects the guard
// gives up on — or else why the question it is for is not passed on at
// all: no call is in flight, or a call the guard gave up on may still
// land. stop releases ctx.
func (f *flights) during(ctx context.Context) (_ context.Context, stop func(), why error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case len(f.live) == 0:
		return nil, nil, errNoCall
	case time.Now().Before(f.quiet):
		return nil, nil, errQuiet
	}
	ctx, cancel := context.WithCancelCause(ctx)
	q := &question{waiting: maps.Clone(f.live), cancel: cancel}
	if f.questions == nil {
		f.questions = make(map[*question]struct{})
	}
	f.questions[q] = struct{}{}
	return ctx, func() {
		f.mu.Lock()
		delete(f.questions, q)
		f.mu.Unlock()
		cancel(nil)
	}, nil
}

// WatchesWrites implements mcptool.WritesWatcher: every session of u is
// connected through mcptool.WatchWrites.
func (u *upstream) WatchesWrites() bool { return true }

// Lost forgets s, if it is the current session: the next call connects
// again (for a command, a new process).
func (u *upstream) Lost(s *mcp.ClientSession) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.session == s {
		u.session = nil
		go s.Close()
	}
}

func (u *upstream) close() {
	u.mu.Lock()
	u.closed = true
	s := u.session
	u.session = nil
	u.mu.Unlock()
	if s != nil {
		s.Close()
	}
	if u.http != nil {
		u.http.CloseIdleConnections()
	}
}

// retry connects to a server that was down at start, with growing waits,
// until it is up or the guard closes.
func (u *upstream) retry() {
	defer u.g.wg.Done()
	wait := time.Second
	for {
		select {
		case <-u.g.ctx.Done():
			return
		case <-time.After(wait):
		}
		ctx, cancel := context.WithTimeout(u.g.ctx, time.Minute)
		s, err := u.connect(ctx)
		if err == nil {
			err = u.list(ctx, s, false)
			cancel()
			if err != nil {
				u.g.log.Error("mcpguard: the server is up, but its tools do not check out; its calls stay refused", "server", u.name, "err", err)
			} else {
				u.g.log.Info("mcpguard: the server is up", "server", u.name)
			}
			return
		}
		cancel()
		u.g.log.Warn("mcpguard: the server cannot be reached yet", "server", u.name, "err", err)
		wait = min(2*wait, u.g.opts.RetryConnect)
	}
}

// frontName is the name the client sees for the server's tool.
func (u *upstream) frontName(tool string) string { return u.cfg.Prefix + tool }

// settings returns the guard's settings for a tool of the server, or nil
// for a tool that is refused.
func (u *upstream) settings(tool string) (*Tool, bool) {
	if t, ok := u.cfg.Tools[tool]; ok {
		return t, true
	}
	d := u.g.cfg.Default
	switch {
	case d == nil || d.Policy == "refuse":
		return nil, false
	case d.Tool != nil:
		return d.Tool, false
	}
	return &Tool{Class: ClassReadOnly}, false
}

// placeholders lists the tools the configuration names for a server that
// is not up yet: each answers definite_failure unavailable.
func (u *upstream) placeholders() error {
	for _, name := range slices.Sorted(maps.Keys(u.cfg.Tools)) {
		fn := u.frontName(name)
		if err := u.g.claimName(fn, u.name); err != nil {
			return err
		}
		u.g.front.AddTool(&mcp.Tool{Name: fn, Description: "Not available yet: its server cannot be reached.",
			InputSchema: json.RawMessage(`{"type":"object"}`)}, refusing(fn, envelope.CodeUnavailable, envelope.Wait,
			fmt.Sprintf("the server %s cannot be reached; nothing was sent", u.name), "The same call can be tried again later."))
	}
	return nil
}

// refusing answers every call with a definite failure of that call, as a
// call that never reached the action's record: the guard did not ask the
// store, and the call may repeat an action an earlier call did (before a
// restart, or before its server changed the tool), so its note says
// nothing of the action beyond this call (agenttool.NoteNotThisCall).
func refusing(tool, code string, next envelope.Next, msg, note string) mcp.ToolHandler {
	env := envelope.Envelope{Version: envelope.Version, Status: envelope.DefiniteFailure, Tool: tool,
		Error: &envelope.Error{Code: code, Message: msg}, Next: next, Note: strings.TrimSpace(agenttool.NoteNotThisCall + " " + note)}
	b, _ := env.Marshal()
	return func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: string(b)}},
			Meta: mcp.Meta{mcptool.MetaEnvelope: json.RawMessage(b)}}, nil
	}
}

// list reads the server's tools and puts them on the front as the
// configuration says. At start (first), an error stops the guard: a tool
// the configuration names that the server does not list, or lists twice,
// a tool that cannot be guarded. Later (a list_changed notification, a
// new process) the tools that do not check out answer a definite
// failure: a guarded tool listed twice is one (the guard cannot tell
// which the server runs).
func (u *upstream) list(ctx context.Context, s *mcp.ClientSession, first bool) error {
	var tools []*mcp.Tool
	seen, twice := map[string]bool{}, map[string]bool{}
	byName := map[string]*mcp.Tool{}
	for t, err := range s.Tools(ctx, nil) {
		if err != nil {
			return fmt.Errorf("mcpServers.%s: listing its tools: %w", u.name, err)
		}
		if seen[t.Name] {
			if first {
				return &ConfigError{Path: "mcpServers." + u.name, Problem: fmt.Sprintf("the server lists the tool %q twice; its listing is not usable", t.Name)}
			}
			// Later, which of the two the server runs is unknown: the
			// tool does not check out (below).
			twice[t.Name] = true
			continue
		}
		seen[t.Name] = true
		byName[t.Name] = t
		tools = append(tools, t)
	}
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(u.cfg.Tools)) {
		if !seen[name] {
			errs = append(errs, &ConfigError{Path: "mcpServers." + u.name + ".tools." + name,
				Problem: fmt.Sprintf("the server lists no such tool; it lists: %s", strings.Join(slices.Sorted(maps.Keys(seen)), ", "))})
		}
	}
	if first && len(errs) > 0 {
		return errors.Join(errs...)
	}
	schemas, defs := map[string]string{}, map[string]string{}
	var keep []string
	for _, t := range tools {
		settings, named := u.settings(t.Name)
		fn := u.frontName(t.Name)
		if settings == nil {
			continue
		}
		schema, _ := json.Marshal(t.InputSchema)
		schemas[t.Name] = string(schema)
		output, _ := json.Marshal(t.OutputSchema)
		defs[t.Name] = string(schema) + "\x00" + string(output)
		if err := u.g.claimName(fn, u.name); err != nil {
			errs = append(errs, err)
			continue
		}
		keep = append(keep, fn)
		if !objectSchema(t.InputSchema) {
			if first {
				errs = append(errs, &ConfigError{Path: "mcpServers." + u.name + ".tools." + t.Name,
					Problem: fmt.Sprintf("the server lists it with an input schema that is not a JSON object schema (%s), as MCP requires", schema)})
				continue
			}
			u.g.log.Error("mcpguard: the server lists a tool whose input schema is not an object schema; its calls are refused", "server", u.name, "tool", t.Name)
			u.g.refuse(fn, t.Description, "schema_changed",
				fmt.Sprintf("the server %s lists %s with an input schema that is not a JSON object schema; nothing was sent", u.name, t.Name),
				"This tool cannot be used until its server is fixed and the guard restarted; tell the user.")
			continue
		}
		if twice[t.Name] && settings.Class != ClassReadOnly {
			u.g.log.Error("mcpguard: the server lists a guarded tool twice; its calls are refused until the guard restarts", "server", u.name, "tool", t.Name)
			u.g.refuse(fn, t.Description, "schema_changed",
				fmt.Sprintf("the server %s lists %s twice, perhaps with another input schema, after the guard read it; nothing was sent", u.name, t.Name),
				"This tool cannot be used until its server is fixed and the guard restarted; tell the user.")
			continue
		}
		u.mu.Lock()
		before, listed := u.schemas[t.Name]
		u.mu.Unlock()
		if listed && before != string(schema) && settings.Class != ClassReadOnly {
			// What makes the key may have changed: the guard does not guess.
			u.g.log.Error("mcpguard: the server changed a guarded tool's input schema; its calls are refused until the guard restarts",
				"server", u.name, "tool", t.Name)
			u.g.refuse(fn, t.Description, "schema_changed",
				fmt.Sprintf("the server %s changed the input schema of %s after the guard read it; nothing was sent", u.name, t.Name),
				"This tool cannot be used until its guard is restarted; tell the user.")
			continue
		}
		if err := u.put(t, fn, settings, named); err != nil {
			if first {
				errs = append(errs, err)
				continue
			}
			u.g.log.Error("mcpguard: a tool cannot be guarded; its calls are refused", "server", u.name, "tool", t.Name, "err", err)
			u.g.refuse(fn, t.Description, "not_guarded", fmt.Sprintf("%s cannot be guarded: %v; nothing was sent", t.Name, err),
				"This tool cannot be used; tell the user.")
		}
	}
	// Tools the server no longer lists leave the front; so do the
	// placeholders of tools it does not list.
	u.g.mu.Lock()
	var gone []string
	for fn, server := range u.g.listed {
		if server == u.name && !slices.Contains(keep, fn) {
			gone = append(gone, fn)
			delete(u.g.listed, fn)
		}
	}
	u.g.mu.Unlock()
	if len(gone) > 0 {
		u.g.front.RemoveTools(gone...)
	}
	u.mu.Lock()
	if u.schemas == nil {
		u.schemas = schemas
	} else {
		for k, v := range schemas {
			if _, ok := u.schemas[k]; !ok {
				u.schemas[k] = v
			}
		}
	}
	if u.defs == nil {
		u.defs = map[string]string{}
	}
	for k, v := range defs {
		if _, ok := u.defs[k]; !ok {
			u.defs[k] = v
		}
	}
	unfit := map[string]string{}
	for _, name := range slices.Sorted(maps.Keys(u.cfg.Tools)) {
		c := u.cfg.Tools[name].Check
		if c == nil || c.Tool == "" {
			continue
		}
		why := ""
		switch def, ok := defs[c.Tool]; {
		case !ok:
			why = "the server no longer lists it"
		case def != u.defs[c.Tool]:
			why = "the server changed its schemas after the guard read them"
		default:
			why = lacksArgument(byName[c.Tool], c)
		}
		if why == "" {
			continue
		}
		if first && defs[c.Tool] != "" {
			errs = append(errs, &ConfigError{Path: "mcpServers." + u.name + ".tools." + name + ".check.arguments",
				Problem: fmt.Sprintf("the check tool %q %s: the check would not ask for the action where the server keeps it, "+
					"and could read it as not applied", c.Tool, why)})
		}
		if _, was := u.unfit[c.Tool]; !was {
			u.g.log.Error("mcpguard: a check tool no longer reads as the configuration wrote its check; its answers settle nothing until the guard restarts",
				"server", u.name, "tool", name, "check", c.Tool, "why", why)
		}
		unfit[c.Tool] = why
	}
	u.unfit = unfit
	u.mu.Unlock()
	return errors.Join(errs...)
}

// unfitCheck returns why a check with tool answers nothing now, or "".
func (u *upstream) unfitCheck(tool string) string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.unfit[tool]
}

// lacksArgument says which of the check's arguments its tool, as listed,
// takes none of (its input schema names its properties, and not that
// one), or "".
func lacksArgument(t *mcp.Tool, c *Check) string {
	if t == nil {
		return ""
	}
	raw, err := json.Marshal(t.InputSchema)
	if err != nil {
		return ""
	}
	var s struct {
		Properties map[string]json.RawMessage `json:"properties"`
	}
	if json.Unmarshal(raw, &s) != nil || s.Properties == nil {
		return ""
	}
	for _, arg := range slices.Sorted(maps.Keys(c.Arguments)) {
		if _, ok := s.Properties[arg]; !ok {
			return fmt.Sprintf("takes no argument %q (its input schema's properties are %s)", arg, strings.Join(slices.Sorted(maps.Keys(s.Properties)), ", "))
		}
	}
	return ""
}

// put lists tool t on the front as fn, guarded as settings say.
func (u *upstream) put(t *mcp.Tool, fn string, settings *Tool, named bool) error {
	path := "mcpServers." + u.name + ".tools." + t.Name
	if !named {
		path = "default"
	}
	if settings.Class == ClassReadOnly {
		if !named {
			u.g.log.Warn("mcpguard: a tool the configuration does not name is passed through unguarded (default read_only)", "server", u.name, "tool", t.Name)
		}
		listing := *t
		listing.Name = fn
		return u.g.addTool(&listing, u.passthrough(t.Name))
	}
	class := map[string]agenttool.Class{ClassKeyed: agenttool.Keyed, ClassAtMostOnce: agenttool.AtMostOnce, ClassReconcilable: agenttool.Reconcilable}[settings.Class]
	o := agenttool.Options{Store: u.g.store, Class: class, IdentifyingFields: settings.Identifying, KeyTTL: time.Duration(settings.KeyTTL),
		AttemptTimeout: time.Duration(settings.AttemptTimeout), DestinationKeyTTL: time.Duration(settings.DestinationKeyTTL), Logger: u.g.log}
	// A line per call, with no input, result or identity in it.
	o.Hooks = observe.Join(observe.Log(u.g.log), u.g.opts.Hooks)
	if o.AttemptTimeout == 0 {
		// A server may apply a request it took after the guard stopped
		// waiting: the attempt timeout bounds when, for the checks.
		o.AttemptTimeout = DefaultAttemptTimeout
	}
	// The guard listens for a late answer as long again as the attempt
	// took (listen_late): a check's not-applied then waits for both.
	to := mcptool.ToolOptions{Name: toolName(fn), WholeResult: true, PassMeta: true, RelayInput: true, Sessions: u, LateWindow: o.AttemptTimeout,
		LateDone: u.g.ctx.Done()}
	if settings.ListenLate != nil {
		to.LateWindow = time.Duration(*settings.ListenLate)
	}
	// A late answer settles the action, through an operator of its tool
	// (made once the tool is).
	var late atomic.Pointer[agenttool.Operator]
	to.Late = func(info agenttool.CallInfo, result string, err error) {
		op := late.Load()
		if op == nil {
			return
		}
		ctx, cancel := context.WithTimeout(u.g.ctx, time.Minute)
		defer cancel()
		verdict, serr := mcptool.SettleLate(ctx, op, info, result, err, "guard:late-answer")
		switch {
		case serr == nil && (verdict == reconcile.Applied || verdict == reconcile.NotApplied):
			u.g.log.Info("mcpguard: a late answer of the server settled an unknown outcome", "server", u.name, "tool", fn, "ref", info.RequestRef,
				"verdict", observe.VerdictValue(verdict))
		case serr == nil:
			// A refusal while an earlier attempt may still land proves
			// nothing of that one: the action stays unknown.
			u.g.log.Info("mcpguard: a late answer of the server settled nothing: an earlier attempt may still land", "server", u.name, "tool", fn,
				"ref", info.RequestRef, "verdict", observe.VerdictValue(verdict))
		case errors.Is(serr, agenttool.ErrContradicted) && verdict == reconcile.Applied:
			u.g.log.Error("mcpguard: the server's late answer shows done an action found not applied and replaced: it is settled applied; "+
				"the call that went on in its place may be it reworded: a person should look before approving that one",
				"server", u.name, "tool", fn, "ref", info.RequestRef, "attempt", info.Attempt, "err", serr)
		case errors.Is(serr, agenttool.ErrContradicted):
			u.g.log.Error("mcpguard: the server's late answer shows done an action recorded failed: a finding of not applied was wrong; a person should look",
				"server", u.name, "tool", fn, "ref", info.RequestRef, "attempt", info.Attempt)
		case errors.Is(serr, agenttool.ErrStale) || errors.Is(serr, agenttool.ErrNotUnknown):
			// The action moved on (a retry, a check, a person): the
			// late answer is about an attempt that is no longer its own.
		default:
			u.g.log.Warn("mcpguard: a late answer of the server could not be recorded", "server", u.name, "tool", fn, "ref", info.RequestRef, "err", serr)
		}
	}
	switch {
	case settings.KeyArgument != "" && settings.KeyArgument != MetaKey:
		to.RefArgument = settings.KeyArgument
	case settings.RefArgument != "":
		to.RefArgument = settings.RefArgument
	}
	if settings.Errors == "definite" {
		to.ToolErrors = mcptool.DefiniteToolErrors
	}
	argPath := path + ".key_argument"
	if settings.RefArgument != "" {
		argPath = path + ".ref_argument"
	}
	switch {
	case to.RefArgument == "":
	case settings.KeyForm == KeyFormUUID:
		to.RefForm = mcptool.RefUUIDForm
	case settings.KeyForm == KeyFormUUID4:
		to.RefForm = mcptool.RefUUID4Form
	case settings.KeyForm == "":
		// A schema that asks for a UUID may be obeyed or not by its
		// server: the operator says which form it takes.
		switch want, err := mcptool.RefFormFor(t, to.RefArgument, to.Name); {
		case err != nil:
			return &ConfigError{Path: argPath, Problem: strings.TrimPrefix(err.Error(), "mcptool: ") +
				"; every call would be refused by a server that validates it, after it was sent: name another argument, or set key_form to the form the server takes there"}
		case want == mcptool.RefUUIDForm:
			return &ConfigError{Path: argPath, Problem: fmt.Sprintf("the server's schema asks for a UUID in %q (or refuses the request reference there, and takes a UUID): "+
				"set \"key_form\": \"uuid\" to send the reference's UUID form, or \"reference\" if the server takes any string there "+
				"(after a change of form, the actions still unknown wait for a person: choose before the first call)", to.RefArgument)}
		case want == mcptool.RefUUID4Form:
			return &ConfigError{Path: argPath, Problem: fmt.Sprintf("the server's schema asks for a version 4 UUID in %q: "+
				"set \"key_form\": \"uuid4\" to send the reference's UUID form with a version 4 UUID's bits, or \"reference\" if the server takes any string there "+
				"(after a change of form, the actions still unknown wait for a person: choose before the first call)", to.RefArgument)}
		}
	}
	if settings.Check != nil {
		o.Reconciler = &checker{u: u, check: settings.Check, refForm: to.RefForm} // ${ref} is what the server was given
		if settings.Check.readsInput() {
			codec, err := u.g.inputCodec()
			if err != nil {
				return err
			}
			o.KeepInput, o.InputCodec = true, codec
		}
	}
	if u.g.opts.Tune != nil {
		u.g.opts.Tune(fn, &o)
	}
	// Arguments the server's schema refuses are refused here, nothing
	// sent: sent, a refusal would be unknown (MCP reports an error after
	// acting the same way), and hold the tool's fence.
	to.ValidateArguments = true
	guarded, err := mcptool.NewToolWith(nil, t, o, to)
	if errors.Is(err, mcptool.ErrSchemaUnreadable) {
		u.g.log.Warn("mcpguard: the server's input schema cannot be read to check arguments; calls go unchecked", "server", u.name, "tool", t.Name, "err", err)
		to.ValidateArguments = false
		guarded, err = mcptool.NewToolWith(nil, t, o, to)
	}
	switch {
	case errors.Is(err, mcptool.ErrRefRefused):
		if settings.KeyForm != "" {
			argPath = path + ".key_form"
		}
		return &ConfigError{Path: argPath, Problem: strings.TrimPrefix(err.Error(), "mcptool: ") +
			"; every call would be refused by the server after it was sent: set key_form to the form it takes, or name another argument"}
	case err != nil:
		return &ConfigError{Path: path, Problem: strings.TrimPrefix(err.Error(), "mcptool: ")}
	}
	// How long after the guard gave up on a call of the tool its request
	// may land, for the questions the server asks meanwhile (flights). A
	// keyed tool's server acts once per key: an answer that reaches it
	// late acts at most once, and its resend, under the same key, may ask
	// again while the guard still listens for the first attempt.
	set := guarded.Settings()
	u.landing.Store(t.Name, landing{effects: class != agenttool.Keyed, attempt: set.AttemptTimeout, inFlight: set.InFlight()})
	op, err := agenttool.NewOperator(u.g.store, guarded)
	if err != nil {
		return err
	}
	late.Store(op)
	listing := *t
	listing.Name = fn
	listing.InputSchema = hide(t.InputSchema, to.RefArgument)
	// A guarded call may answer success with what did not come from the
	// tool — a check's answer, a person's settlement — which the server's
	// output schema does not describe: the guard promises none.
	listing.OutputSchema = nil
	return registered(func() error {
		return mcptool.Register(u.g.front, guarded, &mcptool.ServerOptions{
			Class: class, Listing: &listing, Principal: u.g.principal, Session: u.g.session, Logger: u.g.log,
		})
	})
}

// inputCodec is the codec that seals kept inputs: AES-256-GCM under
// Config.InputKey.
func (g *Guard) inputCodec() (agenttool.Codec, error) {
	key, err := hex.DecodeString(strings.TrimSpace(os.ExpandEnv(g.cfg.InputKey)))
	if err != nil || len(key) != 32 {
		return nil, &ConfigError{Path: "input_key", Problem: "not 32 bytes in hex once its variables are read (openssl rand -hex 32)"}
	}
	return agenttool.NewSealingCodec(key)
}

// DefaultAttemptTimeout is a guarded tool's attempt timeout when its
// settings give none (Tool.AttemptTimeout).
const DefaultAttemptTimeout = 60 * time.Second

// registered runs a registration, turning the SDK's panic on a listing it
// refuses into an error.
func registered(f func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("the tool cannot be listed: %v", p)
		}
	}()
	return f()
}

// toolName is the name under which a guarded tool's actions are
// recorded: the name a client sees, where the library takes it (letters,
// digits, _ and -, at most 64 bytes); else what it takes of it, with a
// digest of the whole name, so that two names never become one.
func toolName(fn string) string {
	b := []byte(fn)
	changed := len(b) > 64
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			b[i] = '_'
			changed = true
		}
	}
	if !changed {
		return fn
	}
	sum := sha256.Sum256([]byte(fn))
	return string(b[:min(len(b), 47)]) + "-" + hex.EncodeToString(sum[:8])
}

// objectSchema reports whether a listed tool's input schema is a JSON
// object schema, as MCP requires and the SDK's AddTool insists.
func objectSchema(schema any) bool {
	raw, err := json.Marshal(schema)
	if err != nil {
		return false
	}
	var s struct {
		Type any `json:"type"`
	}
	return json.Unmarshal(raw, &s) == nil && s.Type == "object"
}

// addTool lists t on the front; a listing the SDK refuses (it panics) is
// an error, never the guard's end.
func (g *Guard) addTool(t *mcp.Tool, h mcp.ToolHandler) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("the tool %q cannot be listed: %v", t.Name, p)
		}
	}()
	g.front.AddTool(t, h)
	return nil
}

// refuse lists a tool that answers every call with a definite failure,
// under a schema any client takes.
func (g *Guard) refuse(name, description, code, msg, note string) {
	g.addTool(&mcp.Tool{Name: name, Description: description, InputSchema: json.RawMessage(`{"type":"object"}`)},
		refusing(name, code, envelope.DoNotRetry, msg, note))
}

// hide returns schema without the property arg (the argument the guard
// fills), in properties and required.
func hide(schema any, arg string) any {
	if arg == "" {
		return schema
	}
	raw, err := json.Marshal(schema)
	if err != nil {
		return schema
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) != nil {
		return schema
	}
	var props map[string]json.RawMessage
	if json.Unmarshal(m["properties"], &props) == nil && props != nil {
		delete(props, arg)
		m["properties"], _ = json.Marshal(props)
	}
	var req []string
	if json.Unmarshal(m["required"], &req) == nil && req != nil {
		req = slices.DeleteFunc(req, func(s string) bool { return s == arg })
		m["required"], _ = json.Marshal(req)
	}
	out, err := json.Marshal(m)
	if err != nil {
		return schema
	}
	return json.RawMessage(out)
}

// passthrough forwards a read-only tool's calls untouched.
func (u *upstream) passthrough(tool string) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		s, err := u.Session(ctx)
		if err != nil {
			return refusing(tool, envelope.CodeUnavailable, envelope.Wait, fmt.Sprintf("the server %s cannot be reached: %v", u.name, err),
				"The same call can be tried again later.")(ctx, req)
		}
		res, err := s.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: req.Params.Arguments, Meta: mcptool.PassableMeta(req.Params.Meta),
			InputResponses: req.Params.InputResponses, RequestState: req.Params.RequestState}) // a later round of a server's question
		if errors.Is(err, mcp.ErrConnectionClosed) {
			u.Lost(s)
		}
		if res != nil {
			// Only the guard writes an envelope: one the server put there
			// would pass for the guard's word.
			delete(res.Meta, mcptool.MetaEnvelope)
		}
		return res, err
	}
}
