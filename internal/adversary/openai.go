package adversary

import (
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/retrysafe/retrysafe/envelope"
)

// WireKey is the API key a [Model] accepts.
const WireKey = "test-key"

// Move is what the adversarial model means by one tool call.
type Move string

// The moves of a [Model].
const (
	// Same: the action again — identical, or restated (case, white space,
	// order, null and empty members, another case of the tool's name).
	// It must be replayed or refused.
	Same Move = "same"
	// Reworded: the action in other words, sent only while its outcome is
	// unknown. It must be held back until the first is settled.
	Reworded Move = "reworded"
	// Malformed: input that is not the tool's (truncated JSON, the object
	// inside a string or an array, a key of the model's own, members that
	// do not exist). It must be refused.
	Malformed Move = "malformed"
	// Pasted: the action with a request reference the model read pasted
	// back into it, or the reference alone. It must be refused.
	Pasted Move = "pasted"
	// NoSuchTool: a call of a tool the model was not offered.
	NoSuchTool Move = "no_such_tool"
)

// Exchange is one tool call of a [Model] and the result it read.
type Exchange struct {
	Turn   int    // the assistant message that made the call, from 1
	CallID string // the call's id, unique in the conversation
	Tool   string // the name the model called
	Args   string // the arguments, as sent
	Move   Move
	Action int // the plan the call is about (an index of the model's plans), or -1
	// Read reports whether the model has read the call's result; Result
	// is that result, and Envelope the result read as an envelope (nil if
	// it is not one).
	Read     bool
	Result   string
	Envelope *envelope.Envelope
}

// Model is an adversarial model behind OpenAI's Chat Completions wire
// format, for one conversation: the example agents' -llm openai path
// talks to it as to a real model (POST /v1/chat/completions, bearer key
// [WireKey]). Each assistant message it sends carries several tool calls
// at once (parallel tool calls), chosen with seeded randomness from the
// restatements of its plans ([Plan.Variants]) and from what is not the
// tool's input at all (see [Move]); before each message it reads the tool
// results of the request and acts on them as a model does: after an
// unknown outcome it rewords the action and resends it identically, in
// that message and the next; it pastes back every request reference it
// reads; it fixes its input after a refusal; once it has read that the
// action succeeded it never rewords it again. It answers in words when it
// has nothing left to send, or after MaxTurns messages. It keeps every
// call and the result it read ([Model.Log]).
//
// A Model is safe for concurrent use; requests are served one at a time.
type Model struct {
	mu    sync.Mutex
	mind  *mind
	log   []Exchange
	byID  map[string]int // call id → index in log
	turns int
	fault []string // what the model found wrong with the requests it was sent
}

// ModelOptions configure a [Model]. The zero value of each field means
// its default.
type ModelOptions struct {
	// Seed makes the model's choices: the same seed, plans and results
	// make the same calls.
	Seed uint64
	// PerTurn is about how many calls of its repertoire the model puts in
	// one message, besides those it makes in answer to what it read;
	// 0 means 8.
	PerTurn int
	// MaxTurns is how many messages with tool calls the model sends at
	// most; 0 means 16.
	MaxTurns int
	// RewordAtOnce makes the first message carry each action twice: as
	// planned and reworded, before the model has read anything. It is one
	// action only if the first call's outcome is unknown; after a success
	// the reworded copy is a second action (the tool cannot tell a copy in
	// other words from another email).
	RewordAtOnce bool
}

// NewModel returns a model that asks for the plans' actions (one plan per
// tool), the first of each in its first message.
func NewModel(opts ModelOptions, plans ...Plan) *Model {
	if len(plans) == 0 {
		panic("adversary: a model needs at least one plan")
	}
	if opts.PerTurn == 0 {
		opts.PerTurn = 8
	}
	if opts.MaxTurns == 0 {
		opts.MaxTurns = 16
	}
	rng := rand.New(rand.NewPCG(opts.Seed, 0x5eed))
	mind := newMind(plans, rng, opts.PerTurn, opts.MaxTurns)
	mind.rewordAtOnce = opts.RewordAtOnce
	return &Model{mind: mind, byID: map[string]int{}}
}

// Start serves m on a free port of 127.0.0.1 until the test ends, and
// returns the environment of an example's -llm openai path
// (OPENAI_API_KEY, OPENAI_BASE_URL, OPENAI_MODEL) pointing at it.
func (m *Model) Start(t testing.TB) func(string) string {
	srv := httptest.NewServer(m) // 127.0.0.1 unless -httptest.serve says otherwise
	t.Cleanup(srv.Close)
	env := map[string]string{"OPENAI_API_KEY": WireKey, "OPENAI_BASE_URL": srv.URL + "/v1", "OPENAI_MODEL": "adversary"}
	return func(k string) string { return env[k] }
}

// Log returns every call the model made, in order, with what it read.
func (m *Model) Log() []Exchange {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.log)
}

// Turns returns how many assistant messages the model has sent.
func (m *Model) Turns() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.turns
}

// Faults returns what the model found wrong with the requests it was
// sent: tool results it never asked for, calls left unanswered.
func (m *Model) Faults() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.fault)
}

// ServeHTTP implements http.Handler.
func (m *Model) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/chat/completions" || r.Header.Get("Authorization") != "Bearer "+WireKey {
		http.Error(w, `{"error":{"message":"not found"}}`, http.StatusNotFound)
		return
	}
	body, _ := io.ReadAll(io.LimitReader(r.Body, 16<<20))
	var req struct {
		Model    string `json:"model"`
		Messages []struct {
			Role       string          `json:"role"`
			ToolCallID string          `json:"tool_call_id"`
			Content    json.RawMessage `json:"content"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		http.Error(w, `{"error":{"message":"the request is not JSON"}}`, http.StatusBadRequest)
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var read []Exchange // the results read for the first time, in the request's order
	for _, msg := range req.Messages {
		if msg.Role != "tool" {
			continue
		}
		i, ok := m.byID[msg.ToolCallID]
		switch {
		case !ok:
			m.fault = append(m.fault, fmt.Sprintf("turn %d: a tool result for call %q, which the model never made", m.turns+1, msg.ToolCallID))
			continue
		case m.log[i].Read:
			continue
		}
		x := &m.log[i]
		x.Read, x.Result = true, strings.TrimSpace(content(msg.Content))
		if env, err := envelope.Parse([]byte(x.Result)); err == nil {
			x.Envelope = &env
		}
		read = append(read, *x)
	}
	for _, x := range m.log {
		if x.Turn == m.turns && !x.Read { // the loop answers every call of a message before asking again

			m.fault = append(m.fault, fmt.Sprintf("turn %d: call %s (%s %s) of turn %d was not answered", m.turns+1, x.CallID, x.Tool, x.Args, x.Turn))
		}
	}
	calls, text := m.mind.next(m.turns+1, read)
	message := map[string]any{"role": "assistant", "content": text, "refusal": nil}
	finish := "stop"
	if len(calls) > 0 {
		m.turns++
		var tc []any
		for i, c := range calls {
			id := fmt.Sprintf("call_%d_%d", m.turns, i)
			m.byID[id] = len(m.log)
			m.log = append(m.log, Exchange{Turn: m.turns, CallID: id, Tool: c.tool, Args: c.args, Move: c.move, Action: c.action})
			tc = append(tc, map[string]any{"id": id, "type": "function", "function": map[string]any{"name": c.tool, "arguments": c.args}})
		}
		message = map[string]any{"role": "assistant", "content": nil, "refusal": nil, "tool_calls": tc}
		finish = "tool_calls"
	}
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.Encode(map[string]any{
		"id": fmt.Sprintf("chatcmpl-%d", m.turns), "object": "chat.completion", "created": 1, "model": req.Model,
		"choices": []any{map[string]any{"index": 0, "message": message, "finish_reason": finish, "logprobs": nil}},
		"usage":   map[string]any{"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
	})
}

// content reads a message's content: a string, or a list of text parts.
func content(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var parts []struct{ Type, Text string }
	json.Unmarshal(raw, &parts)
	var b strings.Builder
	for _, p := range parts {
		if p.Type == "text" {
			b.WriteString(p.Text)
		}
	}
	return b.String()
}
