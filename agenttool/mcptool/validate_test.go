package mcptool_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/mcptool"
	"github.com/retrysafe/retrysafe/agenttool/memstore"
	"github.com/retrysafe/retrysafe/envelope"
)

// noSession answers every call's request for a session with an error,
// counting them: a call that asks has passed every check before sending.
type noSession struct{ asked atomic.Int64 }

func (n *noSession) Session(context.Context) (*mcp.ClientSession, error) {
	n.asked.Add(1)
	return nil, errors.New("no server here")
}
func (*noSession) Lost(*mcp.ClientSession) {}

var sendSchema = json.RawMessage(`{"type": "object", "additionalProperties": false, "required": ["to", "text"],
  "properties": {"to": {"type": "string"}, "text": {"type": "string", "maxLength": 200}, "idempotency_key": {"type": "string"}}}`)

// FuzzArgumentsAreCheckedBeforeAnyClaim: whatever the model sends, a tool
// that validates its arguments (ToolOptions.ValidateArguments) either
// refuses it as invalid_input with nothing recorded, or goes on toward
// the server only with arguments its schema accepts — and never panics.
func FuzzArgumentsAreCheckedBeforeAnyClaim(f *testing.F) {
	for _, seed := range []string{`{"to":"#team","text":"hi"}`, `{"to":1,"text":"hi"}`, `{"to":"#t"}`, `{"to":"#t","text":"x","cc":"y"}`,
		`{"to":"#t","text":"x","idempotency_key":"k"}`, `[]`, `null`, `{"to":"#t","text":"` + strings.Repeat("x", 201) + `"}`, `{"to":"\u0000","text":"\ud800"}`} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, input string) {
		store, sessions := memstore.New(), &noSession{}
		tool, err := mcptool.NewToolWith(nil, &mcp.Tool{Name: "send_message", InputSchema: sendSchema},
			agenttool.Options{Store: store, Class: agenttool.AtMostOnce, Retry: agenttool.RetryPolicy{MaxAttempts: 1}},
			mcptool.ToolOptions{Sessions: sessions, RefArgument: "idempotency_key", ValidateArguments: true})
		if err != nil {
			t.Fatal(err)
		}
		env := tool.Invoke(agenttool.WithScope(context.Background(), "ana", "chat-1"), input)
		if env.Error != nil && env.Error.Code == envelope.CodeInvalidInput {
			if store.Len() != 0 || sessions.asked.Load() != 0 {
				t.Fatalf("refused as invalid_input, yet %d records and %d sends: %s", store.Len(), sessions.asked.Load(), env)
			}
			return
		}
		if sessions.asked.Load() == 0 {
			return // refused otherwise before sending (a model-supplied key, say)
		}
		var args map[string]any
		if err := json.Unmarshal([]byte(input), &args); err != nil {
			t.Fatalf("%q went toward the server, and is not a JSON object: %s", input, env)
		}
		_, okTo := args["to"].(string)
		text, okText := args["text"].(string)
		if !okTo || !okText || len(args) != 2 || len([]rune(text)) > 200 {
			t.Fatalf("%q went toward the server, and its schema refuses it: %s", input, env)
		}
	})
}

// A tool whose input schema the validator cannot read is not built with
// ValidateArguments: the error says why (ErrSchemaUnreadable).
func TestValidateArgumentsNeedsAReadableSchema(t *testing.T) {
	_, err := mcptool.NewToolWith(nil, &mcp.Tool{Name: "old", InputSchema: json.RawMessage(`{"$schema": "http://json-schema.org/draft-04/schema#",
	  "type": "object", "properties": {"to": {"type": "string"}}, "required": ["to"]}`)},
		agenttool.Options{Store: memstore.New(), Class: agenttool.AtMostOnce}, mcptool.ToolOptions{Sessions: &noSession{}, ValidateArguments: true})
	if !errors.Is(err, mcptool.ErrSchemaUnreadable) || !strings.Contains(err.Error(), "draft-04") {
		t.Errorf("a draft-04 schema: %v, want ErrSchemaUnreadable naming the draft", err)
	}
}
