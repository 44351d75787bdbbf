package console_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/retrysafe/retrysafe/agenttool/console"
)

// A decision without the viewer's own form token is refused with 403 and a
// plain message, and GET changes nothing, whatever it carries.
func TestForgedDecisionsChangeNothing(t *testing.T) {
	w := newWorld(t, nil)
	charge := w.lostCharge(ana, "Ana Lima", chargeAna)
	ref := charge.RequestRef
	form := func(token string) url.Values {
		v := url.Values{"ref": {ref}, "do": {"retry"}, "attempts": {"1"}, "reason": {"forged"}}
		if token != "" {
			v.Set("csrf", token)
		}
		return v
	}
	good := w.token("maria", ref)
	tests := []struct {
		name   string
		user   string
		method string
		path   string
		form   url.Values
		header []string
		status int
		says   string
	}{
		{"no token", "maria", http.MethodPost, "/action", form(""), nil, http.StatusForbidden, "token is missing or wrong"},
		{"a wrong token", "maria", http.MethodPost, "/action", form("AAAA" + good[4:]), nil, http.StatusForbidden, "token is missing or wrong"},
		{"another viewer's token", "both", http.MethodPost, "/action", form(good), nil, http.StatusForbidden, "token is missing or wrong"},
		{"the token in the URL, not the form", "maria", http.MethodPost, "/action?csrf=" + good, form(""), nil, http.StatusForbidden, "token is missing or wrong"},
		{"from another site", "maria", http.MethodPost, "/action", form(good), []string{"Sec-Fetch-Site", "cross-site"}, http.StatusForbidden, "came from another site"},
		{"from another origin", "maria", http.MethodPost, "/action", form(good), []string{"Origin", "https://evil.example"}, http.StatusForbidden, "came from another site"},
		{"PUT", "maria", http.MethodPut, "/action", form(good), nil, http.StatusMethodNotAllowed, ""},
		{"DELETE", "maria", http.MethodDelete, "/action", form(good), nil, http.StatusMethodNotAllowed, ""},
		{"not signed in", "mallory", http.MethodPost, "/action", form(good), nil, http.StatusForbidden, "you may not use this console"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := w.do(tt.user, tt.method, tt.path, tt.form, tt.header...)
			if p.status != tt.status || !strings.Contains(p.body, tt.says) {
				t.Errorf("%d %q; want %d saying %q", p.status, p.body, tt.status, tt.says)
			}
			if tt.status == http.StatusForbidden && !strings.HasPrefix(p.body, "403 Forbidden: ") {
				t.Errorf("the refusal is not a plain message: %q", p.body)
			}
			if !w.awaiting(ref) {
				t.Fatalf("a refused request changed the action: %+v", w.record(ref))
			}
		})
	}
	// GET with everything a decision needs only shows pages.
	q := form(good).Encode()
	for _, path := range []string{"/action?" + q, "/?" + q, "/action/retry?" + q} {
		p := w.get("maria", path)
		if p.status != http.StatusOK && p.status != http.StatusNotFound {
			t.Errorf("GET %s: %d", path, p.status)
		}
		if !w.awaiting(ref) {
			t.Fatalf("GET %s changed the action: %+v", path, w.record(ref))
		}
	}
	before := w.charges.Load()
	w.charge.Invoke(ctx(ana, ""), chargeAna)
	if w.charges.Load() != before {
		t.Error("after the refused requests the tool ran again")
	}
	// The same form, with the right token, from the page, works.
	w.settled(w.do("maria", http.MethodPost, "/action", form(good)), ref, "maria", "One retry approved")
}

// A token drawn by one console (its own random secret) is refused by
// another; consoles given one Secret accept each other's.
func TestTokensFollowTheSecret(t *testing.T) {
	w := newWorld(t, nil)
	charge := w.lostCharge(ana, "Ana Lima", chargeAna)
	token := w.token("maria", charge.RequestRef)
	form := url.Values{"csrf": {token}, "ref": {charge.RequestRef}, "do": {"retry"}, "attempts": {"1"}, "reason": {"r"}}
	who := func(*http.Request) (console.Viewer, error) { return viewers["maria"], nil }
	restarted, err := console.New(console.Options{Operator: w.op, Who: who})
	if err != nil {
		t.Fatal(err)
	}
	req := httptestPost(form)
	rec := serve(restarted, req)
	if rec.Code != http.StatusForbidden || !w.awaiting(charge.RequestRef) {
		t.Errorf("another console's token: %d", rec.Code)
	}
	if _, err := console.New(console.Options{Operator: w.op, Who: who, Secret: []byte("short")}); err == nil {
		t.Error("a short Secret was accepted")
	}
	secret := []byte(strings.Repeat("s", 32))
	a, _ := console.New(console.Options{Operator: w.op, Who: who, Secret: secret})
	b, _ := console.New(console.Options{Operator: w.op, Who: who, Secret: secret})
	page := serve(a, httptestGet("/action?ref="+url.QueryEscape(charge.RequestRef)))
	m := tokenField.FindStringSubmatch(page.Body.String())
	if m == nil {
		t.Fatalf("no token:\n%s", page.Body.String())
	}
	form.Set("csrf", m[1])
	if rec := serve(b, httptestPost(form)); rec.Code != http.StatusSeeOther {
		t.Errorf("a replica with the same Secret refused the token: %d %s", rec.Code, rec.Body.String())
	}
}

// Who decides who may use the console; a viewer with no name is the
// application's mistake, not a way in.
func TestWho(t *testing.T) {
	w := newWorld(t, nil)
	if p := w.get("mallory", "/"); p.status != http.StatusForbidden || strings.Contains(p.body, "not signed in") {
		t.Errorf("Who's error: %d %q; want 403 without the application's error text", p.status, p.body)
	}
	nameless, _ := console.New(console.Options{Operator: w.op, Who: func(*http.Request) (console.Viewer, error) {
		return console.Viewer{All: true}, nil
	}})
	if rec := serve(nameless, httptestGet("/")); rec.Code != http.StatusInternalServerError {
		t.Errorf("a viewer with no name: %d", rec.Code)
	}
	if _, err := console.New(console.Options{Operator: w.op}); err == nil {
		t.Error("a console without Who was made")
	}
	if _, err := console.New(console.Options{Who: func(*http.Request) (console.Viewer, error) { return viewers["maria"], nil }}); err == nil {
		t.Error("a console without an Operator was made")
	}
}

// Pages forbid framing and scripts, and are not cached.
func TestSecurityHeaders(t *testing.T) {
	w := newWorld(t, nil)
	resp, err := http.Get(w.srv.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	csp := resp.Header.Get("Content-Security-Policy")
	for _, want := range []string{"default-src 'none'", "frame-ancestors 'none'", "form-action 'self'"} {
		if !strings.Contains(csp, want) {
			t.Errorf("Content-Security-Policy %q lacks %q", csp, want)
		}
	}
	if resp.Header.Get("Cache-Control") != "no-store" || resp.Header.Get("X-Frame-Options") != "DENY" {
		t.Errorf("headers: %v", resp.Header)
	}
}
