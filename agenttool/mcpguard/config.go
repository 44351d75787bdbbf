package mcpguard

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"time"
)

// Config is a guard's configuration: the mcpServers block of a desktop
// client's configuration, as it is, with guard settings added. Parse it
// with [ParseConfig] or [LoadConfig]; a Config built in code is checked by
// [New] the same way.
//
//	{
//	  "store": {"path": "guard.db"},
//	  "principal": "ana@example.com",
//	  "mcpServers": {
//	    "payments": {
//	      "command": "payments-mcp", "args": ["--live"], "env": {"API_KEY": "${PAYMENTS_KEY}"},
//	      "tools": {
//	        "create_charge": {"class": "keyed", "key_argument": "idempotency_key"},
//	        "send_receipt": {"class": "at_most_once"},
//	        "get_charge": {"class": "read_only"}
//	      }
//	    }
//	  }
//	}
type Config struct {
	// MCPServers are the servers the guard stands in front of, by name.
	MCPServers map[string]*Server `json:"mcpServers"`
	// Default is what becomes of a tool that no Tools map names, listed at
	// start or later: "refuse" (the default: the client does not see it),
	// "read_only" (passed through untouched, with a warning in the log),
	// or a tool's settings, as in a Tools map.
	Default *Default `json:"default,omitempty"`
	// Store is where keys and outcomes are kept.
	Store StoreConfig `json:"store"`
	// Principal is who acts over stdio, where no token says who: the
	// guard's user. Required for a stdio front.
	Principal string `json:"principal,omitempty"`
	// Conversation names where a call carries its conversation, for a
	// client that sends one; without it every call of a principal is in
	// one conversation (see the package documentation).
	Conversation *Conversation `json:"conversation,omitempty"`
	// InputKey is the key (32 bytes, in hex: `openssl rand -hex 32`) that
	// seals the inputs a reconcilable tool's check reads ("${input…}"),
	// which the store keeps while an action may be unknown. Write it as a
	// ${VARIABLE} of the guard's environment. Required when a check reads
	// the input.
	InputKey string `json:"input_key,omitempty"`
	// Tokens are the bearer tokens an HTTP front accepts, by the principal
	// each stands for. Write them as ${VARIABLES} of the guard's
	// environment rather than in the file. [Config.Verifier] checks them.
	Tokens map[string]string `json:"tokens,omitempty"`
	// OAuth makes an HTTP front an OAuth resource server: tokens an
	// authorization server issued for the guard are accepted too, each
	// for the principal it names.
	OAuth *OAuth `json:"oauth,omitempty"`
}

// Server is one upstream MCP server: a command the guard runs (stdio), or
// a URL (streamable HTTP). The keys of a desktop client's entry are read
// as that client writes them; others it may carry (disabled, autoApprove
// and the like) are ignored.
type Server struct {
	// Command, Args and Env start a server over stdio. Env adds to the
	// guard's environment. Values may name variables of the guard's
	// environment as ${NAME}.
	Command string            `json:"command,omitempty"`
	Args    []string          `json:"args,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
	// Type is "stdio", "http" or "streamable-http", or "sse" for a legacy
	// HTTP+SSE server (its SSE endpoint is the URL); empty means stdio for
	// a command and streamable HTTP for a URL.
	Type string `json:"type,omitempty"`
	// URL and Headers reach a server over streamable HTTP.
	URL     string            `json:"url,omitempty"`
	Headers map[string]string `json:"headers,omitempty"`
	// Prefix is put before the names of the server's tools as the client
	// sees them, for servers whose tools' names clash.
	Prefix string `json:"prefix,omitempty"`
	// Tools are the guard's settings for the server's tools, by name.
	Tools map[string]*Tool `json:"tools,omitempty"`
}

// Tool is the guard's settings for one tool.
type Tool struct {
	// Class is read_only, keyed, at_most_once or reconcilable.
	Class string `json:"class"`
	// KeyArgument, for a keyed tool, names the argument in which the
	// server takes an idempotency key: the guard fills it with the
	// action's request reference, and hides it from the schema the client
	// sees. "_meta" says that the server is a retrysafe server, which
	// keys a repeated call itself.
	KeyArgument string `json:"key_argument,omitempty"`
	// RefArgument, for at_most_once and reconcilable tools, names an
	// argument in which the server keeps a client reference: the guard
	// fills it with the request reference and hides it, so that a check
	// (or a person) finds the action by it.
	RefArgument string `json:"ref_argument,omitempty"`
	// KeyForm is the form in which the guard fills KeyArgument or
	// RefArgument: "reference" (the default), the request reference;
	// "uuid", its UUID form, for a server that takes a UUID there; or
	// "uuid4", that UUID with a version 4 UUID's bits, for a server that
	// takes only those (pydantic's UUID4). An argument whose schema asks
	// for a UUID, or refuses the reference, needs it said: the guard
	// cannot tell whether the server takes any string there, and after a
	// change of form the actions still unknown wait for a person.
	KeyForm string `json:"key_form,omitempty"`
	// Check, for a reconcilable tool, asks the server what became of an
	// action whose outcome is unknown.
	Check *Check `json:"check,omitempty"`
	// Identifying are the input's fields that tell one action from
	// another. Default: the properties the input schema requires.
	Identifying []string `json:"identifying,omitempty"`
	// KeyTTL is how long an action's key and outcome are kept, as a Go
	// duration ("24h"). Default: 24h.
	KeyTTL Duration `json:"key_ttl,omitempty"`
	// AttemptTimeout bounds one call to the server, as a Go duration:
	// past it the call is unknown, and a check's "not applied" is trusted
	// only once that long (plus the clock skew) has passed since the last
	// attempt was sent, because a request the server took may still land
	// until then. Default: 60s. A server that applies a request later than
	// that after it was sent must have a longer one.
	AttemptTimeout Duration `json:"attempt_timeout,omitempty"`
	// ListenLate is how long, after AttemptTimeout passed, the guard goes
	// on listening for the server's answer to that attempt, as a Go
	// duration, before it cancels the call at the server: an answer that
	// comes in time settles the unknown outcome (a result: applied, with
	// it; a refusal the tool's errors setting reads as definite: not
	// applied). Default: the tool's attempt_timeout; "0s" cancels the
	// call at the deadline. The request may land as long as the guard
	// listens, so a check's "not applied" is trusted only once both have
	// passed since the last attempt was sent: a longer window hears more
	// late answers and holds a retry longer. A keyed tool's call is
	// cancelled at its key's deadline (destination_key_ttl) whatever the
	// window. A call the client cancels is cancelled at the server at once.
	ListenLate *Duration `json:"listen_late,omitempty"`
	// DestinationKeyTTL, for a keyed tool, is how long the server keeps an
	// idempotency key, as a Go duration. Default: 24h.
	DestinationKeyTTL Duration `json:"destination_key_ttl,omitempty"`
	// Errors says what a result with isError means: "unknown" (the
	// default: MCP reports every failure so, also one after the tool
	// acted) or "definite" (the server reports isError only for calls
	// that changed nothing).
	Errors string `json:"errors,omitempty"`
}

// Check is how the guard asks a server about an action: it calls another
// tool of the server, which must be read-only, and reads its answer.
type Check struct {
	// Tool is the read-only tool to call.
	Tool string `json:"tool"`
	// Arguments are its arguments. A string, at any depth, is replaced whole:
	// "${ref}" by the action's request reference, "${input}" by the
	// arguments the action was called with, "${input/POINTER}" by the
	// value a JSON pointer (RFC 6901) finds in them ("${input/to}"). A
	// check that reads the input makes the guard keep it, sealed with
	// Config.InputKey, while the action may be unknown.
	Arguments map[string]any `json:"arguments,omitempty"`
	// Applied and NotApplied read the answer (its structured content, or
	// its text as JSON): the first that matches decides; neither, or an
	// answer with isError, is "cannot say yet".
	Applied    *Match `json:"applied,omitempty"`
	NotApplied *Match `json:"not_applied,omitempty"`
	// InputIdentifies says that at the server, what the check reads of
	// the input identifies one effect: two actions that asked the same
	// are the same effect (an entity by its unique name, a file by its
	// path). Without it, a check that finds the action by its input and
	// not by its reference cannot tell it from another action that asked
	// the same — another conversation's, another user's — and its
	// "applied" is "cannot say": a person settles it. Its "not applied"
	// holds either way.
	InputIdentifies bool `json:"input_identifies,omitempty"`
}

// Match reads one value of a check's answer.
type Match struct {
	// Pointer is a JSON pointer (RFC 6901) into the answer: "/status".
	// "" is the whole answer.
	Pointer string `json:"pointer"`
	// Equals is the value it must have (null is a value: it matches only
	// null); without it the value must only exist. Numbers compare by
	// value.
	Equals any `json:"equals,omitempty"`
	// HasEquals says that Equals was given: set by the configuration's
	// reader, and by a program that builds a Match with Equals nil to
	// mean null.
	HasEquals bool `json:"-"`
	// Absent matches when the pointer leads nowhere (no such member).
	Absent bool `json:"absent,omitempty"`
}

// StoreConfig says where the guard keeps its keys and outcomes.
type StoreConfig struct {
	// Path is a bbolt file, the default store. Default: retrysafe-guard.db
	// in the working directory.
	Path string `json:"path,omitempty"`
	// Postgres is a PostgreSQL connection URL, for several guards sharing
	// one store; it replaces Path. It may name ${VARIABLES}.
	Postgres string `json:"postgres,omitempty"`
}

// Conversation names where a call carries its conversation: what the
// client sets, never the model. Name one. (An argument would be the
// model's to write: a model told that an action's outcome is unknown
// could name another conversation and escape the fence that holds it.)
type Conversation struct {
	// Meta is a key of the call's _meta.
	Meta string `json:"meta,omitempty"`
	// Header is a header of the HTTP request that carries the call (an
	// HTTP front only; a call without it is in the principal's one
	// conversation). Trust it only if your own code sets it.
	Header string `json:"header,omitempty"`
}

// Default is Config.Default: "refuse", "read_only", or a tool's settings.
type Default struct {
	Policy string // "refuse" or "read_only", if Tool is nil
	Tool   *Tool
}

// UnmarshalJSON reads a policy name or a tool's settings.
func (d *Default) UnmarshalJSON(b []byte) error {
	var s string
	if json.Unmarshal(b, &s) == nil {
		*d = Default{Policy: s}
		return nil
	}
	var t Tool
	if err := strictDecode(b, &t); err != nil {
		return err
	}
	*d = Default{Tool: &t}
	return nil
}

// MarshalJSON writes what UnmarshalJSON reads.
func (d Default) MarshalJSON() ([]byte, error) {
	if d.Tool != nil {
		return json.Marshal(d.Tool)
	}
	return json.Marshal(d.Policy)
}

// UnmarshalJSON reads a tool's settings, refusing unknown keys: a
// misspelt setting must not leave a tool unguarded.
func (t *Tool) UnmarshalJSON(b []byte) error {
	type plain Tool
	return strictDecode(b, (*plain)(t))
}

// UnmarshalJSON reads where the conversation is, refusing unknown keys,
// and an argument with the reason.
func (c *Conversation) UnmarshalJSON(b []byte) error {
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(b, &keys); err == nil {
		if _, ok := keys["argument"]; ok {
			return errors.New("conversation.argument: arguments are the model's to write, and a model told that an action's outcome " +
				"is unknown could name another conversation and escape the fence that holds it; name where the client sets it: meta or header")
		}
	}
	type plain Conversation
	return strictDecode(b, (*plain)(c))
}

// UnmarshalJSON reads a check, refusing unknown keys.
func (c *Check) UnmarshalJSON(b []byte) error {
	type plain Check
	return strictDecode(b, (*plain)(c))
}

// UnmarshalJSON reads a match, refusing unknown keys, and telling
// "equals": null from no equals.
func (m *Match) UnmarshalJSON(b []byte) error {
	type plain Match
	if err := strictDecode(b, (*plain)(m)); err != nil {
		return err
	}
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(b, &keys); err != nil {
		return err
	}
	_, m.HasEquals = keys["equals"]
	return nil
}

func strictDecode(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	dec.UseNumber()
	return dec.Decode(v)
}

// Duration is a time.Duration written as a Go duration string ("24h").
type Duration time.Duration

// UnmarshalJSON reads "90s", "24h" and the like.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("a duration is a string such as \"24h\" or \"90s\", not %s", b)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("a duration such as \"24h\" or \"90s\": %w", err)
	}
	*d = Duration(v)
	return nil
}

// MarshalJSON writes the duration as a string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// The classes a Tool may have.
const (
	ClassReadOnly     = "read_only"
	ClassKeyed        = "keyed"
	ClassAtMostOnce   = "at_most_once"
	ClassReconcilable = "reconcilable"
)

// The forms of Tool.KeyForm.
const (
	KeyFormReference = "reference"
	KeyFormUUID      = "uuid"
	KeyFormUUID4     = "uuid4"
)

// MetaKey is Tool.KeyArgument's value for a retrysafe upstream.
const MetaKey = "_meta"

// LoadConfig reads and checks the configuration file at path.
func LoadConfig(path string) (*Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("mcpguard: reading the configuration: %w", err)
	}
	cfg, err := ParseConfig(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return cfg, nil
}

// ParseConfig reads and checks a configuration. Its errors name the field
// at fault by its path ("mcpServers.payments.tools.create_charge.class")
// and say how to fix it.
func ParseConfig(b []byte) (*Config, error) {
	var cfg Config
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(&cfg); err != nil {
		return nil, fmt.Errorf("mcpguard: the configuration is not valid JSON for a guard: %w", err)
	}
	if err := cfg.Check(); err != nil {
		return nil, err
	}
	return &cfg, nil
}

// ConfigError is a configuration error: the path of the field at fault,
// and what is wrong with it.
type ConfigError struct {
	Path    string
	Problem string
}

func (e *ConfigError) Error() string { return fmt.Sprintf("mcpguard: %s: %s", e.Path, e.Problem) }

// Check reports the configuration's errors, those that need no server to
// see: every one, joined, each a *ConfigError. [New] checks the rest
// against what the servers list.
func (c *Config) Check() error {
	var errs []error
	bad := func(path, format string, args ...any) {
		errs = append(errs, &ConfigError{Path: path, Problem: fmt.Sprintf(format, args...)})
	}
	if len(c.MCPServers) == 0 {
		bad("mcpServers", "no servers: name at least one, as a desktop client's configuration does")
	}
	if c.Store.Path != "" && c.Store.Postgres != "" {
		bad("store", "both path and postgres: give one (path for one guard, postgres for several sharing a store)")
	}
	if c.Default != nil {
		switch {
		case c.Default.Tool != nil:
			checkTool("default", c.Default.Tool, bad)
			if c.Default.Tool.Check != nil || c.Default.Tool.KeyArgument != "" || c.Default.Tool.RefArgument != "" || len(c.Default.Tool.Identifying) > 0 {
				bad("default", "settings for every tool cannot name a check, an argument or identifying fields: those belong to one tool")
			}
		case c.Default.Policy != "refuse" && c.Default.Policy != ClassReadOnly:
			bad("default", "%q is not a policy: use \"refuse\", \"read_only\", or a tool's settings ({\"class\": \"at_most_once\"})", c.Default.Policy)
		}
	}
	if cv := c.Conversation; cv != nil && (cv.Meta == "") == (cv.Header == "") {
		bad("conversation", "name one of meta or header")
	}
	seenTokens := map[string]string{}
	for _, p := range slices.Sorted(maps.Keys(c.Tokens)) {
		if p == "" {
			bad("tokens", "a token for an empty principal")
		}
		switch tok := c.Tokens[p]; {
		case tok == "":
			bad("tokens."+p, "empty token")
		case seenTokens[tok] != "":
			bad("tokens."+p, "the same token as %s: a token stands for one principal", seenTokens[tok])
		default:
			seenTokens[tok] = p
		}
	}
	if c.OAuth != nil {
		c.OAuth.check(bad)
	}
	prefixes := map[string]string{}
	for _, name := range slices.Sorted(maps.Keys(c.MCPServers)) {
		s := c.MCPServers[name]
		path := "mcpServers." + name
		if s == nil {
			bad(path, "empty: give a command or a url")
			continue
		}
		switch {
		case s.Command == "" && s.URL == "":
			bad(path, "neither command nor url: the guard needs one to reach the server")
		case s.Command != "" && s.URL != "":
			bad(path, "both command and url: give one")
		}
		switch s.Type {
		case "":
		case "stdio":
			if s.Command == "" {
				bad(path+".type", "stdio needs a command")
			}
		case "http", "streamable-http", "streamableHttp":
			if s.URL == "" {
				bad(path+".type", "%s needs a url", s.Type)
			}
		case "sse":
			if s.URL == "" {
				bad(path+".type", "sse needs a url: the server's SSE endpoint")
			}
		default:
			bad(path+".type", "%q is not a transport: use stdio, http for streamable HTTP, or sse for a legacy HTTP+SSE server", s.Type)
		}
		if other, ok := prefixes[s.Prefix]; ok && s.Prefix != "" {
			bad(path+".prefix", "%q is the prefix of %s too", s.Prefix, other)
		}
		prefixes[s.Prefix] = name
		for _, tn := range slices.Sorted(maps.Keys(s.Tools)) {
			t := s.Tools[tn]
			tp := path + ".tools." + tn
			if t == nil {
				bad(tp, "empty: give a class")
				continue
			}
			checkTool(tp, t, bad)
			if t.Check.readsInput() && c.InputKey == "" {
				bad(tp+".check.arguments", "the check reads the action's input, which the guard keeps sealed while the action may be unknown: "+
					"set input_key (32 random bytes in hex, as a ${VARIABLE}: openssl rand -hex 32)")
			}
			switch {
			case t.KeyArgument == MetaKey && c.OAuth != nil:
				bad(tp+".key_argument", "a retrysafe server keys a repeated call by its own caller, which is the guard for every "+
					"principal OAuth tokens name: two users' identical calls would be one action there. Use at_most_once or "+
					"reconcilable for this tool, or run one guard per user")
			case t.KeyArgument == MetaKey && len(c.Tokens) > 1:
				bad(tp+".key_argument", "a retrysafe server keys a repeated call by its own caller, which is the guard for every "+
					"one of the %d principals of tokens: two users' identical calls would be one action there. Use at_most_once or "+
					"reconcilable for this tool, or run one guard per user", len(c.Tokens))
			case t.KeyArgument == MetaKey && c.Conversation != nil:
				bad(tp+".key_argument", "a retrysafe server keys a repeated call by its own caller and session, and the guard sends it nothing "+
					"of the conversation it scopes actions by: two conversations' identical calls, two actions here, would be one action there, "+
					"and the second answered with the first's result. Use at_most_once or reconcilable for this tool, or drop conversation")
			}
			if t.Check != nil && t.Check.Tool != "" {
				switch ct := s.Tools[t.Check.Tool]; {
				case ct == nil:
					bad(tp+".check.tool", "%q is not named in this server's tools: name it there as {\"class\": \"read_only\"}, saying that it only reads", t.Check.Tool)
				case ct.Class != ClassReadOnly:
					bad(tp+".check.tool", "%q is class %s here; a check must only read: make it read_only, or check with another tool", t.Check.Tool, ct.Class)
				}
			}
		}
	}
	return errors.Join(errs...)
}

// checkTool checks one tool's settings.
func checkTool(path string, t *Tool, bad func(path, format string, args ...any)) {
	switch t.Class {
	case ClassReadOnly, ClassKeyed, ClassAtMostOnce, ClassReconcilable:
	case "":
		bad(path+".class", "missing: give read_only, keyed, at_most_once or reconcilable")
		return
	default:
		bad(path+".class", "%q is not a class: use read_only, keyed, at_most_once or reconcilable", t.Class)
		return
	}
	if t.Class == ClassKeyed && t.KeyArgument == "" {
		bad(path+".key_argument", "a keyed tool needs the argument in which its server takes an idempotency key (\"idempotency_key\"), "+
			"or \"_meta\" for a retrysafe server; a server without one is at_most_once or reconcilable")
	}
	if t.Class != ClassKeyed && t.KeyArgument != "" {
		bad(path+".key_argument", "only a keyed tool has one; for a %s tool, name where its server keeps a reference as ref_argument", t.Class)
	}
	if t.RefArgument != "" && (t.Class == ClassReadOnly || t.Class == ClassKeyed) {
		bad(path+".ref_argument", "only at_most_once and reconcilable tools have one (a keyed tool's reference goes in its key_argument)")
	}
	switch {
	case t.KeyForm != "" && t.KeyForm != KeyFormReference && t.KeyForm != KeyFormUUID && t.KeyForm != KeyFormUUID4:
		bad(path+".key_form", "%q is not a form: use %q (the request reference), %q (its UUID form) or %q (its UUID form with a version 4 UUID's bits)",
			t.KeyForm, KeyFormReference, KeyFormUUID, KeyFormUUID4)
	case t.KeyForm != "" && (t.KeyArgument == "" || t.KeyArgument == MetaKey) && t.RefArgument == "":
		bad(path+".key_form", "it is the form of the reference in key_argument or ref_argument, and the tool has neither")
	}
	if t.Class == ClassReconcilable && t.Check == nil {
		bad(path+".check", "a reconcilable tool needs a check: a read-only tool of the same server that finds the action by its reference")
	}
	if t.Check != nil {
		if t.Class != ClassReconcilable {
			bad(path+".check", "only a reconcilable tool has a check")
		}
		checkCheck(path+".check", t.Check, bad)
	}
	if t.Class == ClassReadOnly && (len(t.Identifying) > 0 || t.KeyTTL != 0 || t.AttemptTimeout != 0 || t.ListenLate != nil) {
		bad(path, "a read_only tool is passed through: it has no identifying fields, key lifetime, attempt timeout or late answers")
	}
	if t.ListenLate != nil && *t.ListenLate < 0 {
		bad(path+".listen_late", "negative: \"0s\" cancels a call at its deadline")
	}
	if t.KeyTTL < 0 {
		bad(path+".key_ttl", "negative")
	}
	if t.AttemptTimeout < 0 {
		bad(path+".attempt_timeout", "negative")
	}
	if t.DestinationKeyTTL != 0 && t.Class != ClassKeyed {
		bad(path+".destination_key_ttl", "only a keyed tool's server keeps keys")
	}
	switch t.Errors {
	case "", "unknown", "definite":
	default:
		bad(path+".errors", "%q: use unknown (the default) or definite", t.Errors)
	}
	for i, f := range t.Identifying {
		if f == t.KeyArgument || f == t.RefArgument {
			bad(fmt.Sprintf("%s.identifying[%d]", path, i), "%q is the argument the guard fills with the reference; it cannot tell actions apart", f)
		}
	}
}

func checkCheck(path string, c *Check, bad func(path, format string, args ...any)) {
	if c.Tool == "" {
		bad(path+".tool", "missing: name a read-only tool of the same server")
	}
	if c.Applied == nil && c.NotApplied == nil {
		bad(path, "neither applied nor not_applied: the check could never say anything")
	}
	finds := 0
	for _, k := range slices.Sorted(maps.Keys(c.Arguments)) {
		strings_(c.Arguments[k], func(s string) {
			if !strings.Contains(s, "${") {
				return
			}
			if _, ok := placeholder(s); !ok {
				bad(path+".arguments."+k, "%q: a placeholder is the whole value: \"${ref}\", \"${input}\" or \"${input/POINTER}\"", s)
			}
			finds++
		})
	}
	if finds == 0 {
		bad(path+".arguments", "no argument finds the action: use \"${ref}\" (give the tool a ref_argument where its server keeps it) or \"${input/…}\", what the action asked for")
	}
	for name, m := range map[string]*Match{"applied": c.Applied, "not_applied": c.NotApplied} {
		if m == nil {
			continue
		}
		if m.Pointer != "" && !strings.HasPrefix(m.Pointer, "/") {
			bad(path+"."+name+".pointer", "%q is not a JSON pointer: it starts with / (\"/status\"), or is \"\" for the whole answer", m.Pointer)
		}
		if m.Absent && (m.Equals != nil || m.HasEquals) {
			bad(path+"."+name, "absent and equals together can never match")
		}
	}
}

// placeholder reads a check argument's placeholder: "ref", or "input"
// with a JSON pointer ("" for the whole input). ok is false for a string
// that is not one.
func placeholder(s string) (p string, ok bool) {
	switch {
	case s == "${ref}":
		return "ref", true
	case s == "${input}":
		return "input", true
	case strings.HasPrefix(s, "${input/") && strings.HasSuffix(s, "}"):
		return "input" + s[len("${input"):len(s)-1], true
	}
	return "", false
}

// readsInput reports whether the check's arguments read the action's
// input.
func (c *Check) readsInput() bool {
	if c == nil {
		return false
	}
	reads := false
	for _, v := range c.Arguments {
		strings_(v, func(s string) {
			if p, ok := placeholder(s); ok && strings.HasPrefix(p, "input") {
				reads = true
			}
		})
	}
	return reads
}

// strings_ calls fn with every string in v, a check argument's value, at
// any depth of its objects and arrays.
func strings_(v any, fn func(string)) {
	switch x := v.(type) {
	case string:
		fn(x)
	case []any:
		for _, e := range x {
			strings_(e, fn)
		}
	case map[string]any:
		for _, e := range x {
			strings_(e, fn)
		}
	}
}
