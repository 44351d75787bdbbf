package interop

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe/envelope"
)

// TestMain runs this test binary as the counting wrapper when the guard
// starts it as an upstream's command (upstream_test.go).
func TestMain(m *testing.M) {
	if os.Getenv(asUpstream) == "1" {
		os.Exit(runUpstream(os.Args[1:]))
	}
	if raceDetector {
		// A race-built process sleeps a second as it exits, unless told
		// not to: the guard and the wrapper would, at every restart.
		os.Setenv("GORACE", strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	}
	code := m.Run()
	if built.dir != "" {
		os.RemoveAll(built.dir)
	}
	os.Exit(code)
}

// requiredEnv, set by CI once it has installed Node and the packages,
// turns a skip for their absence into a failure.
const requiredEnv = "RETRYSAFE_INTEROP_REQUIRED"

// kit is what an interop test runs: node, the packages npm installed,
// and the retrysafe command.
type kit struct {
	node      string // node's path
	dir       string // internal/interop, absolute
	modules   string // its node_modules/@modelcontextprotocol
	retrysafe string // the retrysafe command
	self      string // this test binary, the counting wrapper
}

// need returns the kit, or skips the test (fails it under CI) when Node
// or the packages are missing.
func need(t *testing.T) *kit {
	t.Helper()
	absent := func(format string, args ...any) {
		t.Helper()
		msg := fmt.Sprintf(format, args...)
		if os.Getenv(requiredEnv) != "" {
			t.Fatalf("%s (and $%s is set)", msg, requiredEnv)
		}
		t.Skip(msg)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		absent("interop: node is not installed (apt-get install nodejs npm, then npm ci --prefix internal/interop)")
	}
	dir, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	k := &kit{node: node, dir: dir, modules: filepath.Join(dir, "node_modules", "@modelcontextprotocol")}
	for _, p := range []string{"sdk", "server-memory/dist/index.js", "server-filesystem/dist/index.js", "inspector-cli/build/cli.js"} {
		if _, err := os.Stat(filepath.Join(k.modules, p)); err != nil {
			absent("interop: internal/interop/node_modules lacks @modelcontextprotocol/%s: run npm ci --prefix internal/interop", p)
		}
	}
	if k.self, err = os.Executable(); err != nil {
		t.Fatal(err)
	}
	k.retrysafe = retrysafe(t)
	return k
}

// built is the retrysafe command this test binary built, once for all
// its tests.
var built struct {
	once      sync.Once
	dir, path string
	err       error
}

// retrysafe returns the retrysafe command: $RETRYSAFE_INTEROP_BIN, or
// one built from this module (with the race detector when the tests run
// under it).
func retrysafe(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("RETRYSAFE_INTEROP_BIN"); p != "" {
		return p
	}
	built.once.Do(func() {
		built.dir, built.err = os.MkdirTemp("", "retrysafe-interop-")
		if built.err != nil {
			return
		}
		built.path = filepath.Join(built.dir, "retrysafe")
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		args := []string{"build", "-o", built.path}
		if raceDetector {
			args = append(args, "-race")
		}
		cmd := exec.CommandContext(ctx, "go", append(args, "github.com/retrysafe/retrysafe/cmd/retrysafe")...)
		if out, err := cmd.CombinedOutput(); err != nil {
			built.err = fmt.Errorf("go build ./cmd/retrysafe: %v\n%s", err, out)
		}
	})
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.path
}

// run is one interop run's files: the guard's configuration and store,
// the wrapper's log, the servers' data.
type run struct {
	t      *testing.T
	k      *kit
	dir    string
	log    string // the counting wrapper's log
	config string
	checks map[string]bool // read-only tools the guard calls itself, as checks
}

func (k *kit) newRun(t *testing.T) *run {
	dir := t.TempDir()
	return &run{t: t, k: k, dir: dir, log: filepath.Join(dir, "deliveries.log"), config: filepath.Join(dir, "guard.json")}
}

// upstream is a server's entry in the guard's configuration: the
// counting wrapper around node running the reference server script, with
// its arguments and environment, and the faults it injects.
func (r *run) upstream(script string, args []string, env map[string]string, faults []fault, tools map[string]any) map[string]any {
	e := map[string]string{asUpstream: "1", logEnv: r.log}
	for k, v := range env {
		e[k] = v
	}
	if len(faults) > 0 {
		b, _ := json.Marshal(faults)
		e[dropEnv] = string(b)
	}
	return map[string]any{
		"command": r.k.self,
		"args":    append([]string{r.k.node, filepath.Join(r.k.modules, script)}, args...),
		"env":     e,
		"tools":   tools,
	}
}

// writeConfig writes the guard's configuration: servers by name, stdio
// front as ana@example.com, a bbolt store in the run's directory, each
// call's conversation in _meta conversation_id.
func (r *run) writeConfig(servers map[string]any, extra map[string]any) {
	r.t.Helper()
	cfg := map[string]any{
		"principal":    "ana@example.com",
		"store":        map[string]any{"path": filepath.Join(r.dir, "guard.db")},
		"conversation": map[string]any{"meta": "conversation_id"},
		"mcpServers":   servers,
	}
	for k, v := range extra {
		cfg[k] = v
	}
	b, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		r.t.Fatal(err)
	}
	if err := os.WriteFile(r.config, b, 0o600); err != nil {
		r.t.Fatal(err)
	}
}

// call is one step of a plan: a tools/call as the model makes it, and
// what the guard's documented promise says it answers.
type call struct {
	Tool      string         `json:"tool"`
	Arguments map[string]any `json:"arguments"`
	Meta      map[string]any `json:"meta,omitempty"`
	Batch     int            `json:"batch,omitempty"`      // sent at once with its neighbours of the same batch
	TimeoutMS int            `json:"timeout_ms,omitempty"` // the client's own timeout
	SleepMS   int            `json:"sleep_ms,omitempty"`   // the client waits this long first

	gaveUp   bool            // the client's own timeout ends the call
	want     envelope.Status // "" for a read-only pass-through; "not_success" for anything but success
	wantCode string          // the envelope's error code, if it matters
	says     string          // a read-only answer's text contains this
	why      string          // what the step is, for the test's log
}

const notSuccess envelope.Status = "not_success"

func in(conversation string, c call) call {
	c.Meta = map[string]any{"conversation_id": conversation}
	return c
}

// step is what a client saw of one call.
type step struct {
	Step              int                `json:"step"`
	Tool              string             `json:"tool"`
	Arguments         json.RawMessage    `json:"arguments"`
	IsError           bool               `json:"isError"`
	Envelope          *envelope.Envelope `json:"envelope"`
	TextEnvelope      *envelope.Envelope `json:"textEnvelope"`
	StructuredContent json.RawMessage    `json:"structuredContent"`
	Text              string             `json:"text"`
	Error             string             `json:"error"`
}

// listing is what the client saw of the tools.
type listing struct {
	Listed []tool `json:"listed"`
}

type tool struct {
	Name         string          `json:"name"`
	InputSchema  json.RawMessage `json:"inputSchema"`
	OutputSchema json.RawMessage `json:"outputSchema"`
	Annotations  json.RawMessage `json:"annotations"`
}

func (l listing) names() []string {
	var ns []string
	for _, t := range l.Listed {
		ns = append(ns, t.Name)
	}
	slices.Sort(ns)
	return ns
}

// drive runs drive.mjs, the TypeScript SDK's client, over the plan: it
// launches the guard over stdio (url == "") or reaches it over
// streamable HTTP with the token.
func (r *run) drive(plan []call, url, token string) (listing, []step) {
	r.t.Helper()
	l, steps, err := r.tryDrive(plan, url, token)
	if err != nil {
		r.t.Fatal(err)
	}
	return l, steps
}

// tryDrive is drive, returning the error of a client that did not run
// to its end.
func (r *run) tryDrive(plan []call, url, token string) (listing, []step, error) {
	r.t.Helper()
	type wire struct {
		Calls []call `json:"calls"`
	}
	b, _ := json.Marshal(wire{plan})
	planPath := filepath.Join(r.dir, fmt.Sprintf("plan-%d.json", time.Now().UnixNano()))
	if err := os.WriteFile(planPath, b, 0o600); err != nil {
		r.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	args := []string{filepath.Join(r.k.dir, "drive.mjs"), "--plan", planPath}
	if url == "" {
		args = append(args, "--guard", r.k.retrysafe, "--config", r.config)
	} else {
		args = append(args, "--url", url, "--token", token)
	}
	cmd := exec.CommandContext(ctx, r.k.node, args...)
	cmd.Dir = r.dir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r.t.Cleanup(func() {
		if r.t.Failed() {
			r.t.Logf("drive.mjs and the guard said:\n%s", stderr.String())
		}
	})
	if err != nil {
		return listing{}, nil, fmt.Errorf("drive.mjs: %v\n%s\n%s", err, stdout.String(), stderr.String())
	}
	var l listing
	var steps []step
	sc := bufio.NewScanner(&stdout)
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if bytes.HasPrefix(line, []byte(`{"listed"`)) {
			if err := json.Unmarshal(line, &l); err != nil {
				return l, nil, fmt.Errorf("drive.mjs's listing: %v", err)
			}
			continue
		}
		var s step
		if err := json.Unmarshal(line, &s); err != nil {
			return l, nil, fmt.Errorf("drive.mjs's line %q: %v", line, err)
		}
		steps = append(steps, s)
	}
	if len(steps) != len(plan) {
		return l, nil, fmt.Errorf("drive.mjs answered %d calls of %d:\n%s\n%s", len(steps), len(plan), stdout.String(), stderr.String())
	}
	return l, steps, nil
}

// canon is a JSON value in one spelling: keys sorted, no spaces; null
// and absent arguments are {}.
func canon(raw []byte) string {
	var v any
	if len(bytes.TrimSpace(raw)) == 0 || json.Unmarshal(raw, &v) != nil || v == nil {
		return "{}"
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// tally is what one run showed, for the log and the report.
type tally struct {
	calls, deliveries, success, unknown, definite, passthrough int
}

func (a tally) String() string {
	return fmt.Sprintf("%d calls, %d deliveries: %d success, %d unknown_outcome, %d definite_failure, %d read-only pass-through",
		a.calls, a.deliveries, a.success, a.unknown, a.definite, a.passthrough)
}

// audit checks each step against the deliveries the wrapper counted:
// no action is delivered twice; success was delivered exactly once, and
// the server's reply to it (relayed, or dropped by a fault) was not an
// error; definite_failure was never
// delivered; anything else is unknown_outcome, with isError; a failure's
// text carries the same envelope as its _meta. A read-only call is
// delivered once per call. Then each step is checked against what the
// plan says the guard promises.
func (r *run) audit(class map[string]string, plan []call, steps []step) tally {
	r.t.Helper()
	t := r.t
	log := readLog(r.log)
	type at struct {
		pid int
		id  string
	}
	undelivered := map[at]bool{}
	replies := map[at]entry{}
	for _, e := range log {
		switch e.Kind {
		case "undelivered":
			undelivered[at{e.PID, idKey(e.ID)}] = true
		case "reply", "dropped":
			replies[at{e.PID, idKey(e.ID)}] = e
		}
	}
	delivered := map[string][]entry{} // by tool and canonical arguments
	var a tally
	for _, e := range log {
		if e.Kind != "call" || undelivered[at{e.PID, idKey(e.ID)}] {
			continue
		}
		a.deliveries++
		k := e.Tool + " " + canon(e.Arguments)
		delivered[k] = append(delivered[k], e)
	}
	asked := map[string]int{}
	for _, s := range steps {
		asked[s.Tool+" "+canon(s.Arguments)]++
	}
	for k, es := range delivered {
		if asked[k] == 0 && class[es[0].Tool] == "read_only" && r.checks[es[0].Tool] {
			continue // the guard's own check, which only reads
		}
		if asked[k] == 0 {
			t.Errorf("the server received %d call(s) no client made: %s", len(es), k)
		}
	}
	for i, s := range steps {
		a.calls++
		p := plan[i]
		k := s.Tool + " " + canon(s.Arguments)
		ds := delivered[k]
		what := fmt.Sprintf("step %d (%s), %s %s", i, p.why, s.Tool, strings.ReplaceAll(canon(s.Arguments), r.dir, "$RUN"))
		if class[s.Tool] != "read_only" && len(ds) > 1 {
			t.Errorf("%s: delivered %d times", what, len(ds))
		}
		switch {
		case p.gaveUp && s.Error != "":
			t.Logf("%s → the client gave up: %s (delivered %d)", what, s.Error, len(ds))
			continue
		case p.gaveUp:
			t.Errorf("%s: answered before the client's timeout; the step is meant to give up", what)
		case s.Error != "":
			t.Errorf("%s: the client refused the guard's answer: %s", what, s.Error)
			continue
		}
		if class[s.Tool] == "read_only" {
			a.passthrough++
			if len(ds) != asked[k] {
				t.Errorf("%s: a read-only call, asked %d times, delivered %d times", what, asked[k], len(ds))
			}
			if s.IsError {
				t.Errorf("%s: a read-only call answered isError: %s", what, s.Text)
			}
			if p.says != "" && !strings.Contains(s.Text, p.says) {
				t.Errorf("%s: the answer does not say %q: %s", what, p.says, s.Text)
			}
			t.Logf("%s → pass-through (delivered %d)", what, len(ds))
			continue
		}
		env := s.Envelope
		if env == nil {
			t.Errorf("%s: no envelope in _meta: isError %v, %s", what, s.IsError, s.Text)
			continue
		}
		t.Logf("%s → %s %s (delivered %d)", what, env.Status, code(env), len(ds))
		if len(ds) > env.Attempts {
			t.Errorf("%s: delivered %d times, but the envelope counts %d attempts", what, len(ds), env.Attempts)
		}
		if s.IsError {
			switch te := s.TextEnvelope; {
			case te == nil:
				t.Errorf("%s: a failure whose text is not the envelope: %s", what, s.Text)
			case te.Status != env.Status || te.RequestRef != env.RequestRef || code(te) != code(env):
				t.Errorf("%s: the text's envelope (%s) is not _meta's (%s)", what, te, env)
			}
		}
		switch env.Status {
		case envelope.Success:
			a.success++
			if s.IsError {
				t.Errorf("%s: success with isError", what)
			}
			if len(ds) != 1 {
				t.Errorf("%s: success, but delivered %d times", what, len(ds))
			} else if rep, ok := replies[at{ds[0].PID, idKey(ds[0].ID)}]; !ok || rep.IsError || rep.RPCError {
				// The server's reply, relayed or dropped, is the truth.
				t.Errorf("%s: success, but the server's reply was %+v (ok %v)", what, rep, ok)
			}
		case envelope.DefiniteFailure:
			a.definite++
			if !s.IsError {
				t.Errorf("%s: definite_failure without isError", what)
			}
			if len(ds) != 0 {
				t.Errorf("%s: definite_failure, but the server received it %d time(s)", what, len(ds))
			}
		case envelope.UnknownOutcome:
			a.unknown++
			if !s.IsError {
				t.Errorf("%s: unknown_outcome without isError", what)
			}
		default:
			t.Errorf("%s: status %q", what, env.Status)
		}
		switch {
		case p.want == notSuccess:
			if env.Status == envelope.Success {
				t.Errorf("%s: success; the guard promises it is not sent again", what)
			}
		case p.want != "" && env.Status != p.want:
			t.Errorf("%s: %s, want %s", what, env, p.want)
		}
		if p.wantCode != "" && code(env) != p.wantCode {
			t.Errorf("%s: error code %q, want %q: %s", what, code(env), p.wantCode, env)
		}
	}
	t.Logf("%s", a)
	return a
}

func code(e *envelope.Envelope) string {
	if e.Error == nil {
		return ""
	}
	return e.Error.Code
}

// classes are the classes of a tools map, by tool.
func classes(tools map[string]any) map[string]string {
	c := map[string]string{}
	for name, t := range tools {
		c[name] = t.(map[string]any)["class"].(string)
	}
	return c
}

func class(c string) map[string]any { return map[string]any{"class": c} }

// memoryTools guards server-memory: its writes at most once, its reads
// passed through; its deletions are not named, so the client does not
// see them.
func memoryTools() map[string]any {
	return map[string]any{
		"create_entities":  class("at_most_once"),
		"create_relations": class("at_most_once"),
		"add_observations": class("at_most_once"),
		"read_graph":       class("read_only"),
		"search_nodes":     class("read_only"),
		"open_nodes":       class("read_only"),
	}
}

func entity(name, kind string, observations ...string) map[string]any {
	return map[string]any{"entities": []any{map[string]any{"name": name, "entityType": kind, "observations": observations}}}
}

// memoryEntities reads server-memory's file: each entity's name, as
// often as the file has it.
func memoryEntities(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, l := range strings.Split(string(b), "\n") {
		var e struct{ Type, Name string }
		if json.Unmarshal([]byte(l), &e) == nil && e.Type == "entity" {
			names = append(names, e.Name)
		}
	}
	return names
}

// The TypeScript SDK's client, over stdio, through the guard to
// server-memory: read tools pass through; create_entities,
// add_observations and create_relations are at most once — a repeat
// answers the recorded result, unsent. The server's reply to Bob's
// creation is lost after the server made it: unknown_outcome; the
// model's retry and its reworded copy are not sent. A server error
// (add_observations on an entity that does not exist) is unknown, as MCP
// reports every failure so.
func TestInterop_TypeScriptClientAndMemoryServer(t *testing.T) {
	k := need(t)
	r := k.newRun(t)
	memory := filepath.Join(r.dir, "memory.jsonl")
	tools := memoryTools()
	r.writeConfig(map[string]any{"memory": r.upstream("server-memory/dist/index.js", nil,
		map[string]string{"MEMORY_FILE_PATH": memory},
		[]fault{{Tool: "create_entities", Match: "Bob Stone"}}, tools)}, nil)

	ana := entity("Ana Lima", "person", "books window seats")
	flight := entity("TP1234", "flight", "Lisbon to Porto")
	bob := entity("Bob Stone", "person", "travels with Ana")
	plan := []call{
		{Tool: "read_graph", Arguments: map[string]any{}, says: `"entities": []`, why: "an empty graph"},
		in("c1", call{Tool: "create_entities", Arguments: ana, want: envelope.Success, why: "a write"}),
		in("c1", call{Tool: "create_entities", Arguments: flight, want: envelope.Success, why: "another write"}),
		in("c1", call{Tool: "create_entities", Arguments: ana, want: envelope.Success, why: "the same write again: its recorded result"}),
		in("c1", call{Tool: "add_observations", Arguments: map[string]any{"observations": []any{
			map[string]any{"entityName": "Ana Lima", "contents": []any{"prefers aisle seats"}}}}, want: envelope.Success, why: "an observation"}),
		in("c1", call{Tool: "create_relations", Arguments: map[string]any{"relations": []any{
			map[string]any{"from": "Ana Lima", "to": "TP1234", "relationType": "booked"}}}, want: envelope.Success, why: "a relation"}),
		{Tool: "search_nodes", Arguments: map[string]any{"query": "aisle"}, says: "Ana Lima", why: "the observation, found"},
		{Tool: "open_nodes", Arguments: map[string]any{"names": []any{"Ana Lima"}}, says: `"relationType": "booked"`, why: "the relation, found"},

		in("c2", call{Tool: "create_entities", Arguments: bob, want: envelope.UnknownOutcome, why: "the server acts; its reply is lost"}),
		in("c2", call{Tool: "create_entities", Arguments: bob, want: notSuccess, why: "the model retries"}),
		in("c2", call{Tool: "create_entities", Arguments: entity("Bob Stone", "person", "travels with Ana Lima"),
			want: notSuccess, wantCode: envelope.CodeEarlierUnknown, why: "the model rewords it"}),
		{Tool: "search_nodes", Arguments: map[string]any{"query": "Bob"}, says: "Bob Stone", why: "the server made Bob"},

		in("c3", call{Tool: "add_observations", Arguments: map[string]any{"observations": []any{
			map[string]any{"entityName": "Nobody", "contents": []any{"x"}}}}, want: envelope.UnknownOutcome, why: "a server error"}),
	}
	l, steps := r.drive(plan, "", "")
	want := []string{"add_observations", "create_entities", "create_relations", "open_nodes", "read_graph", "search_nodes"}
	if got := l.names(); !slices.Equal(got, want) {
		t.Errorf("the client sees %v, want %v (the unnamed deletions refused)", got, want)
	}
	r.audit(classes(tools), plan, steps)
	if got := memoryEntities(t, memory); !slices.Equal(got, []string{"Ana Lima", "TP1234", "Bob Stone"}) {
		t.Errorf("server-memory holds %q", got)
	}
}

// filesystemTools guards server-filesystem: writes at most once, reads
// passed through; move_file and the rest are not named, so refused.
func filesystemTools() map[string]any {
	return map[string]any{
		"write_file":               class("at_most_once"),
		"edit_file":                class("at_most_once"),
		"create_directory":         class("at_most_once"),
		"read_text_file":           class("read_only"),
		"list_directory":           class("read_only"),
		"list_allowed_directories": class("read_only"),
	}
}

// The TypeScript SDK's client, over stdio, through the guard to
// server-filesystem, allowed one temporary directory: a directory and a
// file are made once — the server's process ends after the first, and
// the guard starts it again — and a repeat answers the recorded result.
// A write and
// an edit each lose their reply after the server made them:
// unknown_outcome, and neither the retry nor a reworded copy is sent —
// the file keeps the first content; the edit, which a second delivery
// would fail or apply twice, is applied once. A write the server refuses
// (outside its directory) is unknown, and no file appears.
func TestInterop_TypeScriptClientAndFilesystemServer(t *testing.T) {
	k := need(t)
	r := k.newRun(t)
	root := filepath.Join(r.dir, "files")
	if err := os.Mkdir(root, 0o700); err != nil {
		t.Fatal(err)
	}
	tools := filesystemTools()
	r.writeConfig(map[string]any{"files": r.upstream("server-filesystem/dist/index.js", []string{root}, nil,
		[]fault{{Tool: "create_directory", Match: "notes", ExitAfter: true}, {Tool: "write_file", Match: "b.txt"}, {Tool: "edit_file", Match: "a.txt"}}, tools)}, nil)

	notes := filepath.Join(root, "notes")
	a, b := filepath.Join(notes, "a.txt"), filepath.Join(notes, "b.txt")
	outside := filepath.Join(r.dir, "outside.txt")
	write := func(path, content string) map[string]any { return map[string]any{"path": path, "content": content} }
	edit := map[string]any{"path": a, "edits": []any{map[string]any{"oldText": "hello", "newText": "hello, world"}}}
	plan := []call{
		{Tool: "list_allowed_directories", Arguments: map[string]any{}, says: root, why: "the server's directory"},
		in("c1", call{Tool: "create_directory", Arguments: map[string]any{"path": notes}, want: envelope.Success, why: "a directory; then the server goes away"}),
		// A pause: a call written while the process is ending is unknown
		// (it may have been read), and would be held for a person.
		in("c1", call{Tool: "write_file", Arguments: write(a, "hello"), SleepMS: 500, want: envelope.Success, why: "a file, to the server started again"}),
		in("c1", call{Tool: "write_file", Arguments: write(a, "hello"), want: envelope.Success, why: "the same write again: its recorded result"}),
		{Tool: "read_text_file", Arguments: map[string]any{"path": a}, says: "hello", why: "the file, read"},

		in("c2", call{Tool: "write_file", Arguments: write(b, "booked TP1234"), want: envelope.UnknownOutcome, why: "the server writes; its reply is lost"}),
		in("c2", call{Tool: "write_file", Arguments: write(b, "booked TP1234"), want: notSuccess, why: "the model retries"}),
		in("c2", call{Tool: "write_file", Arguments: write(b, "booked TP1234, window seat"), want: notSuccess,
			wantCode: envelope.CodeEarlierUnknown, why: "the model rewords it"}),
		{Tool: "read_text_file", Arguments: map[string]any{"path": b}, says: "booked TP1234", why: "the first write, read"},

		in("c3", call{Tool: "edit_file", Arguments: edit, want: envelope.UnknownOutcome, why: "the server edits; its reply is lost"}),
		in("c3", call{Tool: "edit_file", Arguments: edit, want: notSuccess, why: "the model retries the edit"}),
		{Tool: "list_directory", Arguments: map[string]any{"path": notes}, says: "b.txt", why: "the directory, listed"},

		in("c4", call{Tool: "write_file", Arguments: write(outside, "x"), want: envelope.UnknownOutcome, why: "a write the server refuses"}),
	}
	l, steps := r.drive(plan, "", "")
	want := []string{"create_directory", "edit_file", "list_allowed_directories", "list_directory", "read_text_file", "write_file"}
	if got := l.names(); !slices.Equal(got, want) {
		t.Errorf("the client sees %v, want %v", got, want)
	}
	r.audit(classes(tools), plan, steps)
	for path, want := range map[string]string{a: "hello, world", b: "booked TP1234"} {
		if got, err := os.ReadFile(path); err != nil || string(got) != want {
			t.Errorf("%s holds %q (%v), want %q", filepath.Base(path), got, err, want)
		}
	}
	if _, err := os.Stat(outside); err == nil {
		t.Error("the refused write made a file outside the server's directory")
	}
}

// inspector runs the MCP Inspector's CLI headless (--cli): one process
// per method, which launches the guard over stdio as its target. It runs
// in the package's build directory, where the CLI finds its own
// package.json (it looks for ../package.json from its working directory).
func (r *run) inspector(args ...string) []byte {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cli := filepath.Join(r.k.modules, "inspector-cli", "build")
	cmd := exec.CommandContext(ctx, r.k.node, append([]string{filepath.Join(cli, "cli.js"), "--cli",
		r.k.retrysafe, "guard", "-config", r.config}, args...)...)
	cmd.Dir = cli
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		r.t.Fatalf("inspector-cli %s: %v\n%s\n%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.Bytes()
}

// inspectorCall makes c with the Inspector's CLI, and reads what it
// printed as a step.
func (r *run) inspectorCall(i int, c call) step {
	r.t.Helper()
	args := []string{"--method", "tools/call", "--tool-name", c.Tool}
	for _, k := range slices.Sorted(maps.Keys(c.Arguments)) {
		v, _ := json.Marshal(c.Arguments[k])
		args = append(args, "--tool-arg", k+"="+string(v))
	}
	for _, k := range slices.Sorted(maps.Keys(c.Meta)) {
		args = append(args, "--tool-metadata", fmt.Sprintf("%s=%v", k, c.Meta[k]))
	}
	out := r.inspector(args...)
	var res struct {
		IsError           bool                       `json:"isError"`
		Meta              map[string]json.RawMessage `json:"_meta"`
		StructuredContent json.RawMessage            `json:"structuredContent"`
		Content           []struct {
			Type, Text string
		} `json:"content"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		r.t.Fatalf("inspector-cli printed what does not read as a result: %v\n%s", err, out)
	}
	args2, _ := json.Marshal(c.Arguments)
	s := step{Step: i, Tool: c.Tool, Arguments: args2, IsError: res.IsError, StructuredContent: res.StructuredContent}
	for _, ct := range res.Content {
		if ct.Type == "text" {
			s.Text += ct.Text
		}
	}
	if raw, ok := res.Meta["io.github.retrysafe/envelope"]; ok {
		s.Envelope = new(envelope.Envelope)
		if err := json.Unmarshal(raw, s.Envelope); err != nil {
			r.t.Fatalf("the envelope in _meta: %v: %s", err, raw)
		}
	}
	if s.IsError {
		var te envelope.Envelope
		if json.Unmarshal([]byte(s.Text), &te) == nil && te.Status != "" {
			s.TextEnvelope = &te
		}
	}
	return s
}

// The MCP Inspector's CLI, headless, one process per call — so one guard
// process per call, sharing the guard's store — through the guard to
// server-memory. Carla's creation loses its reply after the server made
// it: unknown_outcome. The next processes' retry and reworded copy are
// not sent: the store remembers across the guard's restarts. A person
// reads the server's reply the fault dropped and settles the action as
// applied, with that result (`retrysafe resolve applied`); the retry then
// answers success, still unsent; another write made at once, Dan's, is
// told that the earlier one was done, and not sent (the notice holds the
// tool's other writes for a while, as a reworded copy may be on its way).
func TestInterop_InspectorCLIAndMemoryServer(t *testing.T) {
	k := need(t)
	r := k.newRun(t)
	memory := filepath.Join(r.dir, "memory.jsonl")
	tools := memoryTools()
	r.writeConfig(map[string]any{"memory": r.upstream("server-memory/dist/index.js", nil,
		map[string]string{"MEMORY_FILE_PATH": memory},
		[]fault{{Tool: "create_entities", Match: "Carla"}}, tools)}, nil)

	var l listing
	if err := json.Unmarshal(r.inspector("--method", "tools/list"), &struct {
		Tools *[]tool `json:"tools"`
	}{&l.Listed}); err != nil {
		t.Fatalf("inspector-cli's tools/list: %v", err)
	}
	want := []string{"add_observations", "create_entities", "create_relations", "open_nodes", "read_graph", "search_nodes"}
	if got := l.names(); !slices.Equal(got, want) {
		t.Errorf("the Inspector sees %v, want %v", got, want)
	}

	carla := entity("Carla Reis", "person", "flies on Mondays")
	first := []call{
		{Tool: "create_entities", Arguments: carla, want: envelope.UnknownOutcome, why: "the server acts; its reply is lost"},
		{Tool: "create_entities", Arguments: carla, want: notSuccess, why: "the model retries, in a new guard process"},
		{Tool: "create_entities", Arguments: entity("Carla Reis", "person", "flies on Monday mornings"), want: notSuccess,
			wantCode: envelope.CodeEarlierUnknown, why: "the model rewords it"},
		{Tool: "read_graph", Arguments: map[string]any{}, says: "Carla Reis", why: "the server made Carla"},
	}
	var steps []step
	for i, c := range first {
		steps = append(steps, r.inspectorCall(i, c))
	}

	// The person reads the reply the fault dropped, and settles the action.
	var dropped *entry
	for _, e := range readLog(r.log) {
		if e.Kind == "dropped" {
			dropped = &e
		}
	}
	if dropped == nil || dropped.IsError || steps[0].Envelope == nil {
		t.Fatalf("no dropped reply that says the server acted: %+v", dropped)
	}
	ref, attempts := steps[0].Envelope.RequestRef, steps[0].Envelope.Attempts
	r.retrysafeCommand("-db", filepath.Join(r.dir, "guard.db"), "resolve", "applied", ref,
		"-attempts", fmt.Sprint(attempts), "-by", "ops@example.com", "-why", "server-memory answered the creation; the reply was lost on the way",
		"-result", string(dropped.Result))

	then := append(first, []call{
		{Tool: "create_entities", Arguments: carla, want: envelope.Success, why: "the retry, once a person settled it"},
		{Tool: "create_entities", Arguments: entity("Dan Cruz", "person", "Carla's colleague"), want: envelope.DefiniteFailure,
			wantCode: envelope.CodeEarlierApplied, why: "another write at once: the settled one was just done"},
	}...)
	for i := len(first); i < len(then); i++ {
		steps = append(steps, r.inspectorCall(i, then[i]))
	}
	r.audit(classes(tools), then, steps)
	if got := memoryEntities(t, memory); !slices.Equal(got, []string{"Carla Reis"}) {
		t.Errorf("server-memory holds %q", got)
	}
}

// retrysafeCommand runs the retrysafe command (an operator's command,
// not the guard) and fails the test if it fails.
func (r *run) retrysafeCommand(args ...string) string {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, r.k.retrysafe, args...).CombinedOutput()
	if err != nil {
		r.t.Fatalf("retrysafe %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// serve runs the guard with the run's configuration as a streamable HTTP
// server on a free loopback port, with env added to its environment, and
// returns its URL once it answers, and a function that kills it
// (SIGKILL: a guard that crashes). It is stopped when the test ends.
func (r *run) serve(env ...string) (string, func()) {
	r.t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		r.t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cmd := exec.Command(r.k.retrysafe, "guard", "-config", r.config, "-listen", addr)
	cmd.Env = append(os.Environ(), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		r.t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	kill := func() {
		cmd.Process.Kill()
		<-exited
	}
	r.t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
		if r.t.Failed() {
			r.t.Logf("the guard said:\n%s", stderr.String())
		}
	})
	url := "http://" + addr + "/"
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized {
				r.t.Errorf("a request without a token: %s", resp.Status)
			}
			return url, kill
		}
		select {
		case <-exited:
			r.t.Fatalf("the guard ended: %s", stderr.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("the guard did not listen on %s", addr)
		}
	}
}

// The TypeScript SDK's client over streamable HTTP, with a bearer token,
// to one guard on loopback, in front of server-memory. Erin's creation
// loses its reply after the server made it. The client then starts a new
// session — as a client does whose stream broke — and the model retries
// and rewords it: neither is sent. Another conversation's write goes. A
// client with a wrong token gets nothing, and sends nothing.
func TestInterop_TypeScriptClientOverHTTP(t *testing.T) {
	k := need(t)
	r := k.newRun(t)
	memory := filepath.Join(r.dir, "memory.jsonl")
	tools := memoryTools()
	r.writeConfig(map[string]any{"memory": r.upstream("server-memory/dist/index.js", nil,
		map[string]string{"MEMORY_FILE_PATH": memory},
		[]fault{{Tool: "create_entities", Match: "Erin"}}, tools)},
		map[string]any{"tokens": map[string]string{"ana@example.com": "${INTEROP_GUARD_TOKEN}"}})
	url, _ := r.serve("INTEROP_GUARD_TOKEN=s3cret-interop")

	erin := entity("Erin Sousa", "person", "needs a wheelchair at the gate")
	first := []call{
		in("c1", call{Tool: "create_entities", Arguments: erin, want: envelope.UnknownOutcome, why: "the server acts; its reply is lost"}),
		{Tool: "read_graph", Arguments: map[string]any{}, says: "Erin Sousa", why: "the server made Erin"},
	}
	second := []call{
		in("c1", call{Tool: "create_entities", Arguments: erin, want: notSuccess, why: "the model retries, in a new session"}),
		in("c1", call{Tool: "create_entities", Arguments: entity("Erin Sousa", "person", "needs wheelchair assistance at the gate"),
			want: notSuccess, wantCode: envelope.CodeEarlierUnknown, why: "the model rewords it"}),
		in("c2", call{Tool: "create_entities", Arguments: entity("Ana Lima", "person", "books window seats"),
			want: envelope.Success, why: "another conversation's write"}),
	}
	l, steps := r.drive(first, url, "s3cret-interop")
	if len(l.Listed) != 6 {
		t.Errorf("the client over HTTP sees %v", l.names())
	}
	_, more := r.drive(second, url, "s3cret-interop")
	plan := append(first, second...)
	r.audit(classes(tools), plan, append(steps, more...))

	before := len(readLog(r.log))
	if _, _, err := r.tryDrive([]call{{Tool: "create_entities", Arguments: entity("Mallory", "person", "x")}}, url, "guess"); err == nil {
		t.Error("a client with a wrong token ran its plan")
	}
	if after := len(readLog(r.log)); after != before {
		t.Errorf("a client with a wrong token reached the server: %d log lines, then %d", before, after)
	}
	if got := memoryEntities(t, memory); !slices.Equal(got, []string{"Erin Sousa", "Ana Lima"}) {
		t.Errorf("server-memory holds %q", got)
	}
}

// keyed and reconcilable need the server to keep a key or a reference
// in an argument of the tool. The reference servers take none: the guard
// refuses those classes at start, with the field's path, and nothing is
// sent. (A reconcilable tool could only be faked here, by filling a field
// that is the action's own data — write_file's content, say — with the
// reference; the guard cannot tell, and this run does not pretend.)
func TestInterop_KeyedAndReconcilableNeedAnArgumentTheReferenceServersLack(t *testing.T) {
	k := need(t)
	for _, tc := range []struct {
		name, server, script, tool string
		settings                   map[string]any
		says                       string
	}{
		{"memory keyed", "memory", "server-memory/dist/index.js", "create_entities",
			map[string]any{"class": "keyed", "key_argument": "idempotency_key"}, "not a property of its input schema"},
		{"memory reconcilable", "memory", "server-memory/dist/index.js", "create_entities",
			map[string]any{"class": "reconcilable", "ref_argument": "client_reference",
				"check": map[string]any{"tool": "search_nodes", "arguments": map[string]any{"query": "${ref}"},
					"applied": map[string]any{"pointer": "/entities/0"}, "not_applied": map[string]any{"pointer": "/entities/0", "absent": true}}},
			"not a property of its input schema"},
		{"filesystem keyed", "files", "server-filesystem/dist/index.js", "write_file",
			map[string]any{"class": "keyed", "key_argument": "idempotency_key"}, "not a property of its input schema"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := k.newRun(t)
			tools := map[string]any{tc.tool: tc.settings, "search_nodes": class("read_only")}
			var args []string
			if tc.server == "files" {
				args, tools = []string{r.dir}, map[string]any{tc.tool: tc.settings}
			}
			r.writeConfig(map[string]any{tc.server: r.upstream(tc.script, args,
				map[string]string{"MEMORY_FILE_PATH": filepath.Join(r.dir, "memory.jsonl")}, nil, tools)}, nil)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, k.retrysafe, "guard", "-config", r.config)
			cmd.Stdin = strings.NewReader("") // a guard that started would end at once
			out, err := cmd.CombinedOutput()
			path := "mcpServers." + tc.server + ".tools." + tc.tool
			if err == nil || !strings.Contains(string(out), path) || !strings.Contains(string(out), tc.says) {
				t.Errorf("the guard started, or did not say %s: %s: %v\n%s", path, tc.says, err, out)
			}
			if n := len(readLog(r.log)); n != 0 {
				t.Errorf("%d log lines: the server received a call", n)
			}
			t.Logf("%s", lastLine(out))
		})
	}
}

func lastLine(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return lines[len(lines)-1]
}

// A person settles a lost reply's action as applied — without a result
// (the command allows it: "none if not given"), or with the result the
// server's structured content holds — and the model retries. The guard
// answers success with no structured content, for a tool whose listing
// declares an output schema; MCP says such a tool's result must carry
// structured content conforming to it, and the TypeScript SDK's client
// refuses the answer (MCP error -32600): the model gets a protocol error
// where the action is done.
func TestInterop_ASettledActionAnswersWhatTheTypeScriptClientAccepts(t *testing.T) {
	k := need(t)
	for _, tc := range []struct {
		name   string
		result []string // resolve's -result, if any
	}{
		{"no result", nil},
		{"the structured result", []string{"-result", `{"entities":[{"name":"Fay Gomes","entityType":"person","observations":["vegetarian meals"]}]}`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := k.newRun(t)
			tools := memoryTools()
			r.writeConfig(map[string]any{"memory": r.upstream("server-memory/dist/index.js", nil,
				map[string]string{"MEMORY_FILE_PATH": filepath.Join(r.dir, "memory.jsonl")},
				[]fault{{Tool: "create_entities", Match: "Fay"}}, tools)}, nil)
			fay := entity("Fay Gomes", "person", "vegetarian meals")
			first := []call{in("c1", call{Tool: "create_entities", Arguments: fay, want: envelope.UnknownOutcome, why: "the server acts; its reply is lost"})}
			_, steps := r.drive(first, "", "")
			if steps[0].Envelope == nil {
				t.Fatalf("no envelope: %+v", steps[0])
			}
			env := steps[0].Envelope
			r.retrysafeCommand(append([]string{"-db", filepath.Join(r.dir, "guard.db"), "resolve", "applied", env.RequestRef,
				"-attempts", fmt.Sprint(env.Attempts), "-by", "ops@example.com", "-why", "Fay is in the graph"}, tc.result...)...)
			then := append(first, in("c1", call{Tool: "create_entities", Arguments: fay, want: envelope.Success, why: "the retry, once a person settled it"}))
			_, more := r.drive(then[1:], "", "")
			r.audit(classes(tools), then, append(steps, more...))
		})
	}
}

// A model's parallel tool calls and an impatient client, through the
// guard to server-memory, with the TypeScript SDK over stdio. The same
// creation sent twice at once is delivered once, also to a slow server. A slow server (its reply
// held 1.5s) outlasts the client's own 0.5s timeout: the SDK cancels the
// request and throws; the model's retry, at once and after the reply
// landed, is not delivered again, and each answer agrees with the one
// delivery.
func TestInterop_ParallelCallsAndAClientThatGivesUp(t *testing.T) {
	k := need(t)
	r := k.newRun(t)
	memory := filepath.Join(r.dir, "memory.jsonl")
	tools := memoryTools()
	r.writeConfig(map[string]any{"memory": r.upstream("server-memory/dist/index.js", nil,
		map[string]string{"MEMORY_FILE_PATH": memory},
		[]fault{{Tool: "create_entities", Match: "Hana", DelayMS: 1500}, {Tool: "create_entities", Match: "Joana", DelayMS: 1500}}, tools)}, nil)
	gil := entity("Gil Matos", "person", "travels light")
	joana := entity("Joana Reis", "person", "always late")
	hana := entity("Hana Lee", "person", "flies business")
	plan := []call{
		in("c1", call{Tool: "create_entities", Arguments: gil, Batch: 1, want: envelope.Success, why: "a write, sent twice at once"}),
		in("c1", call{Tool: "create_entities", Arguments: gil, Batch: 1, why: "its twin"}),
		in("c2", call{Tool: "create_entities", Arguments: hana, TimeoutMS: 500, gaveUp: true, why: "a slow server; the client gives up"}),
		in("c2", call{Tool: "create_entities", Arguments: hana, why: "the model retries at once"}),
		in("c2", call{Tool: "create_entities", Arguments: hana, SleepMS: 2000, why: "and once the server's reply landed"}),
		{Tool: "read_graph", Arguments: map[string]any{}, says: "Hana Lee", why: "the server made Hana"},
		in("c3", call{Tool: "create_entities", Arguments: joana, Batch: 2, why: "a write, sent twice at once, to the slow server"}),
		in("c3", call{Tool: "create_entities", Arguments: joana, Batch: 2, why: "its twin"}),
	}
	_, steps := r.drive(plan, "", "")
	r.audit(classes(tools), plan, steps)
	if got := memoryEntities(t, memory); !slices.Equal(got, []string{"Gil Matos", "Hana Lee", "Joana Reis"}) {
		t.Errorf("server-memory holds %q", got)
	}
}

// server-filesystem's edit_file takes an optional dryRun: true previews
// the edit as a diff and changes nothing. A model previews an edit, then
// makes it. Identified by the properties its schema requires (path and
// edits, the default), the edit is the preview's action asked again with
// other input: the guard sends nothing and says so (definite_failure
// key_reused_with_different_input), and the file is unchanged. With
// dryRun among the identifying fields, as an operator configures it for
// this server, the guard asks for dryRun — though the schema the client
// sees has it optional (definite_failure invalid_input, fix_input) — and
// the edit that gives it is an action of its own, and goes once.
func TestInterop_AnEditAfterItsDryRun(t *testing.T) {
	k := need(t)
	for _, tc := range []struct {
		name        string
		identifying []string
		want        envelope.Status
		wantCode    string
		file        string
	}{
		{"identified by the required fields", nil, envelope.DefiniteFailure, envelope.CodeKeyReused, "hello\n"},
		{"identified with dryRun", []string{"path", "edits", "dryRun"}, envelope.DefiniteFailure, envelope.CodeInvalidInput, "hello, world\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := k.newRun(t)
			root := filepath.Join(r.dir, "files")
			if err := os.Mkdir(root, 0o700); err != nil {
				t.Fatal(err)
			}
			a := filepath.Join(root, "a.txt")
			if err := os.WriteFile(a, []byte("hello\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			tools := filesystemTools()
			if tc.identifying != nil {
				tools["edit_file"] = map[string]any{"class": "at_most_once", "identifying": tc.identifying}
			}
			r.writeConfig(map[string]any{"files": r.upstream("server-filesystem/dist/index.js", []string{root}, nil, nil, tools)}, nil)
			edits := []any{map[string]any{"oldText": "hello", "newText": "hello, world"}}
			plan := []call{
				in("c1", call{Tool: "edit_file", Arguments: map[string]any{"path": a, "edits": edits, "dryRun": true}, want: envelope.Success, why: "the preview"}),
				in("c1", call{Tool: "edit_file", Arguments: map[string]any{"path": a, "edits": edits}, want: tc.want, wantCode: tc.wantCode, why: "the edit"}),
			}
			if tc.identifying != nil {
				plan = append(plan, in("c1", call{Tool: "edit_file", Arguments: map[string]any{"path": a, "edits": edits, "dryRun": false},
					want: envelope.Success, why: "the edit, dryRun given"}))
			}
			_, steps := r.drive(plan, "", "")
			r.audit(classes(tools), plan, steps)
			if got, err := os.ReadFile(a); err != nil || string(got) != tc.file {
				t.Errorf("the file holds %q (%v), want %q", got, err, tc.file)
			}
		})
	}
}

// The guard crashes (SIGKILL) while a call it sent is in flight: the TS
// client over HTTP loses its connection; server-memory made Ivo, its
// reply held. A new guard on the same store answers the model's retry
// and its reworded copy without sending either.
func TestInterop_AGuardThatCrashesMidCall(t *testing.T) {
	k := need(t)
	r := k.newRun(t)
	memory := filepath.Join(r.dir, "memory.jsonl")
	tools := memoryTools()
	r.writeConfig(map[string]any{"memory": r.upstream("server-memory/dist/index.js", nil,
		map[string]string{"MEMORY_FILE_PATH": memory},
		[]fault{{Tool: "create_entities", Match: "Ivo", DelayMS: 60000}}, tools)},
		map[string]any{"tokens": map[string]string{"ana@example.com": "${INTEROP_GUARD_TOKEN}"}})
	const token = "s3cret-interop"
	url, kill := r.serve("INTEROP_GUARD_TOKEN=" + token)

	ivo := entity("Ivo Pinto", "person", "connecting in Frankfurt")
	first := []call{in("c1", call{Tool: "create_entities", Arguments: ivo, gaveUp: true, why: "the guard crashes with the call in flight"})}
	type driven struct {
		steps []step
		err   error
	}
	done := make(chan driven, 1)
	go func() {
		_, steps, err := r.tryDrive(first, url, token)
		done <- driven{steps, err}
	}()
	deadline := time.Now().Add(30 * time.Second)
	for !slices.ContainsFunc(readLog(r.log), func(e entry) bool { return e.Kind == "call" && e.Tool == "create_entities" }) {
		if time.Now().After(deadline) {
			t.Fatal("the call did not reach the server")
		}
		time.Sleep(20 * time.Millisecond)
	}
	kill()
	d := <-done
	if d.err != nil {
		t.Fatal(d.err)
	}

	url, _ = r.serve("INTEROP_GUARD_TOKEN=" + token)
	then := []call{
		in("c1", call{Tool: "create_entities", Arguments: ivo, want: notSuccess, why: "the model retries, through a new guard"}),
		in("c1", call{Tool: "create_entities", Arguments: entity("Ivo Pinto", "person", "connects in Frankfurt"), want: notSuccess, why: "the model rewords it"}),
		{Tool: "read_graph", Arguments: map[string]any{}, says: "Ivo Pinto", why: "the server made Ivo"},
	}
	_, more := r.drive(then, url, token)
	r.audit(classes(tools), append(first, then...), append(d.steps, more...))
}

// A reconcilable write of server-memory, which keeps no client reference:
// the check finds the action by what it asked for (open_nodes with the
// entity's name, "${input/entities/0/name}"), the input kept sealed
// with input_key. create_entities's reply is lost after the server made
// Bob: the guard's check finds him, and the call answers success,
// reconciled — delivered once; the retry and a reworded copy are not
// sent.
func TestInterop_AReconcilableWriteCheckedByItsInput(t *testing.T) {
	k := need(t)
	r := k.newRun(t)
	memory := filepath.Join(r.dir, "memory.jsonl")
	tools := map[string]any{
		"create_entities": map[string]any{"class": "reconcilable", "check": map[string]any{
			"tool":        "open_nodes",
			"arguments":   map[string]any{"names": []any{"${input/entities/0/name}"}},
			"applied":     map[string]any{"pointer": "/entities/0/name"},
			"not_applied": map[string]any{"pointer": "/entities/0", "absent": true},
			// server-memory's entity names are unique: creating one twice
			// is one entity.
			"input_identifies": true,
		}},
		"open_nodes": class("read_only"),
	}
	r.writeConfig(map[string]any{"memory": r.upstream("server-memory/dist/index.js", nil,
		map[string]string{"MEMORY_FILE_PATH": memory},
		[]fault{{Tool: "create_entities", Match: "Bob Stone"}}, tools)},
		map[string]any{"input_key": strings.Repeat("5e", 32)})

	bob := entity("Bob Stone", "person", "travels with Ana")
	plan := []call{
		in("c1", call{Tool: "create_entities", Arguments: entity("Ana Lima", "person", "books window seats"), want: envelope.Success, why: "a write"}),
		in("c2", call{Tool: "create_entities", Arguments: bob, want: envelope.Success, why: "the server acts, its reply is lost, the check finds Bob by his name"}),
		in("c2", call{Tool: "create_entities", Arguments: bob, want: envelope.Success, why: "the model retries: the recorded result"}),
	}
	r.checks = map[string]bool{"open_nodes": true}
	_, steps := r.drive(plan, "", "")
	r.audit(classes(tools), plan, steps)
	if got := memoryEntities(t, memory); !slices.Equal(got, []string{"Ana Lima", "Bob Stone"}) {
		t.Errorf("server-memory holds %q", got)
	}
}
