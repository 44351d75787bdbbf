package anthropictool_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/anthropictool"
	"github.com/retrysafe/retrysafe/agenttool/memstore"
	"github.com/retrysafe/retrysafe/agenttool/modeltest"
	"github.com/retrysafe/retrysafe/internal/adaptertest"
)

// play serves the turns, one reply per request and then a final answer,
// as a Messages API model on loopback, and runs the user's loop over the
// real anthropic-sdk-go client. It returns what the model read.
func play(t *testing.T, box *anthropictool.Toolbox, concurrent bool, turns ...modeltest.Reply) (read []string, srv *modeltest.Server) {
	t.Helper()
	n := 0
	srv = modeltest.Messages(func(results []string) modeltest.Reply {
		read = results
		n++
		if n <= len(turns) {
			return turns[n-1]
		}
		return modeltest.Final("Done.")
	})
	url, stop, err := srv.Start(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	client := anthropic.NewClient(option.WithBaseURL(url), option.WithAPIKey(modeltest.Key), option.WithMaxRetries(0))
	ctx := agenttool.WithScope(t.Context(), "tenant-42/user-7", "conversation-9")

	params := anthropic.MessageNewParams{Model: "test-model", MaxTokens: 1024, Tools: box.Definitions(),
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Send Ana the invoice."))}}
	for range len(turns) + 1 {
		msg, err := client.Messages.New(ctx, params)
		if err != nil {
			t.Fatal(err)
		}
		params.Messages = append(params.Messages, msg.ToParam())
		run := box.Run
		if concurrent {
			run = box.RunConcurrently
		}
		results := run(ctx, *msg)
		if len(results) == 0 {
			if text := msg.Content[0].Text; text != "Done." {
				t.Fatalf("final answer %q", text)
			}
			return read, srv
		}
		params.Messages = append(params.Messages, results...)
	}
	t.Fatalf("the loop did not end after %d turns", len(turns)+1)
	return nil, nil
}

func send(args string) modeltest.Call { return modeltest.Call{Name: "send_email", Arguments: args} }

func toolbox(t *testing.T, tools ...*agenttool.Tool) *anthropictool.Toolbox {
	t.Helper()
	box, err := anthropictool.New(tools...)
	if err != nil {
		t.Fatal(err)
	}
	return box
}

func wantCodes(t *testing.T, results []string, want ...string) {
	t.Helper()
	if got := adaptertest.Codes(adaptertest.Read(t, results)); !slices.Equal(got, want) {
		t.Errorf("the model read %v, want %v", got, want)
	}
}

// A write whose reply is lost is checked with the destination, not run
// again; the model's identical resend is replayed. One email.
func TestLostReplyIsOneEffect(t *testing.T) {
	mail := adaptertest.NewMail(1, false)
	results, _ := play(t, toolbox(t, mail.Tool(t)), false,
		modeltest.Calls(send(adaptertest.Base)), modeltest.Calls(send(adaptertest.Again)))
	wantCodes(t, results, "success+reconciled", "success+replayed+reconciled")
	mail.Check(t, 1)
}

// After an unknown outcome the model rewords the email and resends the
// first: the reworded copy is held by the unknown fence, the resend meets
// the unknown action. One email, and every answer says what is known.
func TestRewordedCopyAfterUnknownIsHeld(t *testing.T) {
	mail := adaptertest.NewMail(1, true)
	results, _ := play(t, toolbox(t, mail.Tool(t)), false,
		modeltest.Calls(send(adaptertest.Base)), modeltest.Calls(send(adaptertest.Reworded)), modeltest.Calls(send(adaptertest.Again)))
	wantCodes(t, results, "unknown_outcome/outcome_unknown", "unknown_outcome/earlier_action_unknown", "unknown_outcome/outcome_unknown")
	mail.Check(t, 1)
}

// Parallel tool_use blocks in one message run in the model's order: the
// copies meet the first call's unknown outcome, the reworded one the
// fence, and each tool_result answers its own tool_use id.
func TestParallelCallsInOneMessageRunInOrder(t *testing.T) {
	mail := adaptertest.NewMail(1, true)
	results, srv := play(t, toolbox(t, mail.Tool(t)), false,
		modeltest.Calls(send(adaptertest.Base), send(adaptertest.Base), send(adaptertest.Reworded), send(adaptertest.Again)))
	wantCodes(t, results, "unknown_outcome/outcome_unknown", "unknown_outcome/outcome_unknown",
		"unknown_outcome/earlier_action_unknown", "unknown_outcome/outcome_unknown")
	mail.Check(t, 1)
	var ids []string
	var errs []bool
	msgs := srv.Requests()[1]["messages"].([]any)
	for _, b := range msgs[len(msgs)-1].(map[string]any)["content"].([]any) {
		if b := b.(map[string]any); b["type"] == "tool_result" {
			ids = append(ids, b["tool_use_id"].(string))
			errs = append(errs, b["is_error"] == true)
		}
	}
	if want := []bool{true, true, true, true}; !slices.Equal(errs, want) {
		t.Errorf("tool results is_error %v, want %v (no success)", errs, want)
	}
	if want := []string{"toolu_1", "toolu_2", "toolu_3", "toolu_4"}; !slices.Equal(ids, want) {
		t.Errorf("tool messages answer %v, want %v", ids, want)
	}
}

// Run concurrently, copies of one action in one message still write once.
func TestConcurrentCopiesAreOneEffect(t *testing.T) {
	mail := adaptertest.NewMail(1, false)
	results, _ := play(t, toolbox(t, mail.Tool(t)), true,
		modeltest.Calls(send(adaptertest.Base), send(adaptertest.Again), send(adaptertest.Base), send(adaptertest.Again)))
	adaptertest.CheckOneFresh(t, adaptertest.Read(t, results))
	mail.Check(t, 1)
}

// Run concurrently, two different actions of one tool in one message still
// run one after the other: when the first one's reply is lost and the
// destination cannot say, the other waits for it and is then held by the
// unknown fence; when the destination confirms it, the other runs after
// it. One write per action, and every answer true.
func TestConcurrentDistinctActionsRunOneAtATime(t *testing.T) {
	for _, silent := range []bool{true, false} {
		mail := adaptertest.NewMail(1, silent)
		results, _ := play(t, toolbox(t, mail.Tool(t)), true,
			modeltest.Calls(send(adaptertest.Distinct[0]), send(adaptertest.Distinct[1])))
		adaptertest.CheckOneAtATime(t, mail, adaptertest.Read(t, results), silent)
	}
}

// An unknown tool name, input that is not an object and a model's own key
// are answered as tool results; nothing runs and the loop goes on.
func TestRefusalsAreToolMessages(t *testing.T) {
	mail := adaptertest.NewMail(0, false)
	results, _ := play(t, toolbox(t, mail.Tool(t)), false, modeltest.Calls(
		modeltest.Call{Name: "send_emial", Arguments: adaptertest.Base},
		send(`{"to":"ana@example.com","subject":`),
		send(``),
		send(`{"to":"ana@example.com","subject":"Invoice 42","body":"Hi","idempotencyKey":"k-1"}`),
		modeltest.Call{Name: "", Arguments: `{}`},
	))
	wantCodes(t, results, "definite_failure/unknown_tool", "definite_failure/invalid_input", "definite_failure/invalid_input",
		"definite_failure/model_supplied_key", "definite_failure/unknown_tool")
	if env := adaptertest.Read(t, results)[0]; !strings.Contains(env.Error.Message, "send_email") || env.Next != "fix_input" {
		t.Errorf("the unknown tool's answer does not name the tools: %s", env)
	}
	mail.Check(t, 0)
}

// The model is offered each tool with its real schema and the envelope
// hint.
func TestDefinitionsCarryTheRealSchema(t *testing.T) {
	mail := adaptertest.NewMail(0, false)
	_, srv := play(t, toolbox(t, mail.Tool(t)), false)
	tools, _ := json.Marshal(srv.Requests()[0]["tools"])
	for _, want := range []string{`"name":"send_email"`, `"required":["to","subject","body"]`, `"additionalProperties":false`, `"input_schema"`, `never add an idempotency key`} {
		if !strings.Contains(string(tools), want) {
			t.Errorf("tools offered lack %s: %s", want, tools)
		}
	}
}

// Hooks find the call id on the call's context.
func TestCallIDReachesHooks(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	echo, err := agenttool.New("echo", "Echo.", func(ctx context.Context, in struct {
		Text string `json:"text"`
	}) (string, error) {
		return in.Text, nil
	}, agenttool.Options{Store: memstore.New(), Class: agenttool.Keyed, Hooks: agenttool.Hooks{
		Start: func(ctx context.Context, _ agenttool.StartEvent) context.Context {
			mu.Lock()
			defer mu.Unlock()
			seen = append(seen, anthropictool.CallID(ctx))
			return ctx
		},
	}})
	if err != nil {
		t.Fatal(err)
	}
	play(t, toolbox(t, echo), false, modeltest.Calls(modeltest.Call{Name: "echo", Arguments: `{"text":"a"}`}, modeltest.Call{Name: "echo", Arguments: `{"text":"b"}`}))
	if want := []string{"toolu_1", "toolu_2"}; !slices.Equal(seen, want) {
		t.Errorf("hooks saw call ids %v, want %v", seen, want)
	}
}

func TestNewRefusesAmbiguousSets(t *testing.T) {
	mail := adaptertest.NewMail(0, false)
	a := mail.Tool(t)
	for name, tools := range map[string][]*agenttool.Tool{"none": nil, "nil": {nil}, "twice": {a, a}} {
		if _, err := anthropictool.New(tools...); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// An adversarial model — every restatement of the action as tool_use
// blocks of one message, an unknown tool name, then a reworded copy and a
// resend — gets at most one email per action out of send_email, in order or
// concurrently, whether the lost reply is settled or stays unknown; every
// answer is true.
func TestAdversarialModel(t *testing.T) {
	for _, silent := range []bool{false, true} {
		for _, concurrent := range []bool{false, true} {
			mail := adaptertest.NewMail(1, silent)
			results, _ := play(t, toolbox(t, mail.Tool(t)), concurrent, adaptertest.AdversaryTurns()...)
			if want := len(adaptertest.AdversaryTurns()[0].Calls) + len(adaptertest.AdversaryTurns()[1].Calls); len(results) != want {
				t.Fatalf("the model read %d answers, want %d", len(results), want)
			}
			want := 1 // the reworded copy after an unknown outcome is held
			if !silent {
				want = 2 // the model read a success, then asked for a second, other email
			}
			mail.Check(t, want)
			if t.Failed() {
				t.Fatalf("silent %v, concurrent %v: the model read %v", silent, concurrent, adaptertest.Codes(adaptertest.Read(t, results)))
			}
		}
	}
}
