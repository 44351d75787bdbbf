package langchaintest

import (
	"fmt"
	"strings"

	"github.com/retrysafe/retrysafe/envelope"
)

// Turn is one turn of the scripted model: a call of one tool, or the final
// answer. A Turn is a plain value, safe to copy and to share.
type Turn struct {
	// Tool is the tool to call; "" makes the turn the final answer.
	Tool string
	// Args are the call's arguments, as a function-calling model sends
	// them: usually a JSON object. They reach the tool as they are, so a
	// test can also send what a careless model would.
	Args string
	// Answer is the final answer, or the words said along with a call.
	Answer string
	// Check, if set, runs on the tool result the model reads at this turn:
	// the previous turn's call's result (a guarded tool's envelope). An
	// error fails the turn (see [ErrCheckFailed]). A turn with a Check that
	// reads no result — the first of a conversation — fails too.
	Check func(result string) error
}

// Call returns a turn that calls tool with args.
func Call(tool, args string) Turn { return Turn{Tool: tool, Args: args} }

// Final returns a turn that ends the run with answer.
func Final(answer string) Turn { return Turn{Answer: answer} }

// Checking returns t with check as its Check: check runs on the result the
// model reads at this turn, before the turn is played.
func (t Turn) Checking(check func(result string) error) Turn {
	t.Check = check
	return t
}

// WantStatus returns a Check that the result the model read is an envelope
// with the given status. Its error quotes the envelope's status and error
// code.
func WantStatus(want envelope.Status) func(result string) error {
	return func(result string) error {
		env, err := envelope.Parse([]byte(result))
		if err != nil {
			return fmt.Errorf("want an envelope with status %s, but the result is not an envelope: %w", want, err)
		}
		if env.Status != want {
			got := string(env.Status)
			if env.Error != nil {
				got += " (" + env.Error.Code + ")"
			}
			return fmt.Errorf("want status %s, the model read %s", want, got)
		}
		return nil
	}
}

// String describes the turn in a few words: the tool and its arguments, or
// the final answer.
func (t Turn) String() string {
	if t.Tool == "" {
		return fmt.Sprintf("final answer %q", clip(t.Answer, 60))
	}
	return t.Tool + " " + clip(t.Args, 80)
}

// outline lists a script's turns by number: "1 send_email, 2 final answer".
func outline(turns []Turn) string {
	const most = 12
	parts := make([]string, 0, min(len(turns), most+1))
	for i, t := range turns {
		if i == most {
			parts = append(parts, fmt.Sprintf("… %d more", len(turns)-most))
			break
		}
		what := t.Tool
		if what == "" {
			what = "final answer"
		}
		parts = append(parts, fmt.Sprintf("%d %s", i+1, what))
	}
	return strings.Join(parts, ", ")
}

// count writes n things: "1 turn", "3 turns".
func count(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}

// clip shortens s to at most n runes, marking the cut.
func clip(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n]) + "…"
}
