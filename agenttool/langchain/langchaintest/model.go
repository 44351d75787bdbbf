package langchaintest

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/tmc/langchaingo/llms"
)

// Model is a scripted llms.Model: each request of the agent plays the next
// turn of its script. Build one with [New] or [Func].
//
// A Model is safe for concurrent use: requests are played one at a time,
// one turn each, in the order they arrive, and [Model.Results] and
// [Model.Err] may be called at any time, also from a Check or a [Func]
// script.
type Model struct {
	turns []Turn                               // the script of New
	next  func(results []string) (Turn, error) // the script of Func

	play sync.Mutex // held while a turn is played: turns are played one at a time

	mu        sync.Mutex // guards the fields below
	asked     int        // turns the agent asked for
	played    int        // turns played
	lastFinal bool       // the last turn played was the final answer
	lastTurn  Turn       // the last turn played
	results   []string   // tool results read, in order
	err       error      // the first failure
}

var _ llms.Model = (*Model)(nil)

// New returns a model that plays turns in order, one per request, and
// fails a request beyond the last one with [ErrUnexpectedTurn].
func New(turns ...Turn) *Model { return &Model{turns: slices.Clone(turns)} }

// Func returns a model that plays an adaptive script: for each request,
// next gets the tool results of the conversation so far (usually guarded
// tools' envelopes, for envelope.Parse), oldest first, and returns the turn
// to play. An error from next fails the request with [ErrUnexpectedTurn]
// and the error, and Check runs on the returned turn as it would on one of
// [New]. The script has been played to its end once it has returned a
// final answer.
func Func(next func(results []string) (Turn, error)) *Model { return &Model{next: next} }

// GenerateContent plays the next turn: it reads the tool results in
// messages, runs the turn's Check on the one read at this turn, makes sure
// a scripted call names a tool the call options offer, and answers with the
// call or the final answer. It answers an error wrapping
// [ErrUnexpectedTurn] or [ErrCheckFailed] if the turn cannot be played as
// scripted, and the same error for every request after it.
func (m *Model) GenerateContent(ctx context.Context, messages []llms.MessageContent, opts ...llms.CallOption) (*llms.ContentResponse, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.play.Lock()
	defer m.play.Unlock()
	conv := readConversation(messages)

	m.mu.Lock()
	if err := m.err; err != nil {
		m.mu.Unlock()
		return nil, fmt.Errorf("langchaintest: an earlier turn failed, so the script stops: %w", err)
	}
	m.asked++
	n := m.asked
	m.results = append(m.results, conv.read()...)
	m.mu.Unlock()

	t, err := m.turn(n, conv, opts)
	m.mu.Lock()
	defer m.mu.Unlock()
	if err != nil {
		m.err = err
		return nil, err
	}
	m.played = n
	m.lastFinal = t.Tool == ""
	m.lastTurn = t

	choice := &llms.ContentChoice{Content: t.Answer, StopReason: "stop"}
	if t.Tool != "" {
		choice.StopReason = "tool_calls"
		choice.ToolCalls = []llms.ToolCall{{
			ID:           fmt.Sprintf("call_%d", n),
			Type:         "function",
			FunctionCall: &llms.FunctionCall{Name: t.Tool, Arguments: t.Args},
		}}
	}
	return &llms.ContentResponse{Choices: []*llms.ContentChoice{choice}}, nil
}

// turn decides turn n and checks it against what the model read and the
// tools it is offered.
func (m *Model) turn(n int, conv conversation, opts []llms.CallOption) (Turn, error) {
	var t Turn
	if m.next == nil {
		if n > len(m.turns) {
			return Turn{}, fmt.Errorf("langchaintest: the agent asked for turn %d, but the script holds %s (%s)%s; "+
				"add a turn for it, or find out why the agent did not stop: %w",
				n, count(len(m.turns), "turn"), outline(m.turns), lastRead(conv), ErrUnexpectedTurn)
		}
		t = m.turns[n-1]
	} else {
		var err error
		if t, err = m.next(slices.Clone(conv.results)); err != nil {
			return Turn{}, fmt.Errorf("langchaintest: turn %d: the script has no turn for what the model read%s: %w: %w",
				n, lastRead(conv), ErrUnexpectedTurn, err)
		}
	}
	if t.Check != nil {
		result, ok := conv.last()
		if !ok {
			return Turn{}, fmt.Errorf("langchaintest: turn %d (%s) has a Check, but the model read no tool result at that turn; "+
				"a Check runs on the result of the previous turn's call, so move it there: %w", n, t, ErrCheckFailed)
		}
		if err := t.Check(result); err != nil {
			return Turn{}, fmt.Errorf("langchaintest: turn %d (%s): %w: %w; the result it read: %s", n, t, ErrCheckFailed, err, clip(result, 400))
		}
	}
	if t.Tool != "" {
		if names := offered(opts); !slices.Contains(names, t.Tool) {
			return Turn{}, fmt.Errorf("langchaintest: turn %d calls %q, but the agent offers %s; "+
				"fix the turn's Tool, or give the agent that tool: %w", n, t.Tool, listNames(names), ErrUnexpectedTurn)
		}
	}
	return t, nil
}

// lastRead quotes the last tool result of the conversation for an error
// message.
func lastRead(c conversation) string {
	if len(c.results) == 0 {
		return ""
	}
	return "; the model last read: " + clip(c.results[len(c.results)-1], 300)
}

// Call implements llms.Model: it plays a turn for a single prompt and
// returns its text.
func (m *Model) Call(ctx context.Context, prompt string, opts ...llms.CallOption) (string, error) {
	return llms.GenerateFromSinglePrompt(ctx, m, prompt, opts...)
}

// Results returns the tool results the model has read, oldest first,
// across every request: with one call per turn, Results()[i] is the result
// of the (i+1)th call. For a guarded tool each is an envelope's JSON, for
// envelope.Parse.
func (m *Model) Results() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.results)
}

// Err reports whether the whole script was played: nil if it was, the
// first turn's failure if one failed (wrapping [ErrUnexpectedTurn] or
// [ErrCheckFailed]), or an error wrapping [ErrNotPlayed] that names the
// first turn never played. A script of [New] is played when every turn was;
// one of [Func] when its last turn played was a final answer.
func (m *Model) Err() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	const hint = "did the agent stop early, at its iteration limit (agents.WithMaxIterations) or on an error of its own?"
	switch {
	case m.err != nil:
		return m.err
	case m.next == nil && m.played < len(m.turns):
		return fmt.Errorf("langchaintest: the agent played %d of the script's %s; turn %d (%s) was never played: %w; %s",
			m.played, count(len(m.turns), "turn"), m.played+1, m.turns[m.played], ErrNotPlayed, hint)
	case m.next != nil && m.played == 0:
		return fmt.Errorf("langchaintest: the agent never asked the model for a turn: %w", ErrNotPlayed)
	case m.next != nil && !m.lastFinal:
		return fmt.Errorf("langchaintest: the script's last turn played, %d (%s), called a tool, and the agent never asked for the next: %w; %s",
			m.played, m.lastTurn, ErrNotPlayed, hint)
	}
	return nil
}
