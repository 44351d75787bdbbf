package adversary_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/retrysafe/retrysafe/envelope"
	"github.com/retrysafe/retrysafe/internal/adversary"
)

var emailPlan = adversary.Plan{
	Tool:     "send_email",
	Base:     `{"to":"ana@example.com","subject":"Lunch on Friday?","body":"Hi Ana, does lunch at noon on Friday work for you? Sam"}`,
	Reworded: `{"to":"ana@example.com","subject":"Lunch on Friday","body":"Hello Ana, would lunch at noon this Friday suit you? Best, Sam"}`,
}

type toolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// converse plays a Chat Completions loop against the model at getenv's
// base URL: each tool call is answered with answer's result, and the
// conversation is returned as the messages the model sent.
func converse(t *testing.T, getenv func(string) string, answer func(turn int, c toolCall) string) (turns [][]toolCall, final string) {
	t.Helper()
	messages := []any{map[string]any{"role": "user", "content": "Email Ana about lunch."}}
	for range 40 {
		body, _ := json.Marshal(map[string]any{"model": getenv("OPENAI_MODEL"), "messages": messages})
		req, _ := http.NewRequest(http.MethodPost, getenv("OPENAI_BASE_URL")+"/chat/completions", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+getenv("OPENAI_API_KEY"))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var out struct {
			Choices []struct {
				Message struct {
					Content   *string    `json:"content"`
					ToolCalls []toolCall `json:"tool_calls"`
				} `json:"message"`
				FinishReason string `json:"finish_reason"`
			} `json:"choices"`
		}
		err = json.NewDecoder(resp.Body).Decode(&out)
		resp.Body.Close()
		if err != nil || len(out.Choices) != 1 {
			t.Fatalf("the model's answer: %v %+v", err, out)
		}
		msg := out.Choices[0].Message
		if len(msg.ToolCalls) == 0 {
			if out.Choices[0].FinishReason != "stop" || msg.Content == nil {
				t.Fatalf("a final answer with finish_reason %q and content %v", out.Choices[0].FinishReason, msg.Content)
			}
			return turns, *msg.Content
		}
		turns = append(turns, msg.ToolCalls)
		messages = append(messages, map[string]any{"role": "assistant", "content": nil, "tool_calls": msg.ToolCalls})
		for _, c := range msg.ToolCalls {
			messages = append(messages, map[string]any{"role": "tool", "tool_call_id": c.ID, "content": answer(len(turns), c)})
		}
	}
	t.Fatal("the model did not stop")
	return nil, ""
}

func answerWith(status envelope.Status, ref string) string {
	e := envelope.Envelope{Version: envelope.Version, Status: status, Tool: "send_email", RequestRef: ref, Attempts: 1, Next: envelope.Continue}
	if status == envelope.UnknownOutcome {
		e.Error, e.Next = &envelope.Error{Code: envelope.CodeOutcomeUnknown, Message: "EOF"}, envelope.DoNotRetry
	}
	return e.String()
}

// The model reads the envelopes it is sent and acts on them: after an
// unknown outcome it resends the action and rewords it, in one message
// with other calls, and pastes the reference back; once it has read a
// success it rewords nothing; it answers in words in the end.
func TestTheModelActsOnTheEnvelopesItReads(t *testing.T) {
	m := adversary.NewModel(adversary.ModelOptions{Seed: 7, MaxTurns: 12}, emailPlan)
	const ref = "send_email/first"
	succeeded := 0 // the turn from which the loop answers success
	turns, final := converse(t, m.Start(t), func(turn int, c toolCall) string {
		if c.Function.Arguments != emailPlan.Base || c.Function.Name != "send_email" {
			return `{"version":1,"status":"definite_failure","tool":"send_email","attempts":0,"error":{"code":"invalid_input","message":"no"},"next":"fix_input"}`
		}
		if turn < 3 {
			return answerWith(envelope.UnknownOutcome, ref)
		}
		if succeeded == 0 {
			succeeded = turn
		}
		return answerWith(envelope.Success, ref)
	})
	if len(turns[0]) != 1 || turns[0][0].Function.Arguments != emailPlan.Base {
		t.Fatalf("first message: %+v; want the planned call alone", turns[0])
	}
	args := func(turn int) []string {
		var out []string
		for _, c := range turns[turn] {
			out = append(out, c.Function.Arguments)
		}
		return out
	}
	second := args(1)
	for _, want := range []string{emailPlan.Base, emailPlan.Reworded} {
		if !slices.Contains(second, want) {
			t.Errorf("the message after an unknown outcome lacks %s: %q", want, second)
		}
	}
	if !slices.ContainsFunc(second, func(a string) bool { return strings.Contains(a, ref) }) {
		t.Errorf("the message after reading %s does not paste it back: %q", ref, second)
	}
	if len(second) < 4 {
		t.Errorf("the message after an unknown outcome has %d calls; want several at once", len(second))
	}
	if !slices.Contains(args(2), emailPlan.Reworded) {
		t.Errorf("the next message, still unknown, does not reword again: %q", args(2))
	}
	for turn := succeeded; turn < len(turns); turn++ {
		if slices.Contains(args(turn), emailPlan.Reworded) {
			t.Errorf("message %d rewords the action after a success was read", turn+1)
		}
	}
	if final != "send_email: done." {
		t.Errorf("final answer %q; want the action done", final)
	}
	log := m.Log()
	for _, x := range log {
		if !x.Read {
			t.Errorf("call %s was never read", x.CallID)
		}
	}
	if len(m.Faults()) != 0 {
		t.Errorf("faults of a correct loop: %q", m.Faults())
	}
	t.Logf("%d messages: %s", len(turns), adversary.Describe(log))

	// The same seed makes the same calls.
	again := adversary.NewModel(adversary.ModelOptions{Seed: 7, MaxTurns: 12}, emailPlan)
	turns2, _ := converse(t, again.Start(t), func(turn int, c toolCall) string {
		if turn < 3 {
			return answerWith(envelope.UnknownOutcome, ref)
		}
		return answerWith(envelope.Success, ref)
	})
	if len(turns2) < 2 || !slices.EqualFunc(turns[1], turns2[1], func(a, b toolCall) bool { return a.Function == b.Function }) {
		t.Errorf("the same seed made other calls in its second message")
	}
}

// A loop that leaves a call unanswered, or answers a call the model never
// made, is reported.
func TestTheModelReportsALoopThatLosesCalls(t *testing.T) {
	m := adversary.NewModel(adversary.ModelOptions{Seed: 1, MaxTurns: 3}, emailPlan)
	getenv := m.Start(t)
	post := func(messages ...any) {
		body, _ := json.Marshal(map[string]any{"model": "x", "messages": messages})
		req, _ := http.NewRequest(http.MethodPost, getenv("OPENAI_BASE_URL")+"/chat/completions", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+adversary.WireKey)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	user := map[string]any{"role": "user", "content": "Email Ana."}
	post(user)
	post(user, map[string]any{"role": "tool", "tool_call_id": "call_9_9", "content": "{}"})
	faults := strings.Join(m.Faults(), "\n")
	for _, want := range []string{"call_9_9", "call_1_0", "was not answered"} {
		if !strings.Contains(faults, want) {
			t.Errorf("faults %q lack %q", faults, want)
		}
	}
}
