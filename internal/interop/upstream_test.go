package interop

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The counting wrapper: this test binary, run by the guard as an
// upstream's command with asUpstream set, starts the real server (its
// arguments: node .../dist/index.js ...) and copies the JSON-RPC lines of
// stdio both ways. Every tools/call it forwards is a line in the log
// ($INTEROP_LOG), written before the request goes on; every reply to one
// is a line too, written before the reply goes back. The log is shared by
// every process the guard starts, so it counts deliveries across restarts.
//
// $INTEROP_DROP, a JSON list of faults ({"tool", "match", "nth"}), drops
// the server's reply to the nth delivery (counted in the log) of the tool
// whose arguments contain match, once the server has answered it — the
// server acted — and then ends the server and the wrapper: the guard sees
// the connection end with its call in flight. A fault with delay_ms holds
// the reply that long instead, and then relays it: a slow server. One
// with exit_after relays the reply, and then ends the server and the
// wrapper: a server that goes away between calls.
const (
	asUpstream = "RETRYSAFE_INTEROP_AS_UPSTREAM"
	logEnv     = "INTEROP_LOG"
	dropEnv    = "INTEROP_DROP"
)

// entry is a line of the log.
type entry struct {
	// Kind is "call" (a tools/call forwarded), "reply" (the server's
	// reply to one, relayed), "dropped" (the reply the fault dropped) or
	// "undelivered" (a call the server's pipe refused).
	Kind      string          `json:"kind"`
	PID       int             `json:"pid"`
	ID        json.RawMessage `json:"id"`
	Tool      string          `json:"tool,omitempty"`
	Arguments json.RawMessage `json:"arguments,omitempty"`
	IsError   bool            `json:"isError,omitempty"`  // a reply: the result's isError
	RPCError  bool            `json:"rpcError,omitempty"` // a reply: a JSON-RPC error
	Result    json.RawMessage `json:"result,omitempty"`   // a dropped reply: the server's result, for an operator to read
}

// fault is $INTEROP_DROP.
type fault struct {
	Tool      string `json:"tool"`
	Match     string `json:"match"`
	Nth       int    `json:"nth"`
	DelayMS   int    `json:"delay_ms,omitempty"`
	ExitAfter bool   `json:"exit_after,omitempty"`
}

// message is what the wrapper reads of a JSON-RPC message.
type message struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	} `json:"params"`
	Result json.RawMessage `json:"result"`
	Error  json.RawMessage `json:"error"`
}

// isError reports whether a reply's result says isError.
func (m message) isError() bool {
	var r struct {
		IsError bool `json:"isError"`
	}
	return json.Unmarshal(m.Result, &r) == nil && r.IsError
}

// messages reads a line as one message or a batch.
func messages(line []byte) []message {
	line = bytes.TrimSpace(line)
	if len(line) > 0 && line[0] == '[' {
		var batch []message
		if json.Unmarshal(line, &batch) == nil {
			return batch
		}
		return nil
	}
	var m message
	if json.Unmarshal(line, &m) != nil {
		return nil
	}
	return []message{m}
}

// idKey is a JSON-RPC id as a map key.
func idKey(id json.RawMessage) string {
	var b bytes.Buffer
	if json.Compact(&b, id) != nil {
		return string(id)
	}
	return b.String()
}

// wrapper is one run of the counting wrapper.
type wrapper struct {
	log    *os.File
	faults []fault
	pid    int

	mu      sync.Mutex
	pending map[string]bool  // ids of tools/call requests forwarded
	faulty  map[string]fault // ids whose reply a fault drops or holds

	outMu sync.Mutex // writes to the guard
}

// runUpstream runs the counting wrapper around the server command args,
// and returns the exit code.
func runUpstream(args []string) int {
	fail := func(format string, a ...any) int {
		fmt.Fprintf(os.Stderr, "interop upstream: "+format+"\n", a...)
		return 2
	}
	if len(args) == 0 {
		return fail("no server command")
	}
	logf, err := os.OpenFile(os.Getenv(logEnv), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return fail("$%s: %v", logEnv, err)
	}
	w := &wrapper{log: logf, pid: os.Getpid(), pending: map[string]bool{}, faulty: map[string]fault{}}
	if spec := os.Getenv(dropEnv); spec != "" {
		if err := json.Unmarshal([]byte(spec), &w.faults); err != nil {
			return fail("$%s: %v", dropEnv, err)
		}
	}
	server := exec.Command(args[0], args[1:]...)
	server.Stderr = os.Stderr
	toServer, err := server.StdinPipe()
	if err != nil {
		return fail("%v", err)
	}
	fromServer, err := server.StdoutPipe()
	if err != nil {
		return fail("%v", err)
	}
	if err := server.Start(); err != nil {
		return fail("starting the server: %v", err)
	}
	// A wrapper told to stop stops its server too.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, os.Interrupt)
	go func() {
		<-sig
		server.Process.Kill()
		os.Exit(1)
	}()
	go w.up(toServer, server)
	code := w.down(fromServer, server)
	return code
}

// up copies the guard's lines to the server, logging each tools/call
// before it goes on. When the guard closes stdin, so does the server's.
func (w *wrapper) up(toServer io.WriteCloser, server *exec.Cmd) {
	r := bufio.NewReader(os.Stdin)
	for {
		line, err := r.ReadBytes('\n')
		if len(line) > 0 {
			var calls []message
			for _, m := range messages(line) {
				if m.Method == "tools/call" && len(m.ID) > 0 {
					calls = append(calls, m)
					w.record(entry{Kind: "call", ID: m.ID, Tool: m.Params.Name, Arguments: m.Params.Arguments})
					w.mu.Lock()
					w.pending[idKey(m.ID)] = true
					if f, ok := w.fires(m); ok {
						w.faulty[idKey(m.ID)] = f
					}
					w.mu.Unlock()
				}
			}
			if _, werr := toServer.Write(line); werr != nil {
				for _, m := range calls {
					w.record(entry{Kind: "undelivered", ID: m.ID, Tool: m.Params.Name})
				}
				server.Process.Kill()
				return
			}
		}
		if err != nil {
			toServer.Close()
			// A server that does not end on its own within a bound is ended.
			time.AfterFunc(5*time.Second, func() { server.Process.Kill() })
			return
		}
	}
}

// fires returns the fault that drops or holds the reply to m, if one
// does: the nth delivery of its tool with match in its arguments,
// counting this one.
func (w *wrapper) fires(m message) (fault, bool) {
	for _, f := range w.faults {
		if m.Params.Name != f.Tool || !strings.Contains(string(m.Params.Arguments), f.Match) {
			continue
		}
		n := 0
		for _, e := range readLog(os.Getenv(logEnv)) {
			if e.Kind == "call" && e.Tool == f.Tool && strings.Contains(string(e.Arguments), f.Match) {
				n++
			}
		}
		if n == max(f.Nth, 1) {
			return f, true
		}
	}
	return fault{}, false
}

// down copies the server's lines to the guard, logging each reply to a
// tools/call before it goes back; a reply a fault drops ends the server
// and the wrapper instead, one it holds goes back later. It returns the
// wrapper's exit code.
func (w *wrapper) down(fromServer io.Reader, server *exec.Cmd) int {
	r := bufio.NewReader(fromServer)
	for {
		line, err := r.ReadBytes('\n')
		held := false
		if len(line) > 0 {
			for _, m := range messages(line) {
				if m.Method != "" || len(m.ID) == 0 {
					continue
				}
				k := idKey(m.ID)
				w.mu.Lock()
				isCall := w.pending[k]
				f, faulty := w.faulty[k]
				delete(w.pending, k)
				w.mu.Unlock()
				if !isCall {
					continue
				}
				e := entry{Kind: "reply", ID: m.ID, RPCError: len(m.Error) > 0, IsError: m.isError()}
				switch {
				case faulty && f.DelayMS > 0:
					held = true
					go func(line []byte) {
						time.Sleep(time.Duration(f.DelayMS) * time.Millisecond)
						w.record(e)
						w.relay(line, server)
					}(line)
				case faulty && f.ExitAfter:
					w.record(e)
					w.relay(line, server)
					server.Process.Kill()
					server.Wait()
					return 0
				case faulty:
					e.Kind, e.Result = "dropped", m.Result
					w.record(e)
					// The server acted and answered; the guard hears
					// nothing but the connection's end.
					server.Process.Kill()
					server.Wait()
					return 0
				default:
					w.record(e)
				}
			}
			if !held {
				w.relay(line, server)
			}
		}
		if err != nil {
			if err := server.Wait(); err != nil {
				return 1
			}
			return 0
		}
	}
}

// relay writes a line of the server's to the guard; a guard that is gone
// ends the server and the wrapper.
func (w *wrapper) relay(line []byte, server *exec.Cmd) {
	w.outMu.Lock()
	defer w.outMu.Unlock()
	if _, err := os.Stdout.Write(line); err != nil {
		server.Process.Kill()
		os.Exit(1)
	}
}

// record appends e to the log: one write, so lines of several processes
// do not mix.
func (w *wrapper) record(e entry) {
	e.PID = w.pid
	b, _ := json.Marshal(e)
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, err := w.log.Write(append(b, '\n')); err != nil {
		fmt.Fprintf(os.Stderr, "interop upstream: writing the log: %v\n", err)
		os.Exit(2)
	}
}

// readLog reads the wrapper's log.
func readLog(path string) []entry {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var es []entry
	for _, l := range bytes.Split(b, []byte{'\n'}) {
		var e entry
		if len(bytes.TrimSpace(l)) > 0 && json.Unmarshal(l, &e) == nil {
			es = append(es, e)
		}
	}
	return es
}
