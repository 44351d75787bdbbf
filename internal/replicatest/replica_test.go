package replicatest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/mcptool"
	"github.com/retrysafe/retrysafe/agenttool/pgstore"
)

// The environment of a replica process.
const (
	envSchema      = "RETRYSAFE_REPLICA_SCHEMA"      // the PostgreSQL schema the replicas share
	envName        = "RETRYSAFE_REPLICA_NAME"        // this replica's name
	envAddr        = "RETRYSAFE_REPLICA_ADDR"        // where it listens: the same address after a restart
	envDestination = "RETRYSAFE_REPLICA_DESTINATION" // the mail service's URL
)

// replicaLifetime bounds a replica process, whatever its parent does.
const replicaLifetime = time.Hour

// What a replica prints, one line each, for the test to read.
const (
	lineReady    = "READY "    // then the address it serves on
	lineEnvelope = "ENVELOPE " // then an answered call, as JSON (answered)
	lineSynced   = "SYNCED "   // then the mark the test asked for: every line before it has been read
)

// answered is one envelope a replica answered, as it prints it.
type answered struct {
	Replica   string          `json:"replica"`
	Principal string          `json:"principal"`
	At        int64           `json:"at"` // Unix nanoseconds, on this machine's clock
	Path      string          `json:"path"`
	Envelope  json.RawMessage `json:"envelope"`
}

// tokenPrefix makes a bearer token of a principal: the replicas' verifier
// accepts any, and the token's user is the principal. A real server asks
// its identity provider.
const tokenPrefix = "tok:"

func verifyToken(_ context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
	user, ok := strings.CutPrefix(token, tokenPrefix)
	if !ok || user == "" {
		return nil, fmt.Errorf("unknown token: %w", auth.ErrInvalidToken)
	}
	return &auth.TokenInfo{UserID: user, Expiration: time.Now().Add(time.Hour)}, nil
}

// TestReplicaProcess is one replica of the MCP server of
// TestOneEffectPerActionAcrossReplicasAndRestarts: send_email guarded by
// retrysafe on the shared PostgreSQL, served over stateless streamable
// HTTP, with a sweeper. It runs until it is killed. It does nothing in a normal test run.
func TestReplicaProcess(t *testing.T) {
	schema := os.Getenv(envSchema)
	if schema == "" {
		t.Skip("a replica process, started by TestOneEffectPerActionAcrossReplicasAndRestarts")
	}
	time.AfterFunc(replicaLifetime, func() { os.Exit(3) })
	name, dest := os.Getenv(envName), os.Getenv(envDestination)
	var printMu sync.Mutex
	say := func(line string) {
		printMu.Lock()
		defer printMu.Unlock()
		os.Stdout.WriteString(line + "\n")
	}
	ctx := context.Background()
	store, err := pgstore.Open(ctx, &pgstore.Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	// The test's faults that strike before a write leaves: the mail
	// service answers once the fault is done — after killing this process,
	// or after stopping it (SIGSTOP), in which case the answer is read
	// once the process is resumed. No timeout: a timer would fire on
	// resuming, before the answer is read.
	control := &http.Client{}
	d := destinationClient{url: dest, replica: name, http: &http.Client{},
		pause: func(ctx context.Context, ref, to string, token uint64) bool {
			q := url.Values{"ref": {ref}, "to": {to}, "token": {strconv.FormatUint(token, 10)}, "replica": {name}}
			resp, err := control.Get(dest + "/control/before-write?" + q.Encode())
			if err != nil {
				return false
			}
			defer resp.Body.Close()
			verdict, _ := io.ReadAll(resp.Body)
			return string(verdict) == "paused"
		}}
	// Calls and requests being served: the test waits until there are
	// none. A call counts from its start to its printed envelope, also
	// when the client has gone and the SDK's handler has returned.
	var calls, requests atomic.Int64
	hooks := agenttool.Hooks{
		Start: func(ctx context.Context, _ agenttool.StartEvent) context.Context {
			calls.Add(1)
			return ctx
		},
		Outcome: func(ctx context.Context, e agenttool.OutcomeEvent) {
			defer calls.Add(-1)
			env, err := e.Envelope.Marshal()
			if err != nil {
				env, _ = json.Marshal(err.Error())
			}
			scope, _ := agenttool.ScopeFrom(ctx)
			line, _ := json.Marshal(answered{Replica: name, Principal: scope.Principal, At: time.Now().UnixNano(), Path: e.Path, Envelope: env})
			say(lineEnvelope + string(line))
		},
	}
	tool, err := newSendEmail(store, d, hooks)
	if err != nil {
		t.Fatal(err)
	}
	// Each replica runs a sweeper, as a deployment does: it settles what
	// calls left unknown, and so approves retries between the model's
	// turns.
	op, err := agenttool.NewOperator(store, tool)
	if err != nil {
		t.Fatal(err)
	}
	go op.RunSweeper(ctx, agenttool.SweeperOptions{Interval: 300 * time.Millisecond, Rest: 200 * time.Millisecond})
	server := mcp.NewServer(&mcp.Implementation{Name: "mail", Version: "1.0.0"}, nil)
	// The principal is the token's user; the session one per principal
	// (mcptool.OneSession): every call of a conversation, on whichever
	// replica, in one fence scope.
	if err := mcptool.Register(server, tool, &mcptool.ServerOptions{Class: agenttool.Reconcilable}); err != nil {
		t.Fatal(err)
	}
	var h http.Handler = mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server },
		&mcp.StreamableHTTPOptions{Stateless: true, JSONResponse: true})
	h = auth.RequireBearerToken(verifyToken, nil)(h)
	mux := http.NewServeMux()
	mux.HandleFunc("/mcp", func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		defer requests.Add(-1)
		h.ServeHTTP(w, r)
	})
	mux.HandleFunc("GET /control/busy", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, requests.Load()+calls.Load())
	})
	mux.HandleFunc("GET /control/sync", func(w http.ResponseWriter, r *http.Request) {
		say(lineSynced + r.URL.Query().Get("mark"))
	})
	l, err := net.Listen("tcp", os.Getenv(envAddr))
	if err != nil {
		t.Fatal(err)
	}
	say(lineReady + l.Addr().String())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	t.Fatal(srv.Serve(l))
}
