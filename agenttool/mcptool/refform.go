package mcptool

import (
	"errors"
	"fmt"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/retrysafe/retrysafe/agenttool"
)

// RefForm is the form in which a tool's calls send their request
// reference in its ToolOptions.RefArgument.
type RefForm uint8

const (
	// RefPlain is the reference itself (agenttool.RequestRef):
	// "book/" and 32 letters and digits of lower-case base32.
	RefPlain RefForm = iota
	// RefUUIDForm is its UUID form (agenttool.RequestUUID, a version 5
	// UUID), for a server that takes a UUID there.
	RefUUIDForm
)

// Of returns the value a call whose request reference is ref sends.
func (f RefForm) Of(ref string) string {
	if f == RefUUIDForm {
		return agenttool.RefUUID(ref)
	}
	return ref
}

func (f RefForm) String() string {
	if f == RefUUIDForm {
		return "its UUID form"
	}
	return "the reference"
}

// RefFormFor reads what the input schema of t says its argument arg
// takes, and returns the form of request reference that fits there: the
// reference itself, or its UUID form where the argument asks for a UUID
// ("format": "uuid") or refuses the reference — a maxLength under its
// length, a pattern — but takes a UUID. prefix is what the tool's
// references start with (agenttool.Options.KeyPrefix: by default the
// guarded tool's name). An argument that takes neither is an error that
// says what it refuses: every call would be refused by the server, and
// after it was sent (an unknown outcome, each time). A schema the check
// cannot read says nothing: RefPlain.
func RefFormFor(t *mcp.Tool, arg, prefix string) (RefForm, error) {
	root, err := readRoot(t)
	if err != nil {
		return RefPlain, nil
	}
	props, _ := root["properties"].(map[string]any)
	prop, ok := props[arg]
	if !ok {
		return RefPlain, nil
	}
	// The argument alone, with what its $refs may point to.
	alone := map[string]any{"type": "object", "properties": map[string]any{arg: prop}}
	for _, k := range []string{"$schema", "$id", "$defs", "definitions"} {
		if v, ok := root[k]; ok {
			alone[k] = v
		}
	}
	schema, err := resolveRoot(alone)
	if err != nil {
		return RefPlain, nil
	}
	plain := prefix + "/" + refSample
	uuid := agenttool.RefUUID(plain)
	m, _ := prop.(map[string]any)
	if m["format"] != "uuid" {
		plainErr := schema.Validate(map[string]any{arg: plain})
		if plainErr == nil {
			return RefPlain, nil
		}
		if schema.Validate(map[string]any{arg: uuid}) == nil {
			return RefUUIDForm, nil
		}
		return RefPlain, fmt.Errorf("%w: its argument %q takes neither a request reference nor its UUID form (%s, %s): %s",
			ErrRefRefused, arg, plain, uuid, clipped(strings.TrimSpace(plainErr.Error())))
	}
	if err := schema.Validate(map[string]any{arg: uuid}); err != nil {
		return RefPlain, fmt.Errorf("%w: its argument %q asks for a UUID, but refuses the version 5 UUIDs of request references (%s): %s",
			ErrRefRefused, arg, uuid, clipped(strings.TrimSpace(err.Error())))
	}
	return RefUUIDForm, nil
}

// ErrRefRefused is wrapped by the error of RefFormFor, and of
// NewToolWith, when a tool's reference argument takes neither form of a
// request reference.
var ErrRefRefused = errors.New("the argument refuses request references")

// refSample is a reference's part after its prefix, with every letter
// and digit a reference may hold.
const refSample = "abcdefghijklmnopqrstuvwxyz234567"
