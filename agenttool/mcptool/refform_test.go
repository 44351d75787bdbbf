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
// argument takes: the reference, or its UUID form; an argument that takes
// neither is refused when the tool is made, since every call would be
// refused by the server after it was sent.
func TestRefFormFitsWhatTheArgumentTakes(t *testing.T) {
	for _, c := range []struct {
		name, key string // the key argument's schema
		want      mcptool.RefForm
		refused   string // what the error names, if refused
	}{
		{"a string", `{"type": "string"}`, mcptool.RefPlain, ""},
		{"anything", `true`, mcptool.RefPlain, ""},
		{"a long enough string", `{"type": "string", "maxLength": 255}`, mcptool.RefPlain, ""},
		{"a UUID", `{"type": "string", "format": "uuid"}`, mcptool.RefUUIDForm, ""},
		{"36 characters at most", `{"type": "string", "maxLength": 36}`, mcptool.RefUUIDForm, ""},
		{"hex and dashes", `{"type": "string", "pattern": "^[0-9a-fA-F-]{36}$"}`, mcptool.RefUUIDForm, ""},
		{"a UUID by $ref", `{"$ref": "#/$defs/key"}`, mcptool.RefUUIDForm, ""},
		{"8 characters at most", `{"type": "string", "maxLength": 8}`, 0, "maxLength"},
		{"letters only", `{"type": "string", "pattern": "^[a-z]+$"}`, 0, "pattern"},
		{"a version 4 UUID", `{"type": "string", "format": "uuid", "pattern": "^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$"}`, 0, "version 5"},
		{"a number", `{"type": "integer"}`, 0, "type"},
	} {
		t.Run(c.name, func(t *testing.T) {
			schema := `{"type": "object", "required": ["seat"], "$defs": {"key": {"type": "string", "maxLength": 36}},
			  "properties": {"seat": {"type": "string"}, "idempotency_key": ` + c.key + `}}`
			tool := &mcp.Tool{Name: "book", InputSchema: json.RawMessage(schema)}
			form, err := mcptool.RefFormFor(tool, "idempotency_key", "book")
			switch {
			case c.refused == "" && (err != nil || form != c.want):
				t.Errorf("RefFormFor: %v, %v; want %v", form, err, c.want)
			case c.refused != "" && (!errors.Is(err, mcptool.ErrRefRefused) || !strings.Contains(err.Error(), c.refused)):
				t.Errorf("RefFormFor: %v, %v; want ErrRefRefused naming %s", form, err, c.refused)
			}
			_, err = mcptool.NewToolWith(nil, tool, agenttool.Options{Store: memstore.New(), Class: agenttool.Keyed},
				mcptool.ToolOptions{Sessions: &noSession{}, RefArgument: "idempotency_key"})
			if (c.refused != "") != errors.Is(err, agenttool.ErrInvalidOptions) {
				t.Errorf("NewToolWith: %v; want it refused: %v", err, c.refused != "")
			}
		})
	}
	ref := "book/abcdefghijklmnopqrstuvwxyz234567"
	if u, err := uuid.Parse(mcptool.RefUUIDForm.Of(ref)); err != nil || u.Version() != 5 || mcptool.RefPlain.Of(ref) != ref || mcptool.RefUUIDForm.Of(ref) != agenttool.RefUUID(ref) {
		t.Errorf("the forms of %s: %s (%v), %s", ref, mcptool.RefUUIDForm.Of(ref), err, mcptool.RefPlain.Of(ref))
	}
}
