package mcpguard_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/retrysafe/retrysafe/agenttool/mcpguard"
	"github.com/retrysafe/retrysafe/envelope"
)

// authServer is an OAuth authorization server's introspection endpoint
// (RFC 7662), on loopback: it knows the tokens in its map, and the guard
// as client "guard" with secret "s3cret".
type authServer struct {
	tokens map[string]map[string]any
	asked  atomic.Int64
	srv    *httptest.Server
}

func newAuthServer(t *testing.T, tokens map[string]map[string]any) *authServer {
	a := &authServer{tokens: tokens}
	a.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if id, secret, ok := r.BasicAuth(); !ok || id != "guard" || secret != "s3cret" {
			http.Error(w, `{"error":"invalid_client"}`, http.StatusUnauthorized)
			return
		}
		a.asked.Add(1)
		r.ParseForm()
		claims, ok := a.tokens[r.PostForm.Get("token")]
		if !ok {
			claims = map[string]any{"active": false}
		}
		json.NewEncoder(w).Encode(claims)
	}))
	t.Cleanup(a.srv.Close)
	return a
}

const guardResource = "https://guard.example.com/mcp"

// oauthFront runs a guard whose HTTP front takes the tokens of a, with
// secret as its client secret there, in front of a plain message server
// that counts what it sends.
func oauthFront(t *testing.T, a *authServer, extra, secret string) (*httptest.Server, *counter) {
	t.Helper()
	t.Setenv("GUARD_OAUTH_SECRET", secret)
	return frontWithOAuth(t, `"introspection_url": "`+a.srv.URL+`/introspect", "client_id": "guard", "client_secret": "${GUARD_OAUTH_SECRET}",
	    "scopes": ["messages"]`+extra)
}

// frontWithOAuth runs a guard whose HTTP front is an OAuth resource
// server for guardResource, issuer https://auth.example.com, with the
// rest of its oauth settings, in front of a plain message server that
// counts what it sends.
func frontWithOAuth(t *testing.T, settings string) (*httptest.Server, *counter) {
	t.Helper()
	c := &counter{}
	g := guardOver(t, c.server("send_message"), `{
	  "oauth": {"resource": "`+guardResource+`", "authorization_servers": ["https://auth.example.com"], `+settings+`},
	  "mcpServers": {"sender": {"url": "http://sender.internal/mcp",
	    "tools": {"send_message": {"class": "at_most_once"}}}}}`, mcpguard.Options{})
	h, err := g.HTTPHandler()
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(h)
	t.Cleanup(front.Close)
	return front, c
}

func connectWith(t *testing.T, url, token string) (*mcp.ClientSession, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, nil).Connect(ctx,
		&mcp.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: bearerTransport(token)}}, nil)
	if err == nil {
		t.Cleanup(func() { cs.Close() })
	}
	return cs, err
}

// An OAuth token acts for the principal it names, and only a token the
// authorization server says is active, issued for the guard, with the
// scope the guard needs, reaches a tool: the others are refused before
// anything is recorded or sent, with the status the MCP authorization
// specification gives (401 pointing to the metadata, 403 for a scope).
func TestGuard_AnOAuthTokenActsForThePrincipalItNames(t *testing.T) {
	ok := func(sub string) map[string]any {
		return map[string]any{"active": true, "sub": sub, "aud": guardResource, "scope": "messages profile",
			"iss": "https://auth.example.com/", "exp": time.Now().Add(time.Hour).Unix()}
	}
	with := func(m map[string]any, k string, v any) map[string]any {
		m[k] = v
		return m
	}
	a := newAuthServer(t, map[string]map[string]any{
		"ana-at":        ok("ana@example.com"),
		"bob-at":        ok("bob@example.com"),
		"other-aud":     with(ok("ana@example.com"), "aud", []string{"https://other.example.com/mcp"}),
		"no-scope":      with(ok("ana@example.com"), "scope", "profile"),
		"other-issuer":  with(ok("ana@example.com"), "iss", "https://evil.example.com"),
		"no-subject":    with(ok(""), "sub", nil),
		"expired":       with(ok("ana@example.com"), "exp", time.Now().Add(-time.Hour).Unix()),
		"revoked-token": {"active": false},
	})
	front, c := oauthFront(t, a, "", "s3cret")

	// Refused tokens: nothing reaches the server.
	for token, want := range map[string]int{"": 401, "unknown": 401, "revoked-token": 401, "other-aud": 401,
		"other-issuer": 401, "no-subject": 401, "expired": 401, "no-scope": 403} {
		req, _ := http.NewRequest(http.MethodPost, front.URL, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("token %q: %s, want %d", token, resp.Status, want)
		}
		if wa := resp.Header.Get("WWW-Authenticate"); !strings.Contains(wa, `resource_metadata="https://guard.example.com/.well-known/oauth-protected-resource/mcp"`) {
			t.Errorf("token %q: WWW-Authenticate %q does not point to the resource metadata", token, wa)
		}
	}

	// The metadata a client discovers the authorization server by.
	for _, path := range []string{"/.well-known/oauth-protected-resource/mcp", "/.well-known/oauth-protected-resource"} {
		resp, err := http.Get(front.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		var meta struct {
			Resource             string   `json:"resource"`
			AuthorizationServers []string `json:"authorization_servers"`
		}
		json.NewDecoder(resp.Body).Decode(&meta)
		resp.Body.Close()
		if meta.Resource != guardResource || len(meta.AuthorizationServers) != 1 || meta.AuthorizationServers[0] != "https://auth.example.com" {
			t.Errorf("%s: %+v", path, meta)
		}
	}
	if c.count() != 0 {
		t.Fatalf("refused tokens sent %d messages", c.count())
	}

	// Two users' identical calls are two actions, each for its principal.
	eachActsOnce(t, front.URL, "ana-at", "bob-at", c)
}

// eachActsOnce sends, through the front at url, the same message twice
// with ana's token and once with bob's: two actions, one per principal,
// each sent once.
func eachActsOnce(t *testing.T, url, ana, bob string, c *counter) {
	t.Helper()
	msg := map[string]any{"to": "#team", "text": "Lunch at one?"}
	anas, err := connectWith(t, url, ana)
	if err != nil {
		t.Fatal(err)
	}
	bobs, err := connectWith(t, url, bob)
	if err != nil {
		t.Fatal(err)
	}
	_, first := call(t, anas, "send_message", msg, nil)
	_, again := call(t, anas, "send_message", msg, nil)
	_, bobsFirst := call(t, bobs, "send_message", msg, nil)
	if first.Status != envelope.Success || bobsFirst.Status != envelope.Success {
		t.Fatalf("ana %s, bob %s", first, bobsFirst)
	}
	if again.RequestRef != first.RequestRef || bobsFirst.RequestRef == first.RequestRef {
		t.Errorf("references: ana %s and %s, bob %s: one action per principal and call", first.RequestRef, again.RequestRef, bobsFirst.RequestRef)
	}
	if c.count() != 2 {
		t.Errorf("%d messages sent, want 2 (ana's once, bob's once)", c.count())
	}
}

// A guard whose credentials the authorization server refuses answers 500
// and acts on nothing: a token it cannot check is not taken as anyone's.
// With a cache, an active token is checked once within it.
func TestGuard_OAuthIntrospectionFailuresActOnNothing(t *testing.T) {
	a := newAuthServer(t, map[string]map[string]any{
		"ana-at": {"active": true, "sub": "ana@example.com", "aud": guardResource, "scope": "messages"},
	})
	front, _ := oauthFront(t, a, `, "cache": "1m"`, "s3cret")
	ana, err := connectWith(t, front.URL, "ana-at")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, env := call(t, ana, "send_message", map[string]any{"to": "#team", "text": "note " + string(rune('a'+i))}, nil); env.Status != envelope.Success {
			t.Fatalf("call %d: %s", i, env)
		}
	}
	if n := a.asked.Load(); n != 1 {
		t.Errorf("the authorization server was asked %d times within the cache's minute, want 1", n)
	}

	broken, c := oauthFront(t, a, "", "wrong")
	req, _ := http.NewRequest(http.MethodPost, broken.URL, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}`))
	req.Header.Set("Authorization", "Bearer ana-at")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusInternalServerError {
		t.Errorf("with credentials the authorization server refuses: %s, want 500", resp.Status)
	}
	if c.count() != 0 {
		t.Errorf("a request whose token could not be checked sent a message")
	}
}

// A request the guard cannot authenticate learns nothing of the guard's
// setup: when the introspection fails (here the authorization server
// refuses the guard's credentials), the 500 goes to whoever sent a bearer
// token, before anyone is authenticated, and its body must not name the
// introspection endpoint, the guard's client or how it is configured —
// the guard's log is the place for that.
func TestGuard_AFailedIntrospectionTellsAnUnauthenticatedClientNothingOfTheGuard(t *testing.T) {
	a := newAuthServer(t, map[string]map[string]any{})
	front, _ := oauthFront(t, a, "", "wrong")
	req, _ := http.NewRequest(http.MethodPost, front.URL, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}`))
	req.Header.Set("Authorization", "Bearer anything-at-all")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	t.Logf("%s: %s", resp.Status, body)
	for _, secret := range []string{a.srv.URL, "/introspect", "client_id", "client_secret"} {
		if strings.Contains(string(body), secret) {
			t.Errorf("the answer to an unauthenticated request names %q", secret)
		}
	}
}

// Static tokens serve beside OAuth: a static token is the operator's own
// and carries the scopes the front requires, so it is not answered 403.
func TestGuard_AStaticTokenServesBesideOAuthScopes(t *testing.T) {
	a := newAuthServer(t, nil)
	t.Setenv("GUARD_OAUTH_SECRET", "s3cret")
	cfg, err := mcpguard.ParseConfig([]byte(`{"tokens": {"svc@example.com": "svc-token"},
	  "oauth": {"resource": "` + guardResource + `", "authorization_servers": ["https://auth.example.com"],
	    "introspection_url": "` + a.srv.URL + `/introspect", "client_id": "guard", "client_secret": "${GUARD_OAUTH_SECRET}", "scopes": ["messages"]},
	  "mcpServers": {"sender": {"url": "http://sender.internal/mcp"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	verify, err := cfg.Verifier()
	if err != nil {
		t.Fatal(err)
	}
	info, err := verify(context.Background(), "svc-token", nil)
	if err != nil || info.UserID != "svc@example.com" || len(info.Scopes) != 1 || info.Scopes[0] != "messages" {
		t.Errorf("the static token: %+v, %v; want svc@example.com with scope messages", info, err)
	}
	if a.asked.Load() != 0 {
		t.Errorf("a static token was sent to the authorization server")
	}
}
