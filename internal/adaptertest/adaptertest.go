// Package adaptertest is the destination and the checks shared by the
// tests of the agent-loop adapters (agenttool/openaitool, anthropictool,
// einotool, mcpgo): a mail service that counts every write it takes —
// honouring no key, so a second run of one action shows as a second
// effect — can lose its reply after writing, and can be unable to say what
// became of a request; and a guarded send_email tool over it.
package adaptertest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/memstore"
	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/reconcile"
)

// Email is send_email's input.
type Email struct {
	To      string `json:"to" desc:"the recipient's address"`
	Subject string `json:"subject" desc:"the subject line"`
	Body    string `json:"body" desc:"the message"`
}

// Sent is send_email's result.
type Sent struct {
	MessageID string `json:"message_id"`
}

// Calls in the model's words.
const (
	Base     = `{"to":"ana@example.com","subject":"Invoice 42","body":"Hi Ana, the invoice is attached."}`
	Again    = `{"subject":"Invoice 42","body":"Hi Ana, the invoice is attached.","to":"ana@example.com"}` // the same action, members reordered
	Reworded = `{"to":"ana@example.com","subject":"Invoice 42 (resent)","body":"Hello Ana, here is the invoice again."}`
)

// Mail is the destination. A Mail is safe for concurrent use.
type Mail struct {
	mu          sync.Mutex
	writes      map[string]int // request reference → writes taken
	total       int
	loseReplies int  // the next writes whose reply is lost
	silent      bool // status checks cannot say
	outcomes    []Outcome
	steps       []string // "claim REF" and "write REF", in the order they happened
}

// Outcome is one envelope a guarded call returned, with the writes the
// destination had taken when it was made.
type Outcome struct {
	Env    envelope.Envelope
	Writes int
}

// NewMail returns a destination that loses the reply of its next
// loseReplies writes; silent makes its status checks unable to say
// (pending), so a lost reply ends unknown_outcome.
func NewMail(loseReplies int, silent bool) *Mail {
	return &Mail{writes: map[string]int{}, loseReplies: loseReplies, silent: silent}
}

// Writes returns the writes taken, over all actions.
func (m *Mail) Writes() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.total
}

// Outcomes returns the envelopes of the guarded calls in the order they
// ended.
func (m *Mail) Outcomes() []Outcome {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]Outcome(nil), m.outcomes...)
}

// Send writes one email, under the request reference on ctx.
func (m *Mail) Send(ctx context.Context, in Email) (Sent, error) {
	ref := agenttool.RequestRef(ctx)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.writes[ref]++
	m.total++
	m.steps = append(m.steps, "write "+ref)
	id := fmt.Sprintf("<%d@mail.example>", m.total)
	if m.loseReplies > 0 {
		m.loseReplies--
		return Sent{}, envelope.MarkUnknown(errors.New("the connection was reset after the message was written"))
	}
	return Sent{MessageID: id}, nil
}

func (m *Mail) status(_ context.Context, ref string) reconcile.Answer {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case m.silent:
		return reconcile.StillPending()
	case m.writes[ref] > 0:
		return reconcile.AppliedWith([]byte(`{"message_id":"<reconciled@mail.example>"}`))
	}
	return reconcile.NotAppliedFenced()
}

// Options are send_email's options over m: reconcilable (the service is
// asked by request reference after an unknown outcome), in a memory
// store, with every outcome recorded for [Mail.Check].
func (m *Mail) Options() agenttool.Options {
	return agenttool.Options{
		Store:      memstore.New(),
		Class:      agenttool.Reconcilable,
		Reconciler: reconcile.Func(m.status),
		Retry:      agenttool.RetryPolicy{MaxAttempts: 2, InitialInterval: time.Millisecond, MaxInterval: time.Millisecond},
		ClockSkew:  -1,
		Hooks: agenttool.Hooks{
			Claimed: func(_ context.Context, e agenttool.ClaimedEvent) {
				m.mu.Lock()
				defer m.mu.Unlock()
				m.steps = append(m.steps, "claim "+e.RequestRef)
			},
			Outcome: func(_ context.Context, e agenttool.OutcomeEvent) {
				m.mu.Lock()
				defer m.mu.Unlock()
				m.outcomes = append(m.outcomes, Outcome{Env: e.Envelope, Writes: m.total})
			},
		},
	}
}

// Tool returns send_email over m, built with agenttool.New and
// [Mail.Options].
func (m *Mail) Tool(tb testing.TB) *agenttool.Tool {
	tb.Helper()
	t, err := agenttool.New("send_email", "Send one email.", m.Send, m.Options())
	if err != nil {
		tb.Fatal(err)
	}
	return t
}

// Check fails tb unless the destination took want writes in all, at most
// one per action, and every envelope was true when it was made: a success
// names an action that was written; a refusal of the call's own action
// (invalid input, a model's key, held by the fence) names one that was
// not; an unknown outcome names one written at most once.
func (m *Mail) Check(tb testing.TB, want int) {
	tb.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	var bad []string
	if m.total != want {
		bad = append(bad, fmt.Sprintf("the destination took %d writes, want %d", m.total, want))
	}
	for ref, n := range m.writes {
		if n > 1 {
			bad = append(bad, fmt.Sprintf("action %s was written %d times", ref, n))
		}
	}
	for i, o := range m.outcomes {
		e := o.Env
		say := func(why string) { bad = append(bad, fmt.Sprintf("envelope %d %s: %s", i, e, why)) }
		if err := e.Validate(); err != nil {
			say(err.Error())
		}
		switch {
		case e.Status == envelope.Success && m.writes[e.RequestRef] == 0:
			say("a success, but the action was never written")
		case e.Error != nil && ownRefusal[e.Error.Code] && e.RequestRef != "" && m.writes[e.RequestRef] > 0:
			say("refused, but the action was written")
		case e.Earlier != nil && e.Earlier.State == envelope.ActionSucceeded && m.writes[e.Earlier.RequestRef] == 0:
			say("says the earlier action succeeded, but it was never written")
		}
	}
	if len(bad) > 0 {
		tb.Error(strings.Join(bad, "\n"))
	}
}

// Distinct are two different actions of send_email, for one message:
// Base and Reworded.
var Distinct = []string{Base, Reworded}

// CheckOneAtATime fails tb unless the two [Distinct] actions, run
// concurrently from one message with the first write's reply lost, ran one
// after the other, as distinct writes of one tool in one session do: the
// other claimed its key only after the first had claimed and written.
// silent (the destination
// cannot say): one write, one outcome_unknown, and the other action held
// by the unknown fence (earlier_action_unknown); else two writes, the
// first confirmed by the destination, both successes. envs are what the
// model read.
func CheckOneAtATime(tb testing.TB, m *Mail, envs []envelope.Envelope, silent bool) {
	tb.Helper()
	got := Codes(envs)
	slices.Sort(got)
	want, writes := []string{"success", "success+reconciled"}, 2
	if silent {
		want, writes = []string{"unknown_outcome/earlier_action_unknown", "unknown_outcome/outcome_unknown"}, 1
	}
	if !slices.Equal(got, want) {
		tb.Errorf("silent %v: the model read %v, want %v in some order", silent, Codes(envs), want)
	}
	m.Check(tb, writes)
	m.mu.Lock()
	defer m.mu.Unlock()
	var first, other string // in the order they claimed
	if len(envs) == 2 {
		first, other = envs[0].RequestRef, envs[1].RequestRef
		if len(m.steps) > 0 && m.steps[0] == "claim "+other {
			first, other = other, first
		}
	}
	wantSteps := []string{"claim " + first, "write " + first}
	if !silent {
		wantSteps = append(wantSteps, "claim "+other, "write "+other)
	}
	if first == other || !slices.Equal(m.steps, wantSteps) {
		tb.Errorf("silent %v: claims and writes %v, want one action claimed and written, then the other", silent, m.steps)
	}
}

// ownRefusal are the codes of an answer that ran nothing for the call's
// own action.
var ownRefusal = map[string]bool{
	envelope.CodeInvalidInput: true, envelope.CodeModelSuppliedKey: true,
	envelope.CodeEarlierUnknown: true, envelope.CodeMissingScope: true,
}

// Read parses what the model read as tool results, failing tb on any that
// is not a valid envelope.
func Read(tb testing.TB, results []string) []envelope.Envelope {
	tb.Helper()
	out := make([]envelope.Envelope, len(results))
	for i, r := range results {
		env, err := envelope.Parse([]byte(r))
		if err != nil {
			tb.Fatalf("tool result %d is not an envelope: %v\n%s", i, err, r)
		}
		out[i] = env
	}
	return out
}

// CheckOneFresh checks the answers to copies of one action: every copy
// reads success, and exactly one is fresh — the others replay it.
func CheckOneFresh(tb testing.TB, envs []envelope.Envelope) {
	tb.Helper()
	fresh := 0
	for _, e := range envs {
		if e.Status != envelope.Success {
			tb.Errorf("a copy read %s", e)
		}
		if !e.Replayed {
			fresh++
		}
	}
	if fresh != 1 {
		tb.Errorf("%d fresh successes, want 1: %v", fresh, Codes(envs))
	}
}

// Codes lists the status (and error code) of each envelope, for messages
// and comparisons: "success", "unknown_outcome/outcome_unknown".
func Codes(envs []envelope.Envelope) []string {
	out := make([]string, len(envs))
	for i, e := range envs {
		out[i] = string(e.Status)
		if e.Error != nil {
			out[i] += "/" + e.Error.Code
		}
		if e.Replayed {
			out[i] += "+replayed"
		}
		if e.Reconciled {
			out[i] += "+reconciled"
		}
	}
	return out
}
