package mcptool_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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

// validating builds a tool that validates its arguments against schema
// (ToolOptions.ValidateArguments), on sessions that count the calls that
// went toward the server.
func validating(t *testing.T, schema string, opts agenttool.Options, to mcptool.ToolOptions) (*agenttool.Tool, *noSession, error) {
	t.Helper()
	sessions := &noSession{}
	if opts.Store == nil {
		opts.Store = memstore.New()
	}
	if opts.Class == 0 {
		opts.Class = agenttool.AtMostOnce
	}
	opts.Retry = agenttool.RetryPolicy{MaxAttempts: 1}
	to.Sessions, to.ValidateArguments = sessions, true
	tool, err := mcptool.NewToolWith(nil, &mcp.Tool{Name: "send_message", InputSchema: json.RawMessage(schema)}, opts, to)
	return tool, sessions, err
}

// A server's schema names its draft as servers spell it — draft-07 with or
// without its trailing "#", draft 2020-12 with or without one: a schema
// NewToolWith reads is read as its draft says, and its arguments are
// checked by it, never all refused because the validator spells the
// draft another way.
func TestValidateArgumentsReadsEverySpellingOfItsDraft(t *testing.T) {
	for _, draft := range []string{"http://json-schema.org/draft-07/schema#", "http://json-schema.org/draft-07/schema",
		"https://json-schema.org/draft/2020-12/schema", "https://json-schema.org/draft/2020-12/schema#"} {
		tool, sessions, err := validating(t, `{"$schema": "`+draft+`", "type": "object", "required": ["to", "text"],
		  "properties": {"to": {"type": "string"}, "text": {"type": "string"}}}`, agenttool.Options{}, mcptool.ToolOptions{})
		if err != nil {
			t.Errorf("%s: %v, want a tool", draft, err)
			continue
		}
		ctx := agenttool.WithScope(context.Background(), "ana", "chat-1")
		if env := tool.Invoke(ctx, `{"to":"#team","text":42}`); env.Error == nil || env.Error.Code != envelope.CodeInvalidInput {
			t.Errorf("%s: a number for a string: %s, want invalid_input", draft, env)
		}
		if env := tool.Invoke(ctx, `{"to":"#team","text":"Lunch at one?"}`); sessions.asked.Load() != 1 {
			t.Errorf("%s: arguments the schema takes: %s, want them sent", draft, env)
		}
	}
}

// The check refuses only what the server refuses whatever validates it:
// a keyword the validator here decides otherwise than a server may — a
// decimal multipleOf (19.99 is a multiple of 0.01, but not in float64), a
// pattern's \w, \d or \s (Unicode in Python's and Rust's regular
// expressions, \s in ECMA-262's; ASCII in Go's), a number float64 does
// not hold (beyond its range, or two 64-bit ids it makes one) — and the
// RefArgument's own value, which the model does not choose and
// the check only guesses at (Options.KeyPrefix makes it shorter than the
// tool's name), never make a refusal: such arguments go to the server,
// as they went before the check. What every validator refuses still is.
func TestValidateArgumentsRefusesOnlyWhatTheServerSurelyRefuses(t *testing.T) {
	for _, c := range []struct {
		name, schema, takes, refuses string
		opts                         agenttool.Options
		to                           mcptool.ToolOptions
	}{
		{name: "a decimal multipleOf", schema: `{"type": "object", "required": ["to"],
		  "properties": {"to": {"type": "string"}, "amount": {"type": "number", "multipleOf": 0.01}}}`,
			takes: `{"to":"#team","amount":19.99}`, refuses: `{"to":"#team","amount":"19.99"}`},
		{name: "a pattern's \\w", schema: `{"type": "object", "required": ["to"],
		  "properties": {"to": {"type": "string", "pattern": "^[\\w ]+$"}}}`,
			takes: `{"to":"José García"}`, refuses: `{"to":["José García"]}`},
		{name: "a pattern's \\s", schema: `{"type": "object", "required": ["to"],
		  "properties": {"to": {"type": "string", "pattern": "^#team\\s[a-z]+$"}}}`,
			takes: `{"to":"#team\u00a0lunch"}`, refuses: `{"to":true}`},
		{name: "a number beyond float64", schema: `{"type": "object", "required": ["to"],
		  "properties": {"to": {"type": "string"}, "data": {}}}`,
			takes: `{"to":"#team","data":1e400}`, refuses: `{"data":1}`},
		{name: "numbers float64 makes one", schema: `{"type": "object", "required": ["to"],
		  "properties": {"to": {"type": "string"}, "ids": {"type": "array", "items": {"type": "integer"}, "uniqueItems": true}}}`,
			takes: `{"to":"#team","ids":[1234567890123456789,1234567890123456788]}`, refuses: `{"to":"#team","ids":[5,5]}`},
		{name: "the reference argument's value", schema: `{"type": "object", "required": ["to", "ref"],
		  "properties": {"to": {"type": "string"}, "ref": {"type": "string", "maxLength": 40}}}`,
			opts: agenttool.Options{KeyPrefix: "msg"}, to: mcptool.ToolOptions{RefArgument: "ref"},
			takes: `{"to":"#team"}`, refuses: `{"to":7}`},
	} {
		tool, sessions, err := validating(t, c.schema, c.opts, c.to)
		if err != nil {
			t.Errorf("%s: %v, want a tool", c.name, err)
			continue
		}
		ctx := agenttool.WithScope(context.Background(), "ana", "chat-1")
		if env := tool.Invoke(ctx, c.refuses); env.Error == nil || env.Error.Code != envelope.CodeInvalidInput || sessions.asked.Load() != 0 {
			t.Errorf("%s: %s: %s, want invalid_input, nothing sent", c.name, c.refuses, env)
		}
		if env := tool.Invoke(ctx, c.takes); sessions.asked.Load() != 1 {
			t.Errorf("%s: %s: %s, want it sent: a server may take it", c.name, c.takes, env)
		}
	}
}

// A server's schema cannot make the check cost without bound: a $ref that
// comes back to itself without reading deeper into the arguments (which
// would recurse until the process dies of a stack overflow), or $refs
// that branch into more paths than a call should walk (2^40 here), make
// the schema unreadable for checking (ErrSchemaUnreadable: the guard
// leaves such a tool unchecked), and a schema that recurses as the
// arguments nest (a tree) is still read and checks.
func TestValidateArgumentsCostIsBoundedWhateverTheSchema(t *testing.T) {
	branching := `"d40": {"type": "string"}`
	for i := 39; i >= 0; i-- {
		branching += fmt.Sprintf(`, "d%d": {"anyOf": [{"$ref": "#/$defs/d%d"}, {"$ref": "#/$defs/d%[2]d"}]}`, i, i+1)
	}
	for name, schema := range map[string]string{
		"a $ref to itself": `{"type": "object", "required": ["to"], "$defs": {"loop": {"$ref": "#/$defs/loop"}},
		  "properties": {"to": {"$ref": "#/$defs/loop"}}}`,
		"the root, in place": `{"type": "object", "required": ["to"], "allOf": [{"$ref": "#"}], "properties": {"to": {"type": "string"}}}`,
		"two $refs in a ring": `{"type": "object", "required": ["to"], "$defs": {"a": {"anyOf": [{"$ref": "#/$defs/b"}]}, "b": {"not": {"$ref": "#/$defs/a"}}},
		  "properties": {"to": {"$ref": "#/$defs/a"}}}`,
		"2^40 paths": `{"type": "object", "required": ["to"], "$defs": {` + branching + `}, "properties": {"to": {"$ref": "#/$defs/d0"}}}`,
	} {
		if _, _, err := validating(t, schema, agenttool.Options{}, mcptool.ToolOptions{}); !errors.Is(err, mcptool.ErrSchemaUnreadable) {
			t.Errorf("%s: %v, want ErrSchemaUnreadable (checking a call would not end)", name, err)
		}
	}
	tool, sessions, err := validating(t, `{"type": "object", "required": ["to", "tree"], "$defs": {"node": {"type": "object",
	  "properties": {"label": {"type": "string"}, "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}}}},
	  "properties": {"to": {"type": "string"}, "tree": {"$ref": "#/$defs/node"}}}`, agenttool.Options{}, mcptool.ToolOptions{})
	if err != nil {
		t.Fatalf("a tree: %v, want a tool", err)
	}
	ctx := agenttool.WithScope(context.Background(), "ana", "chat-1")
	deep := `{"label":"a","children":[{"label":"b","children":[{"label":3}]}]}`
	if env := tool.Invoke(ctx, `{"to":"#team","tree":`+deep+`}`); env.Error == nil || env.Error.Code != envelope.CodeInvalidInput || sessions.asked.Load() != 0 {
		t.Errorf("a tree with a number for a label: %s, want invalid_input", env)
	}
}

// A refusal tells the model what is wrong in a few lines, however large
// what it sent (the validator quotes a refused string whole) or the
// schema (an enum of thousands, every branch of an anyOf).
func TestValidateArgumentsRefusalIsShort(t *testing.T) {
	var enum []string
	for i := range 5000 {
		enum = append(enum, fmt.Sprintf("%q", fmt.Sprintf("#channel-%d", i)))
	}
	tool, _, err := validating(t, `{"type": "object", "required": ["to", "text"],
	  "properties": {"to": {"enum": [`+strings.Join(enum, ",")+`]}, "text": {"type": "string", "maxLength": 200}}}`, agenttool.Options{}, mcptool.ToolOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := agenttool.WithScope(context.Background(), "ana", "chat-1")
	for _, input := range []string{`{"to":"#channel-1","text":"` + strings.Repeat("Lunch at one? ", 20000) + `"}`, `{"to":"#team","text":"Lunch at one?"}`} {
		env := tool.Invoke(ctx, input)
		if env.Error == nil || env.Error.Code != envelope.CodeInvalidInput || len(env.Error.Message) > 2000 {
			t.Errorf("a refusal of %d bytes of input: code %v, a message of %d bytes; want invalid_input in at most 2000", len(input), env.Error, len(env.Error.Message))
		}
	}
}
