package mcpguard_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

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
