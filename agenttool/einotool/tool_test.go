package einotool_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/cloudwego/eino/compose"
	"github.com/cloudwego/eino/flow/agent/react"
	"github.com/cloudwego/eino/schema"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/einotool"
	"github.com/retrysafe/retrysafe/agenttool/memstore"
	"github.com/retrysafe/retrysafe/agenttool/modeltest"
	"github.com/retrysafe/retrysafe/internal/adaptertest"
	"github.com/retrysafe/retrysafe/internal/einochat"
)

// play serves the turns, one reply per request and then a final answer,
// as a Chat Completions model on loopback, and runs a real Eino react
// agent with the guarded tools over it. It returns what the model read.
func play(t *testing.T, cfg compose.ToolsNodeConfig, turns ...modeltest.Reply) (read []string, srv *modeltest.Server) {
	t.Helper()
	n := 0
	srv = modeltest.ChatCompletions(func(results []string) modeltest.Reply {
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
	model := einochat.New(openai.NewClient(option.WithBaseURL(url+"/v1"), option.WithAPIKey(modeltest.Key), option.WithMaxRetries(0)), "test-model")

	ctx := agenttool.WithScope(t.Context(), "tenant-42/user-7", "conversation-9")
	agent, err := react.NewAgent(ctx, &react.AgentConfig{ToolCallingModel: model, ToolsConfig: cfg, MaxStep: 2*len(turns) + 4})
	if err != nil {
		t.Fatal(err)
	}
	answer, err := agent.Generate(ctx, []*schema.Message{schema.UserMessage("Send Ana the invoice.")})
	if err != nil {
		t.Fatal(err)
	}
	if answer.Content != "Done." {
		t.Fatalf("final answer %q", answer.Content)
	}
	return read, srv
}

func send(args string) modeltest.Call { return modeltest.Call{Name: "send_email", Arguments: args} }

func config(t *testing.T, tools ...*agenttool.Tool) compose.ToolsNodeConfig {
	t.Helper()
	cfg, err := einotool.ToolsConfig(tools...)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
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
	results, _ := play(t, config(t, mail.Tool(t)),
		modeltest.Calls(send(adaptertest.Base)), modeltest.Calls(send(adaptertest.Again)))
	wantCodes(t, results, "success+reconciled", "success+replayed+reconciled")
	mail.Check(t, 1)
}

// After an unknown outcome the model rewords the email and resends the
// first: the reworded copy is held by the unknown fence, the resend meets
// the unknown action. One email, and every answer says what is known.
func TestRewordedCopyAfterUnknownIsHeld(t *testing.T) {
	mail := adaptertest.NewMail(1, true)
	results, _ := play(t, config(t, mail.Tool(t)),
		modeltest.Calls(send(adaptertest.Base)), modeltest.Calls(send(adaptertest.Reworded)), modeltest.Calls(send(adaptertest.Again)))
	wantCodes(t, results, "unknown_outcome/outcome_unknown", "unknown_outcome/earlier_action_unknown", "unknown_outcome/outcome_unknown")
	mail.Check(t, 1)
}

// ToolsConfig runs the parallel tool calls of one message in the model's
// order: the copies meet the first call's unknown outcome, the reworded
// one the fence, and each tool message answers its own call id.
func TestParallelCallsInOneMessageRunInOrder(t *testing.T) {
	mail := adaptertest.NewMail(1, true)
	results, srv := play(t, config(t, mail.Tool(t)),
		modeltest.Calls(send(adaptertest.Base), send(adaptertest.Base), send(adaptertest.Reworded), send(adaptertest.Again)))
	wantCodes(t, results, "unknown_outcome/outcome_unknown", "unknown_outcome/outcome_unknown",
		"unknown_outcome/earlier_action_unknown", "unknown_outcome/outcome_unknown")
	mail.Check(t, 1)
	var ids []string
	for _, m := range srv.Requests()[1]["messages"].([]any) {
		if m := m.(map[string]any); m["role"] == "tool" {
			ids = append(ids, m["tool_call_id"].(string))
		}
	}
	if want := []string{"call_1", "call_2", "call_3", "call_4"}; !slices.Equal(ids, want) {
		t.Errorf("tool messages answer %v, want %v", ids, want)
	}
}

// With Eino's concurrent execution, copies of one action in one message
// still write once.
func TestConcurrentCopiesAreOneEffect(t *testing.T) {
	mail := adaptertest.NewMail(1, false)
	cfg := config(t, mail.Tool(t))
	cfg.ExecuteSequentially = false
	results, _ := play(t, cfg,
		modeltest.Calls(send(adaptertest.Base), send(adaptertest.Again), send(adaptertest.Base), send(adaptertest.Again)))
	adaptertest.CheckOneFresh(t, adaptertest.Read(t, results))
	mail.Check(t, 1)
}

// With Eino's concurrent execution, two different actions of one tool in
// one message still run one after the other: when the first one's reply is
// lost and the destination cannot say, the other waits for it and is then
// held by the unknown fence; when the destination confirms it, the other
// runs after it. One write per action, and every answer true.
func TestConcurrentDistinctActionsRunOneAtATime(t *testing.T) {
	for _, silent := range []bool{true, false} {
		mail := adaptertest.NewMail(1, silent)
		cfg := config(t, mail.Tool(t))
		cfg.ExecuteSequentially = false
		results, _ := play(t, cfg, modeltest.Calls(send(adaptertest.Distinct[0]), send(adaptertest.Distinct[1])))
		adaptertest.CheckOneAtATime(t, mail, adaptertest.Read(t, results), silent)
	}
}

// An unknown tool name, malformed arguments and a model's own key are
// answered as tool messages; nothing runs and the run goes on.
func TestRefusalsAreToolMessages(t *testing.T) {
	mail := adaptertest.NewMail(0, false)
	results, _ := play(t, config(t, mail.Tool(t)), modeltest.Calls(
		modeltest.Call{Name: "send_emial", Arguments: adaptertest.Base},
		send(`{"to":"ana@example.com","subject":`),
		send(`{"to":"ana@example.com","subject":"Invoice 42","body":"Hi","idempotencyKey":"k-1"}`),
	))
	wantCodes(t, results, "definite_failure/unknown_tool", "definite_failure/invalid_input", "definite_failure/model_supplied_key")
	if env := adaptertest.Read(t, results)[0]; !strings.Contains(env.Error.Message, "send_email") {
		t.Errorf("the unknown tool's answer does not name the tools: %s", env)
	}
	mail.Check(t, 0)
}

// The model is offered the tool with its real schema and the envelope hint.
func TestInfoCarriesTheRealSchema(t *testing.T) {
	mail := adaptertest.NewMail(0, false)
	_, srv := play(t, config(t, mail.Tool(t)))
	tools, _ := json.Marshal(srv.Requests()[0]["tools"])
	for _, want := range []string{`"name":"send_email"`, `"required":["to","subject","body"]`, `"additionalProperties":false`, `never add an idempotency key`} {
		if !strings.Contains(string(tools), want) {
			t.Errorf("tools offered lack %s: %s", want, tools)
		}
	}
}

// Hooks find Eino's call id on the call's context.
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
			seen = append(seen, einotool.CallID(ctx))
			return ctx
		},
	}})
	if err != nil {
		t.Fatal(err)
	}
	play(t, config(t, echo), modeltest.Calls(modeltest.Call{Name: "echo", Arguments: `{"text":"a"}`}, modeltest.Call{Name: "echo", Arguments: `{"text":"b"}`}))
	if want := []string{"call_1", "call_2"}; !slices.Equal(seen, want) {
		t.Errorf("hooks saw call ids %v, want %v", seen, want)
	}
}

func TestToolsRefusesAmbiguousSets(t *testing.T) {
	mail := adaptertest.NewMail(0, false)
	a := mail.Tool(t)
	for name, tools := range map[string][]*agenttool.Tool{"none": nil, "nil": {nil}, "twice": {a, a}} {
		if _, err := einotool.ToolsConfig(tools...); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// An adversarial model — every restatement of the action as parallel calls
// of one message, an unknown tool name, then a reworded copy and a resend
// — gets at most one email per action out of send_email, in order or with Eino's
// concurrent execution, whether the lost reply is settled or stays
// unknown; every answer is true.
func TestAdversarialModel(t *testing.T) {
	for _, silent := range []bool{false, true} {
		for _, concurrent := range []bool{false, true} {
			mail := adaptertest.NewMail(1, silent)
			cfg := config(t, mail.Tool(t))
			cfg.ExecuteSequentially = !concurrent
			results, _ := play(t, cfg, adaptertest.AdversaryTurns()...)
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
