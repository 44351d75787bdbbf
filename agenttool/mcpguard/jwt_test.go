package mcpguard_test

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/retrysafe/retrysafe/agenttool/mcpguard"
)

// keyServer is an authorization server's key set (jwks_uri) on loopback,
// and the keys to sign its tokens with.
type keyServer struct {
	t       *testing.T
	srv     *httptest.Server
	fetched atomic.Int64
	failing atomic.Bool

	mu   sync.Mutex
	keys []map[string]any
}

func newKeyServer(t *testing.T) *keyServer {
	k := &keyServer{t: t}
	k.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		k.fetched.Add(1)
		if k.failing.Load() {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		k.mu.Lock()
		defer k.mu.Unlock()
		json.NewEncoder(w).Encode(map[string]any{"keys": k.keys})
	}))
	t.Cleanup(k.srv.Close)
	return k
}

// ecKeyFor makes a P-256 signing key.
func ecKeyFor(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func b64url(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

// publish adds pub to the set as kid.
func (k *keyServer) publish(kid string, pub crypto.PublicKey) {
	j := map[string]any{"kid": kid, "use": "sig"}
	switch pub := pub.(type) {
	case *rsa.PublicKey:
		j["kty"], j["n"], j["e"] = "RSA", b64url(pub.N.Bytes()), b64url(big.NewInt(int64(pub.E)).Bytes())
	case *ecdsa.PublicKey:
		b, err := pub.Bytes()
		if err != nil {
			k.t.Fatal(err)
		}
		j["kty"], j["crv"], j["x"], j["y"] = "EC", "P-256", b64url(b[1:33]), b64url(b[33:])
	case ed25519.PublicKey:
		j["kty"], j["crv"], j["x"] = "OKP", "Ed25519", b64url(pub)
	}
	k.mu.Lock()
	k.keys = append(k.keys, j)
	k.mu.Unlock()
}

const jwtIssuer = "https://auth.example.com/"

// claims are a valid access token's for sub, with changes.
func claims(sub string, changes ...any) jwt.MapClaims {
	c := jwt.MapClaims{"iss": jwtIssuer, "sub": sub, "aud": guardResource, "scope": "messages profile",
		"exp": time.Now().Add(time.Hour).Unix(), "iat": time.Now().Unix()}
	for i := 0; i+1 < len(changes); i += 2 {
		if changes[i+1] == nil {
			delete(c, changes[i].(string))
		} else {
			c[changes[i].(string)] = changes[i+1]
		}
	}
	return c
}

func sign(t *testing.T, m jwt.SigningMethod, kid string, key any, c jwt.MapClaims) string {
	tok := jwt.NewWithClaims(m, c)
	if kid != "" {
		tok.Header["kid"] = kid
	}
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// jwtFront runs a guard whose HTTP front takes the JWTs of k's keys, in
// front of a plain message server that counts what it sends.
func jwtFront(t *testing.T, k *keyServer) (*httptest.Server, *counter) {
	t.Helper()
	return frontWithOAuth(t, `"jwks_url": "`+k.srv.URL+`/jwks", "scopes": ["messages"]`)
}

// status is the front's answer to an initialize request with token.
func status(t *testing.T, url, token string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// A JWT access token (jwks_url) acts for the principal it names, and only
// one a key of the authorization server's set signed, with an asymmetric
// algorithm, issued by that server for the guard, within its lifetime,
// with the scope the guard needs: the others are refused before anything
// is recorded or sent (401, 403 for a scope), a token signed with the
// public key as an HMAC secret or with "none" among them.
func TestGuard_AJWTActsForThePrincipalItNames(t *testing.T) {
	t.Cleanup(mcpguard.SetJWKSMinInterval(0))
	k := newKeyServer(t)
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	ecKey := ecKeyFor(t)
	edPub, edKey, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	strangerKey := ecKeyFor(t)
	k.publish("r1", &rsaKey.PublicKey)
	k.publish("e1", &ecKey.PublicKey)
	k.publish("d1", edPub)
	front, c := jwtFront(t, k)

	rsaPub, _ := x509.MarshalPKIXPublicKey(&rsaKey.PublicKey)
	none, _ := jwt.NewWithClaims(jwt.SigningMethodNone, claims("ana@example.com")).SignedString(jwt.UnsafeAllowNoneSignatureType)
	hour := time.Now().Add(time.Hour).Unix()
	for name, tc := range map[string]struct {
		token string
		want  int
	}{
		"RS256":                  {sign(t, jwt.SigningMethodRS256, "r1", rsaKey, claims("ana@example.com")), 200},
		"ES256":                  {sign(t, jwt.SigningMethodES256, "e1", ecKey, claims("ana@example.com")), 200},
		"EdDSA":                  {sign(t, jwt.SigningMethodEdDSA, "d1", edKey, claims("ana@example.com")), 200},
		"another audience":       {sign(t, jwt.SigningMethodRS256, "r1", rsaKey, claims("ana@example.com", "aud", "https://other.example.com/mcp")), 401},
		"another issuer":         {sign(t, jwt.SigningMethodRS256, "r1", rsaKey, claims("ana@example.com", "iss", "https://evil.example.com")), 401},
		"no issuer":              {sign(t, jwt.SigningMethodRS256, "r1", rsaKey, claims("ana@example.com", "iss", nil)), 401},
		"expired":                {sign(t, jwt.SigningMethodRS256, "r1", rsaKey, claims("ana@example.com", "exp", time.Now().Add(-time.Hour).Unix())), 401},
		"not yet valid":          {sign(t, jwt.SigningMethodRS256, "r1", rsaKey, claims("ana@example.com", "nbf", hour-60)), 401},
		"no exp":                 {sign(t, jwt.SigningMethodRS256, "r1", rsaKey, claims("ana@example.com", "exp", nil)), 401},
		"no subject":             {sign(t, jwt.SigningMethodRS256, "r1", rsaKey, claims("", "sub", nil)), 401},
		"no scope":               {sign(t, jwt.SigningMethodRS256, "r1", rsaKey, claims("ana@example.com", "scope", "profile")), 403},
		"alg none":               {none, 401},
		"HS256 on the RSA key":   {sign(t, jwt.SigningMethodHS256, "r1", rsaPub, claims("ana@example.com")), 401},
		"a key not in the set":   {sign(t, jwt.SigningMethodES256, "e1", strangerKey, claims("ana@example.com")), 401},
		"an unknown kid":         {sign(t, jwt.SigningMethodES256, "x9", strangerKey, claims("ana@example.com")), 401},
		"RS256 on the EC key id": {sign(t, jwt.SigningMethodRS256, "e1", rsaKey, claims("ana@example.com")), 401},
		"not a JWT":              {"ana-at", 401},
	} {
		if got := status(t, front.URL, tc.token); got != tc.want {
			t.Errorf("%s: %d, want %d", name, got, tc.want)
		}
	}
	if c.count() != 0 {
		t.Fatalf("initialize sent %d messages", c.count())
	}

	// scp as a list (as some servers write it) carries the scope too; two
	// users' identical calls are two actions, each for its principal.
	eachActsOnce(t, front.URL, sign(t, jwt.SigningMethodRS256, "r1", rsaKey, claims("ana@example.com")),
		sign(t, jwt.SigningMethodES256, "e1", ecKey, claims("bob@example.com", "scope", nil, "scp", []string{"messages"})), c)
}

// Keys rotate: a token signed by a key the server has just added is
// accepted once the set is fetched again; a token naming a key the set
// lacks fetches it at most once per interval, so made-up key ids cannot
// make the guard hammer the server; and when the set cannot be fetched,
// a token nobody could check is answered 500 and acts on nothing.
func TestGuard_JWTKeysRotateAndAnUnreachableSetActsOnNothing(t *testing.T) {
	t.Cleanup(mcpguard.SetJWKSMinInterval(time.Hour))
	k := newKeyServer(t)
	old := ecKeyFor(t)
	k.publish("old", &old.PublicKey)
	front, c := jwtFront(t, k)
	if got := status(t, front.URL, sign(t, jwt.SigningMethodES256, "old", old, claims("ana@example.com"))); got != 200 {
		t.Fatalf("a token of the set's key: %d", got)
	}
	for i := range 5 {
		if got := status(t, front.URL, sign(t, jwt.SigningMethodES256, "made-up-"+string(rune('a'+i)), old, claims("ana@example.com"))); got != 401 {
			t.Errorf("a made-up key id: %d, want 401", got)
		}
	}
	if n := k.fetched.Load(); n != 1 {
		t.Errorf("the key set was fetched %d times within the interval, want 1", n)
	}

	mcpguard.SetJWKSMinInterval(0)
	fresh := ecKeyFor(t)
	k.publish("new", &fresh.PublicKey)
	if got := status(t, front.URL, sign(t, jwt.SigningMethodES256, "new", fresh, claims("ana@example.com"))); got != 200 {
		t.Errorf("a token of a key added to the set: %d, want 200 once the set is fetched again", got)
	}

	k.failing.Store(true)
	other := newKeyServer(t)
	other.failing.Store(true)
	down, downC := jwtFront(t, other)
	if got := status(t, down.URL, sign(t, jwt.SigningMethodES256, "old", old, claims("ana@example.com"))); got != http.StatusInternalServerError {
		t.Errorf("a key set that cannot be fetched: %d, want 500", got)
	}
	if c.count()+downC.count() != 0 {
		t.Errorf("initialize sent messages")
	}
}

// A configuration checks tokens one way, and says how to fix it.
func TestConfig_OAuthChecksTokensOneWay(t *testing.T) {
	base := `{"oauth": {"resource": "` + guardResource + `", "authorization_servers": ["https://auth.example.com"]%s}, "mcpServers": {"s": {"url": "http://s.internal/mcp"}}}`
	for extra, want := range map[string]string{
		``: "oauth.introspection_url",
		`, "introspection_url": "https://auth.example.com/introspect", "client_id": "g", "jwks_url": "https://auth.example.com/jwks"`: "oauth.jwks_url",
		`, "jwks_url": "https://auth.example.com/jwks", "client_id": "g"`:                                                             "oauth.jwks_url",
		`, "jwks_url": "not a url"`: "oauth.jwks_url",
	} {
		_, err := mcpguard.ParseConfig([]byte(strings.Replace(base, "%s", extra, 1)))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("oauth {…%s}: %v, want an error at %s", extra, err, want)
		}
	}
	if _, err := mcpguard.ParseConfig([]byte(strings.Replace(base, "%s", `, "jwks_url": "https://auth.example.com/jwks"`, 1))); err != nil {
		t.Errorf("oauth with jwks_url alone: %v", err)
	}
}

// A client that gives up on its request while the guard fetches the key
// set does not make the fetch fail for the others: the set is fetched
// for the guard, not for the request that happened to need it, so an
// unauthenticated caller that hangs up cannot leave the guard without
// keys (every token answered 500) until the next fetch is allowed.
func TestGuard_AClientThatHangsUpDoesNotLeaveTheGuardWithoutKeys(t *testing.T) {
	k := newKeyServer(t)
	key := ecKeyFor(t)
	k.publish("e1", &key.PublicKey)
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(300 * time.Millisecond)
		k.srv.Config.Handler.ServeHTTP(w, r)
	}))
	t.Cleanup(slow.Close)
	front, _ := jwtFront(t, &keyServer{t: t, srv: slow})

	// A GET (no body to read) lets the front see the client hang up.
	req, _ := http.NewRequest(http.MethodGet, front.URL, nil)
	req.Header.Set("Authorization", "Bearer "+sign(t, jwt.SigningMethodES256, "made-up", key, claims("mallory@example.com")))
	if resp, err := (&http.Client{Timeout: 50 * time.Millisecond}).Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("the impatient request was answered %s before the key set", resp.Status)
	}
	if got := status(t, front.URL, sign(t, jwt.SigningMethodES256, "e1", key, claims("ana@example.com"))); got != 200 {
		t.Errorf("a token of the set's key after a client hung up during the fetch: %d, want 200", got)
	}
}

// While the key set endpoint hangs, the keys held still serve at once: a
// fetch under way (here one that a token naming a made-up key set off)
// holds up only the requests that need the new set, not every token of a
// key the guard already has.
func TestGuard_AHangingKeySetHoldsUpNoTokenOfAKeyHeld(t *testing.T) {
	t.Cleanup(mcpguard.SetJWKSMinInterval(0))
	k := newKeyServer(t)
	key := ecKeyFor(t)
	k.publish("e1", &key.PublicKey)
	var hanging atomic.Bool
	released := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hanging.Load() {
			select {
			case <-released:
			case <-r.Context().Done():
			}
			return
		}
		k.srv.Config.Handler.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	front, _ := jwtFront(t, &keyServer{t: t, srv: srv})
	t.Cleanup(func() { close(released) })
	token := sign(t, jwt.SigningMethodES256, "e1", key, claims("ana@example.com"))
	if got := status(t, front.URL, token); got != 200 {
		t.Fatalf("a token of the set's key: %d", got)
	}

	hanging.Store(true)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, front.URL, strings.NewReader(`{}`))
		req.Header.Set("Authorization", "Bearer "+sign(t, jwt.SigningMethodES256, "made-up", key, claims("mallory@example.com")))
		if resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	time.Sleep(100 * time.Millisecond) // the made-up key's fetch is under way
	start := time.Now()
	req, _ := http.NewRequest(http.MethodPost, front.URL, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := (&http.Client{Timeout: 2 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("a token of a key held, while the key set hangs: no answer after %s (%v)", time.Since(start).Round(time.Millisecond), err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("a token of a key held, while the key set hangs: %s, want 200", resp.Status)
	}
}

// Tokens checked side by side while the set is fetched again and again
// (made-up key ids, with no least interval) are each judged on their own:
// every token of a key held is accepted, every made-up one refused (run
// with -race).
func TestGuard_JWTsCheckedSideBySideDuringRefetchesAreEachJudgedAlone(t *testing.T) {
	t.Cleanup(mcpguard.SetJWKSMinInterval(0))
	k := newKeyServer(t)
	key := ecKeyFor(t)
	k.publish("e1", &key.PublicKey)
	cfg, err := mcpguard.ParseConfig([]byte(`{"oauth": {"resource": "` + guardResource + `", "authorization_servers": ["https://auth.example.com"],
	  "jwks_url": "` + k.srv.URL + `/jwks"}, "mcpServers": {"s": {"url": "http://s.internal/mcp"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	verify, err := cfg.Verifier()
	if err != nil {
		t.Fatal(err)
	}
	good := sign(t, jwt.SigningMethodES256, "e1", key, claims("ana@example.com"))
	madeUp := sign(t, jwt.SigningMethodES256, "made-up", key, claims("mallory@example.com"))
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for range 40 {
				if i%2 == 0 {
					if info, err := verify(t.Context(), madeUp, nil); err == nil {
						t.Errorf("a made-up key id acted for %s", info.UserID)
					}
				} else if info, err := verify(t.Context(), good, nil); err != nil || info.UserID != "ana@example.com" {
					t.Errorf("a token of the set's key: %v, %v", info, err)
				}
			}
		})
	}
	wg.Wait()
}

// A key set may hold keys the guard cannot or will not use: of a curve or
// type it lacks (Ed448, X25519, secp256k1), too weak (an RSA key under
// 2048 bits), so large that checking one made-up signature would take
// the guard seconds, garbled, or a point off its curve. They are left out, and the rest of the
// set serves: one such key does not answer every token 500. Two keys may
// share a kid when their types differ (RFC 7517 §4.5): the token's
// algorithm tells which signed it. A token naming a key left out, or
// whose algorithm the key does not fit (ES384 on a P-256 key), is refused.
func TestGuard_AKeyTheGuardCannotUseLeavesTheRestOfTheSetServing(t *testing.T) {
	ecKey := ecKeyFor(t)
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	weak, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	huge := new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 1<<19), big.NewInt(1))
	k := newKeyServer(t)
	k.publish("e1", &ecKey.PublicKey)
	k.publish("e1", &rsaKey.PublicKey)
	k.publish("weak", &weak.PublicKey)
	k.mu.Lock()
	k.keys = append(k.keys,
		map[string]any{"kty": "OKP", "crv": "Ed448", "kid": "d448", "x": b64url(make([]byte, 57))},
		map[string]any{"kty": "OKP", "crv": "X25519", "kid": "x1", "x": b64url(make([]byte, 32))},
		map[string]any{"kty": "EC", "crv": "secp256k1", "kid": "k1", "x": b64url(make([]byte, 32)), "y": b64url(make([]byte, 32))},
		map[string]any{"kty": "RSA", "kid": "huge", "n": b64url(huge.Bytes()), "e": "AQAB"},
		map[string]any{"kty": "RSA", "kid": "garbled", "n": "not base64url!", "e": "AQAB"},
		map[string]any{"kty": "EC", "crv": "P-256", "kid": "off-curve", "x": b64url(bytes.Repeat([]byte{1}, 32)), "y": b64url(bytes.Repeat([]byte{1}, 32))})
	k.mu.Unlock()
	front, c := jwtFront(t, k)

	// ES384 over the P-256 key: a valid ECDSA signature, with the hash and
	// size of ES384 (48-byte r and s), which RFC 7518 §3.4 gives P-384.
	es384 := func() string {
		head := b64url([]byte(`{"alg":"ES384","kid":"e1","typ":"JWT"}`))
		body, _ := json.Marshal(claims("ana@example.com"))
		input := head + "." + b64url(body)
		h := crypto.SHA384.New()
		h.Write([]byte(input))
		r, s, err := ecdsa.Sign(rand.Reader, ecKey, h.Sum(nil))
		if err != nil {
			t.Fatal(err)
		}
		sig := make([]byte, 96)
		r.FillBytes(sig[:48])
		s.FillBytes(sig[48:])
		return input + "." + b64url(sig)
	}()
	// A made-up signature of the huge key's size.
	hugeToken := b64url([]byte(`{"alg":"RS256","kid":"huge","typ":"JWT"}`)) + "." + b64url([]byte(`{"sub":"mallory@example.com"}`)) + "." + b64url(make([]byte, len(huge.Bytes())))

	for name, tc := range map[string]struct {
		token string
		want  int
	}{
		"ES256 by e1":              {sign(t, jwt.SigningMethodES256, "e1", ecKey, claims("ana@example.com")), 200},
		"RS256 by e1 (RSA)":        {sign(t, jwt.SigningMethodRS256, "e1", rsaKey, claims("ana@example.com")), 200},
		"a 1024-bit RSA key":       {sign(t, jwt.SigningMethodRS256, "weak", weak, claims("ana@example.com")), 401},
		"ES384 on the P-256 key":   {es384, 401},
		"the huge key":             {hugeToken, 401},
		"naming the secp256k1 key": {sign(t, jwt.SigningMethodES256, "k1", ecKey, claims("ana@example.com")), 401},
		"naming the X25519 key":    {sign(t, jwt.SigningMethodES256, "x1", ecKey, claims("ana@example.com")), 401},
		"naming a point off P-256": {sign(t, jwt.SigningMethodES256, "off-curve", ecKey, claims("ana@example.com")), 401},
	} {
		if got := status(t, front.URL, tc.token); got != tc.want {
			t.Errorf("%s: %d, want %d", name, got, tc.want)
		}
	}
	// The keys left out are out of the set the guard verifies with: the
	// huge RSA key above all, whose made-up signatures would each cost
	// seconds of CPU to check.
	k.mu.Lock()
	set, _ := json.Marshal(map[string]any{"keys": k.keys})
	k.mu.Unlock()
	if usable, err := mcpguard.UsableKeys(set); err != nil || !slices.Equal(usable, []string{"e1"}) {
		t.Errorf("the keys the guard verifies with: %v (%v), want only e1 (its EC and RSA keys)", usable, err)
	}
	if c.count() != 0 {
		t.Fatalf("initialize sent %d messages", c.count())
	}
}

// jwks_url may name ${VARIABLES} of the guard's environment, as the
// verifier reads it: the configuration takes it, and the URL is checked
// once they are read, so that one that is not an http(s) URL then stops
// the front at start rather than answering every token 500.
func TestConfig_AJWKSURLMayNameVariablesAndIsCheckedOnceTheyAreRead(t *testing.T) {
	verifier := func(jwksURL string) error {
		cfg, err := mcpguard.ParseConfig([]byte(`{"oauth": {"resource": "` + guardResource + `", "authorization_servers": ["https://auth.example.com"],
		  "jwks_url": "` + jwksURL + `"}, "mcpServers": {"s": {"url": "http://s.internal/mcp"}}}`))
		if err != nil {
			return err
		}
		_, err = cfg.Verifier()
		return err
	}
	t.Setenv("AUTH_HOST", "auth.example.com")
	t.Setenv("JWKS_URL", "https://auth.example.com/.well-known/jwks.json")
	for _, u := range []string{"${JWKS_URL}", "https://${AUTH_HOST}/.well-known/jwks.json"} {
		if err := verifier(u); err != nil {
			t.Errorf("jwks_url %q: %v", u, err)
		}
	}
	t.Setenv("JWKS_URL", "auth.example.com/.well-known/jwks.json")
	if err := verifier("${JWKS_URL}"); err == nil || !strings.Contains(err.Error(), "oauth.jwks_url") {
		t.Errorf("jwks_url %q once read: %v, want an error at oauth.jwks_url", "auth.example.com/.well-known/jwks.json", err)
	}
}

// The clocks of the authorization server and the guard may differ by 30
// seconds, for exp as for nbf: a JWT whose exp passed less than that ago
// by the guard's clock is accepted, one past it longer refused.
func TestGuard_AJWTIsJudgedWithTheClockSkewAllowedForItsExp(t *testing.T) {
	k := newKeyServer(t)
	key := ecKeyFor(t)
	k.publish("e1", &key.PublicKey)
	front, _ := jwtFront(t, k)
	now := time.Now()
	for name, tc := range map[string]struct {
		exp  time.Time
		want int
	}{
		"exp 10s ago": {now.Add(-10 * time.Second), 200},
		"exp 60s ago": {now.Add(-60 * time.Second), 401},
	} {
		if got := status(t, front.URL, sign(t, jwt.SigningMethodES256, "e1", key, claims("ana@example.com", "exp", tc.exp.Unix(), "iat", tc.exp.Add(-time.Hour).Unix()))); got != tc.want {
			t.Errorf("%s: %d, want %d", name, got, tc.want)
		}
	}
}

// A key set that cannot be fetched is the operator's to hear of, in the
// log: the unauthenticated client's 500 names neither the key set's URL
// nor what failed, nor whether its token was any good.
func TestGuard_AKeySetThatCannotBeFetchedTellsAnUnauthenticatedClientNothingOfTheGuard(t *testing.T) {
	k := newKeyServer(t)
	k.failing.Store(true)
	front, _ := jwtFront(t, k)
	key := ecKeyFor(t)
	for _, token := range []string{sign(t, jwt.SigningMethodES256, "e1", key, claims("ana@example.com")), sign(t, jwt.SigningMethodES256, "", key, claims("ana@example.com"))} {
		req, _ := http.NewRequest(http.MethodPost, front.URL, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}`))
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusInternalServerError {
			t.Errorf("a token while the key set cannot be fetched: %s, want 500", resp.Status)
		}
		for _, secret := range []string{k.srv.URL, "/jwks", "jwks_url", "503", "down"} {
			if strings.Contains(string(body), secret) {
				t.Errorf("the answer to an unauthenticated request names %q: %s", secret, body)
			}
		}
	}
}

// A key the authorization server withdrew from its set stops verifying
// once the keys held are past their age and the set is fetched again: a
// request finding them old sets off the fetch without waiting for it, and
// the tokens that follow are judged by the new set.
func TestGuard_AWithdrawnKeyStopsVerifyingOnceTheSetIsFetchedAgain(t *testing.T) {
	t.Cleanup(mcpguard.SetJWKSMinInterval(0))
	k := newKeyServer(t)
	old := ecKeyFor(t)
	fresh := ecKeyFor(t)
	k.publish("old", &old.PublicKey)
	front, _ := jwtFront(t, k)
	token := sign(t, jwt.SigningMethodES256, "old", old, claims("ana@example.com"))
	if got := status(t, front.URL, token); got != 200 {
		t.Fatalf("a token of the set's key: %d", got)
	}
	k.mu.Lock()
	k.keys = nil
	k.mu.Unlock()
	k.publish("new", &fresh.PublicKey)
	if got := status(t, front.URL, token); got != 200 {
		t.Errorf("a token of a withdrawn key, the keys held not yet past their age: %d, want 200", got)
	}

	t.Cleanup(mcpguard.SetJWKSMaxAge(0))
	deadline := time.Now().Add(5 * time.Second)
	for status(t, front.URL, token) != 401 {
		if time.Now().After(deadline) {
			t.Fatalf("a token of a withdrawn key still verifies, the keys held past their age")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := status(t, front.URL, sign(t, jwt.SigningMethodES256, "new", fresh, claims("ana@example.com"))); got != 200 {
		t.Errorf("a token of the set's new key: %d, want 200", got)
	}
}

// The guard's requests to its authorization server (the key set, token
// introspection) are never redirected from https to plain http, where
// anyone on the path could answer for the server.
func TestGuard_TheAuthorizationServerIsNeverAskedOverADowngradedRedirect(t *testing.T) {
	check := mcpguard.AuthServerClient().CheckRedirect
	req := func(u string) *http.Request {
		r, err := http.NewRequest(http.MethodGet, u, nil)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	from := []*http.Request{req("https://auth.example.com/jwks")}
	if err := check(req("http://auth.example.com/jwks"), from); err == nil {
		t.Error("a redirect from https to http was followed")
	}
	if err := check(req("https://keys.example.com/jwks"), from); err != nil {
		t.Errorf("a redirect from https to https: %v", err)
	}
	if err := check(req("http://127.0.0.1:9000/jwks"), []*http.Request{req("http://127.0.0.1:8000/jwks")}); err != nil {
		t.Errorf("a redirect within plain http (a configured http URL): %v", err)
	}
}
