package mcpguard_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/retrysafe/retrysafe/agenttool/mcpguard"
)

// A desktop client's mcpServers block pastes in as it is: its own keys
// are read or ignored, and a server without a tools map is all defaults.
func TestConfig_ADesktopClientsBlockPastesIn(t *testing.T) {
	cfg, err := mcpguard.ParseConfig([]byte(`{
	  "mcpServers": {
	    "filesystem": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/tmp"], "disabled": false, "autoApprove": []},
	    "remote": {"type": "http", "url": "https://example.com/mcp", "headers": {"Authorization": "Bearer ${TOKEN}"}}
	  }
	}`))
	if err != nil {
		t.Fatal(err)
	}
	if fs := cfg.MCPServers["filesystem"]; fs.Command != "npx" || len(fs.Args) != 3 {
		t.Errorf("filesystem: %+v", fs)
	}
}

// Every configuration error names the field at fault and the fix.
func TestConfig_ErrorsNameTheFieldAndTheFix(t *testing.T) {
	for _, tc := range []struct{ name, config, path, fix string }{
		{"no servers", `{}`, "mcpServers", "name at least one"},
		{"unknown class", `{"mcpServers": {"pay": {"command": "x", "tools": {"charge": {"class": "idempotent"}}}}}`,
			"mcpServers.pay.tools.charge.class", "read_only, keyed, at_most_once or reconcilable"},
		{"misspelt setting", `{"mcpServers": {"pay": {"command": "x", "tools": {"charge": {"class": "keyed", "key_arg": "k"}}}}}`,
			"not valid JSON for a guard", `unknown field "key_arg"`},
		{"keyed without key", `{"mcpServers": {"pay": {"command": "x", "tools": {"charge": {"class": "keyed"}}}}}`,
			"mcpServers.pay.tools.charge.key_argument", "idempotency_key"},
		{"oauth without introspection", `{"oauth": {"resource": "https://g.example.com/mcp", "authorization_servers": ["https://a.example.com"], "client_id": "g"},
			"mcpServers": {"pay": {"command": "x"}}}`, "oauth.introspection_url", "introspection endpoint"},
		{"oauth resource not a URL", `{"oauth": {"resource": "guard", "authorization_servers": ["https://a.example.com"], "client_id": "g",
			"introspection_url": "https://a.example.com/i"}, "mcpServers": {"pay": {"command": "x"}}}`, "oauth.resource", "not an http(s) URL"},
		{"oauth with a retrysafe server's _meta key", `{"oauth": {"resource": "https://g.example.com/mcp", "authorization_servers": ["https://a.example.com"],
			"client_id": "g", "introspection_url": "https://a.example.com/i"},
			"mcpServers": {"pay": {"command": "x", "tools": {"charge": {"class": "keyed", "key_argument": "_meta"}}}}}`,
			"mcpServers.pay.tools.charge.key_argument", "run one guard per user"},
		{"reconcilable without check", `{"mcpServers": {"pay": {"command": "x", "tools": {"charge": {"class": "reconcilable"}}}}}`,
			"mcpServers.pay.tools.charge.check", "read-only tool"},
		{"check that writes", `{"mcpServers": {"pay": {"command": "x", "tools": {
			"charge": {"class": "reconcilable", "ref_argument": "note", "check": {"tool": "refund", "arguments": {"q": "${ref}"}, "applied": {"pointer": "/found", "equals": true}}},
			"refund": {"class": "at_most_once"}}}}}`, "mcpServers.pay.tools.charge.check.tool", "a check must only read"},
		{"check not named", `{"mcpServers": {"pay": {"command": "x", "tools": {
			"charge": {"class": "reconcilable", "check": {"tool": "find", "arguments": {"q": "${ref}"}, "applied": {"pointer": "/found"}}}}}}}`,
			"mcpServers.pay.tools.charge.check.tool", `name it there as {"class": "read_only"}`},
		{"check without ref", `{"mcpServers": {"pay": {"command": "x", "tools": {
			"charge": {"class": "reconcilable", "check": {"tool": "find", "applied": {"pointer": "/found"}}}, "find": {"class": "read_only"}}}}}`,
			"mcpServers.pay.tools.charge.check.arguments", `"${ref}"`},
		{"bad pointer", `{"mcpServers": {"pay": {"command": "x", "tools": {
			"charge": {"class": "reconcilable", "check": {"tool": "find", "arguments": {"q": "${ref}"}, "applied": {"pointer": "found"}}}, "find": {"class": "read_only"}}}}}`,
			"mcpServers.pay.tools.charge.check.applied.pointer", "starts with /"},
		{"command and url", `{"mcpServers": {"pay": {"command": "x", "url": "http://127.0.0.1/"}}}`, "mcpServers.pay", "give one"},
		{"bad ttl", `{"mcpServers": {"pay": {"command": "x", "tools": {"charge": {"class": "at_most_once", "key_ttl": "a day"}}}}}`,
			"not valid JSON for a guard", `"24h"`},
		{"a check that reads the input without a key", `{"mcpServers": {"pay": {"command": "x", "tools": {
			"charge": {"class": "reconcilable", "check": {"tool": "find", "arguments": {"amount": "${input/amount}"}, "applied": {"pointer": "/found"}}},
			"find": {"class": "read_only"}}}}}`, "mcpServers.pay.tools.charge.check.arguments", "set input_key"},
		{"a placeholder in a value", `{"mcpServers": {"pay": {"command": "x", "tools": {
			"charge": {"class": "reconcilable", "check": {"tool": "find", "arguments": {"q": "ref ${ref}"}, "applied": {"pointer": "/found"}}},
			"find": {"class": "read_only"}}}}}`, "mcpServers.pay.tools.charge.check.arguments.q", "the whole value"},
		{"an unknown key form", `{"mcpServers": {"pay": {"command": "x", "tools": {"charge": {"class": "keyed", "key_argument": "k", "key_form": "ulid"}}}}}`,
			"mcpServers.pay.tools.charge.key_form", `"uuid"`},
		{"a key form without a key", `{"mcpServers": {"pay": {"command": "x", "tools": {"charge": {"class": "at_most_once", "key_form": "uuid"}}}}}`,
			"mcpServers.pay.tools.charge.key_form", "has neither"},
		{"two stores", `{"store": {"path": "a.db", "postgres": "postgres://"}, "mcpServers": {"pay": {"command": "x"}}}`, "store", "give one"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := mcpguard.ParseConfig([]byte(tc.config))
			if err == nil {
				t.Fatal("accepted")
			}
			if !strings.Contains(err.Error(), tc.path) || !strings.Contains(err.Error(), tc.fix) {
				t.Errorf("the error %q does not name %s and say %q", err, tc.path, tc.fix)
			}
		})
	}
}

// What only the server's listing shows stops the guard at start, with
// the field's path: a tool it does not list, a keyed tool whose schema
// lacks its key argument.
func TestConfig_WhatTheServerListsIsCheckedAtStart(t *testing.T) {
	for _, tc := range []struct{ name, tools, path, fix string }{
		{"a tool the server does not list", `"cancel": {"class": "at_most_once"}`, "mcpServers.airline.tools.cancel", "it lists: book, book_noted"},
		{"a key argument the schema lacks", `"list_flights": {"class": "keyed", "key_argument": "idempotency_key"}`,
			"mcpServers.airline.tools.list_flights", `"idempotency_key" is not a property of its input schema`},
		{"keyed by _meta over a plain server", `"book": {"class": "keyed", "key_argument": "_meta"}`,
			"mcpServers.airline.tools.book", "does not answer with retrysafe envelopes"},
		{"a key lifetime shorter than a late answer may come", `"book": {"class": "at_most_once", "key_ttl": "2m", "attempt_timeout": "1m", "listen_late": "5m"}`,
			"mcpServers.airline.tools.book", "key lifetime 2m0s is shorter than an attempt may still land"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := mcpguard.ParseConfig([]byte(`{"principal": "ana", "mcpServers": {"airline": {"command": "x", "tools": {` + tc.tools + `}}}}`))
			if err != nil {
				t.Fatal(err)
			}
			cfg.Store.Path = filepath.Join(t.TempDir(), "guard.db")
			up := (&airline{}).server()
			_, err = mcpguard.New(context.Background(), cfg, &mcpguard.Options{Logger: discard(), Transport: serving(up)})
			if err == nil {
				t.Fatal("the guard started")
			}
			if !strings.Contains(err.Error(), tc.path) || !strings.Contains(err.Error(), tc.fix) {
				t.Errorf("the error %q does not name %s and say %q", err, tc.path, tc.fix)
			}
		})
	}
}

// Each token of an HTTP front stands for one principal: two principals
// given one token (a pasted line, two variables set alike) is a
// configuration error, never a token that silently acts as whichever
// principal sorts last. Here the guard takes the configuration, and Ana's
// token is verified as Bob.
func TestConfig_OneTokenStandsForOnePrincipal(t *testing.T) {
	t.Setenv("GUARD_TOKEN_ANA", "s3cret")
	t.Setenv("GUARD_TOKEN_BOB", "s3cret")
	cfg, err := mcpguard.ParseConfig([]byte(`{"mcpServers": {"a": {"command": "x"}},
	  "tokens": {"ana@example.com": "${GUARD_TOKEN_ANA}", "bob@example.com": "${GUARD_TOKEN_BOB}"}}`))
	if err != nil {
		t.Logf("refused: %v", err)
		return
	}
	verify, err := cfg.Verifier()
	if err != nil {
		t.Logf("refused: %v", err)
		return
	}
	info, err := verify(context.Background(), "s3cret", nil)
	t.Errorf("two principals with one token were taken; the token is verified as %+v, %v", info, err)
}

// The same at start: a check whose arguments its tool's schema does not
// take (the server renamed it before the guard started, or the
// configuration misspelt it) stops the guard, naming the field, as a key
// argument the schema lacks does.
func TestGuard_ACheckArgumentItsToolDoesNotTakeStopsTheGuard(t *testing.T) {
	a := &airline{}
	cfg, err := mcpguard.ParseConfig([]byte(`{"principal": "ana@example.com", "mcpServers": {"airline": {"command": "airline-mcp", "tools": {
	  "book_noted": {"class": "reconcilable", "ref_argument": "client_reference",
	    "check": {"tool": "find_booking", "arguments": {"reference": "${ref}"},
	      "applied": {"pointer": "/found", "equals": true}, "not_applied": {"pointer": "/found", "equals": false}}},
	  "find_booking": {"class": "read_only"}}}}}`))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Store.Path = filepath.Join(t.TempDir(), "guard.db")
	g, err := mcpguard.New(context.Background(), cfg, &mcpguard.Options{Transport: serving(a.server()), Logger: discard()})
	if err == nil {
		g.Close()
		t.Fatal("a check that gives its tool an argument it does not take: the guard started")
	}
	t.Logf("refused: %v", err)
	if !strings.Contains(err.Error(), "mcpServers.airline.tools.book_noted.check.arguments") || !strings.Contains(err.Error(), `"reference"`) {
		t.Errorf("refused without naming the field and the argument: %v", err)
	}
}
