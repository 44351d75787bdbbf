package mcptool_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/retrysafe/retrysafe/agenttool"
	"github.com/retrysafe/retrysafe/agenttool/mcptool"
	"github.com/retrysafe/retrysafe/agenttool/memstore"
)

// A request reference goes where a server takes it in the form that
// argument takes: RefFormFor reads which from its schema, and NewToolWith
// refuses a form the schema refuses (every call would be refused by the
// server after it was sent), naming the form it takes.
func TestRefFormFitsWhatTheArgumentTakes(t *testing.T) {
	for _, c := range []struct {
		name, key    string // the key argument's schema
		want         mcptool.RefForm
		refused      string // what RefFormFor's error names, if it finds no form
		plainRefused bool   // NewToolWith refuses the reference itself
	}{
		{"a string", `{"type": "string"}`, mcptool.RefPlain, "", false},
		{"anything", `true`, mcptool.RefPlain, "", false},
		{"a long enough string", `{"type": "string", "maxLength": 255}`, mcptool.RefPlain, "", false},
		{"a UUID", `{"type": "string", "format": "uuid"}`, mcptool.RefUUIDForm, "", false},
		{"36 characters at most", `{"type": "string", "maxLength": 36}`, mcptool.RefUUIDForm, "", true},
		{"hex and dashes", `{"type": "string", "pattern": "^[0-9a-fA-F-]{36}$"}`, mcptool.RefUUIDForm, "", true},
		{"a UUID by $ref", `{"$ref": "#/$defs/key"}`, mcptool.RefUUIDForm, "", true},
		{"8 characters at most", `{"type": "string", "maxLength": 8}`, 0, "maxLength", true},
		{"letters only", `{"type": "string", "pattern": "^[a-z]+$"}`, 0, "pattern", true},
		{"a version 4 UUID", `{"type": "string", "format": "uuid", "pattern": "^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$"}`, mcptool.RefUUID4Form, "", true},
		{"a version 1 UUID", `{"type": "string", "format": "uuid", "pattern": "^[0-9a-f]{8}-[0-9a-f]{4}-1[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$"}`, 0, "pattern", true},
		// However the schema says it asks for a UUID: under anyOf (an
		// optional UUID, as pydantic writes one), behind a $ref, for a
		// version (pydantic's UUID4).
		{"an optional UUID", `{"anyOf": [{"type": "string", "format": "uuid"}, {"type": "null"}], "default": null}`, mcptool.RefUUIDForm, "", false},
		{"a UUID by $ref to its format", `{"$ref": "#/$defs/uuid"}`, mcptool.RefUUIDForm, "", false},
		{"a version 5 UUID by format", `{"type": "string", "format": "uuid5"}`, mcptool.RefUUIDForm, "", false},
		{"a version 4 UUID by format", `{"type": "string", "format": "uuid4"}`, mcptool.RefUUID4Form, "", false},
		{"a version 7 UUID by format", `{"type": "string", "format": "uuid7"}`, 0, "refuses the UUID forms", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			schema := `{"type": "object", "required": ["seat"], "$defs": {"key": {"type": "string", "maxLength": 36}, "uuid": {"type": "string", "format": "uuid"}},
			  "properties": {"seat": {"type": "string"}, "idempotency_key": ` + c.key + `}}`
			tool := &mcp.Tool{Name: "book", InputSchema: json.RawMessage(schema)}
			form, err := mcptool.RefFormFor(tool, "idempotency_key", "book")
			switch {
			case c.refused == "" && (err != nil || form != c.want):
				t.Errorf("RefFormFor: %v, %v; want %v", form, err, c.want)
			case c.refused != "" && (!errors.Is(err, mcptool.ErrRefRefused) || !strings.Contains(err.Error(), c.refused)):
				t.Errorf("RefFormFor: %v, %v; want ErrRefRefused naming %s", form, err, c.refused)
			}
			make := func(f mcptool.RefForm) error {
				_, err := mcptool.NewToolWith(nil, tool, agenttool.Options{Store: memstore.New(), Class: agenttool.Keyed},
					mcptool.ToolOptions{Sessions: &noSession{}, RefArgument: "idempotency_key", RefForm: f})
				return err
			}
			if err := make(mcptool.RefPlain); c.plainRefused != errors.Is(err, mcptool.ErrRefRefused) {
				t.Errorf("NewToolWith, the reference itself: %v; want it refused: %v", err, c.plainRefused)
			} else if c.plainRefused && c.refused == "" && !strings.Contains(err.Error(), "it takes "+c.want.String()) {
				t.Errorf("NewToolWith's refusal: %v; want it to name the form the argument takes", err)
			}
			if err := make(form); c.refused == "" && err != nil {
				t.Errorf("NewToolWith, %v as RefFormFor advised: %v", form, err)
			}
		})
	}
	// A UUID form goes only where the UUID asked for is of its version;
	// the reference itself, where the operator says so, whatever the
	// format says.
	v4 := &mcp.Tool{Name: "book", InputSchema: json.RawMessage(`{"type": "object", "required": ["seat"],
	  "properties": {"seat": {"type": "string"}, "idempotency_key": {"type": "string", "format": "uuid4"}}}`)}
	for f, refused := range map[mcptool.RefForm]bool{mcptool.RefUUIDForm: true, mcptool.RefUUID4Form: false, mcptool.RefPlain: false} {
		_, err := mcptool.NewToolWith(nil, v4, agenttool.Options{Store: memstore.New(), Class: agenttool.Keyed},
			mcptool.ToolOptions{Sessions: &noSession{}, RefArgument: "idempotency_key", RefForm: f})
		if refused != errors.Is(err, mcptool.ErrRefRefused) {
			t.Errorf("NewToolWith, %v, where a version 4 UUID is asked for: %v; want it refused: %v", f, err, refused)
		}
	}
	if _, err := mcptool.NewToolWith(nil, &mcp.Tool{Name: "book", InputSchema: json.RawMessage(`{"type": "object", "required": ["seat"],
	  "properties": {"seat": {"type": "string"}, "n": {"type": "integer"}}}`)}, agenttool.Options{Store: memstore.New(), Class: agenttool.Keyed},
		mcptool.ToolOptions{Sessions: &noSession{}, RefArgument: "n"}); !errors.Is(err, agenttool.ErrInvalidOptions) {
		t.Errorf("a reference argument of type integer: %v; want it refused", err)
	}
	ref := "book/abcdefghijklmnopqrstuvwxyz234567"
	if u, err := uuid.Parse(mcptool.RefUUIDForm.Of(ref)); err != nil || u.Version() != 5 || mcptool.RefPlain.Of(ref) != ref || mcptool.RefUUIDForm.Of(ref) != agenttool.RefUUID(ref) {
		t.Errorf("the forms of %s: %s (%v), %s", ref, mcptool.RefUUIDForm.Of(ref), err, mcptool.RefPlain.Of(ref))
	}
	// The version 4 form: the same UUID but for its version digit,
	// a valid version 4 UUID of RFC 9562's variant, another for another
	// reference.
	five, four := agenttool.RefUUID(ref), mcptool.RefUUID4Form.Of(ref)
	if u, err := uuid.Parse(four); err != nil || u.Version() != 4 || u.Variant() != uuid.RFC4122 || four != agenttool.RefUUID4(ref) ||
		four[:14] != five[:14] || four[14] != '4' || four[15:] != five[15:] || agenttool.RefUUID4(ref+"x") == four || agenttool.RefUUID4("") != "" {
		t.Errorf("the version 4 form of %s: %s (%v), beside %s", ref, four, err, five)
	}
}
