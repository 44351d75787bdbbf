package mcpguard

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
)

// OAuth makes an HTTP front an OAuth 2.1 resource server, as the MCP
// authorization specification describes: it publishes its protected
// resource metadata (RFC 9728), so that a client finds the authorization
// server to get a token from, and it checks each bearer token one of two
// ways: by asking that server (token introspection, RFC 7662:
// IntrospectionURL), or, for a server that issues JWT access tokens (RFC
// 9068) and offers no introspection, by their signature against the keys
// the server publishes (JWKSURL). A token counts only while it is active
// (the server says so; a JWT: its signature holds, and it is within its
// exp and nbf), only if it was issued for this guard (its audience is
// Resource) by one of AuthorizationServers, and only with the scopes
// Scopes names; the token's PrincipalClaim is the principal that acts.
type OAuth struct {
	// Resource is the guard's URL as clients reach it
	// ("https://guard.example.com/mcp"): the audience a token must have.
	Resource string `json:"resource"`
	// AuthorizationServers are the issuers clients get tokens from; the
	// metadata names them, and a token whose introspection names another
	// issuer is refused.
	AuthorizationServers []string `json:"authorization_servers"`
	// IntrospectionURL is the authorization server's introspection
	// endpoint; ClientID and ClientSecret the guard's credentials there
	// (HTTP Basic). Write the secret as a ${VARIABLE} of the guard's
	// environment.
	IntrospectionURL string `json:"introspection_url,omitempty"`
	ClientID         string `json:"client_id,omitempty"`
	ClientSecret     string `json:"client_secret,omitempty"`
	// JWKSURL is the authorization server's JSON Web Key Set (its
	// metadata's jwks_uri), in place of IntrospectionURL: tokens are JWTs
	// signed by one of its keys (RS*, PS*, ES*, EdDSA; never none or
	// HMAC), with an iss among AuthorizationServers and an exp. The keys
	// are fetched at the first token and again every ten minutes, or when
	// a token names a key the set lacks (at most every ten seconds). A
	// JWT cannot be revoked before its exp: the server's token lifetime
	// is how long a revoked one keeps working.
	JWKSURL string `json:"jwks_url,omitempty"`
	// Scopes are the scopes every call needs; a token without one of them
	// is answered 403 insufficient_scope.
	Scopes []string `json:"scopes,omitempty"`
	// PrincipalClaim is the member of the introspection response, or the
	// JWT's claim, that names who acts: "sub" unless set. Name a claim the
	// authorization server keeps unique and unchanging for a user: one
	// users may choose or change (a username, an email address at some
	// servers) lets one user act as another once the name passes to them.
	PrincipalClaim string `json:"principal_claim,omitempty"`
	// Cache is how long an active token's introspection is reused (never
	// past the token's expiry); introspection only. Unset, every request
	// asks the authorization server, and a revoked token stops at once; a
	// cache spares that round trip and keeps a revoked token working that
	// long.
	Cache Duration `json:"cache,omitempty"`
}

// metadataPath is where the protected resource metadata is served for a
// resource at path (RFC 9728 §3.1: the well-known prefix before the
// resource's path).
func metadataPath(resource string) string {
	u, err := url.Parse(resource)
	if err != nil {
		return "/.well-known/oauth-protected-resource"
	}
	return "/.well-known/oauth-protected-resource" + strings.TrimSuffix(u.Path, "/")
}

// check reports what is wrong with o, as bad reports a config error.
func (o *OAuth) check(bad func(path, format string, args ...any)) {
	u, err := url.Parse(o.Resource)
	switch {
	case o.Resource == "":
		bad("oauth.resource", "empty: the guard's URL as clients reach it (https://guard.example.com/mcp), the audience a token must have")
	case err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http"):
		bad("oauth.resource", "%q is not an http(s) URL", o.Resource)
	case u.Fragment != "":
		bad("oauth.resource", "a resource has no fragment (RFC 8707)")
	}
	if len(o.AuthorizationServers) == 0 {
		bad("oauth.authorization_servers", "none: name the issuer clients get tokens from")
	}
	switch {
	case o.IntrospectionURL == "" && o.JWKSURL == "":
		bad("oauth.introspection_url", "how are tokens checked? Name the authorization server's token introspection endpoint (RFC 7662), or, for JWT access tokens, its key set (jwks_url)")
	case o.IntrospectionURL != "" && o.JWKSURL != "":
		bad("oauth.jwks_url", "tokens are checked one way: by introspection_url or by jwks_url, not both")
	case o.JWKSURL != "":
		// One that names ${VARIABLES} is checked once they are read
		// (Config.Verifier).
		if !strings.Contains(o.JWKSURL, "$") && !isHTTPURL(o.JWKSURL) {
			bad("oauth.jwks_url", "%q is not an http(s) URL: the authorization server's jwks_uri", o.JWKSURL)
		}
		if o.ClientID != "" || o.ClientSecret != "" || o.Cache != 0 {
			bad("oauth.jwks_url", "client_id, client_secret and cache are for introspection_url: a JWT is checked here, without asking the server")
		}
	default:
		if _, err := url.Parse(o.IntrospectionURL); err != nil {
			bad("oauth.introspection_url", "%q is not a URL", o.IntrospectionURL)
		}
		if o.ClientID == "" {
			bad("oauth.client_id", "empty: the guard's client id at the authorization server, to call its introspection endpoint")
		}
		if o.Cache < 0 {
			bad("oauth.cache", "negative: leave it out to ask the authorization server at each request")
		}
	}
}

// isHTTPURL reports whether s is an absolute http(s) URL.
func isHTTPURL(s string) bool {
	u, err := url.Parse(s)
	return err == nil && u.Host != "" && (u.Scheme == "https" || u.Scheme == "http")
}

// introspection is what an introspection response says (RFC 7662 §2.2).
type introspection struct {
	Active   bool     `json:"active"`
	Scope    string   `json:"scope"`
	Exp      int64    `json:"exp"`
	Issuer   string   `json:"iss"`
	Audience audience `json:"aud"`
}

// audience is "aud": one string or several.
type audience []string

func (a *audience) UnmarshalJSON(b []byte) error {
	var one string
	if json.Unmarshal(b, &one) == nil {
		*a = audience{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return fmt.Errorf("aud is neither a string nor a list of strings")
	}
	*a = many
	return nil
}

// introspector checks tokens at an authorization server.
type introspector struct {
	o            OAuth
	clientSecret string
	client       *http.Client

	mu    sync.Mutex
	cache map[[32]byte]cached
}

type cached struct {
	info  auth.TokenInfo
	until time.Time
}

// maxCached bounds the introspection cache: past it, the cache starts
// over.
const maxCached = 10_000

func newIntrospector(o *OAuth) (*introspector, error) {
	in := &introspector{o: *o, clientSecret: os.ExpandEnv(o.ClientSecret), client: authServerClient(),
		cache: map[[32]byte]cached{}}
	in.o.ClientID = os.ExpandEnv(o.ClientID)
	if in.o.ClientID == "" {
		return nil, &ConfigError{Path: "oauth.client_id", Problem: "empty once its variables are read: set them in the guard's environment"}
	}
	if in.o.PrincipalClaim == "" {
		in.o.PrincipalClaim = "sub"
	}
	return in, nil
}

// verify returns the token's principal and scopes, asking the
// authorization server unless a recent answer is cached.
func (in *introspector) verify(ctx context.Context, token string) (*auth.TokenInfo, error) {
	d := sha256.Sum256([]byte(token))
	now := time.Now()
	if in.o.Cache > 0 {
		in.mu.Lock()
		c, ok := in.cache[d]
		in.mu.Unlock()
		if ok && now.Before(c.until) {
			info := c.info
			return &info, nil
		}
	}
	info, err := in.ask(ctx, token)
	if err != nil {
		return nil, err
	}
	if in.o.Cache > 0 {
		until := now.Add(time.Duration(in.o.Cache))
		if !info.Expiration.IsZero() && info.Expiration.Before(until) {
			until = info.Expiration
		}
		in.mu.Lock()
		if len(in.cache) >= maxCached {
			clear(in.cache)
		}
		in.cache[d] = cached{info: *info, until: until}
		in.mu.Unlock()
	}
	return info, nil
}

// errIntrospection is a failure to get an answer from the introspection
// endpoint: the request is refused (500), the token not judged.
var errIntrospection = errors.New("mcpguard: token introspection failed")

func (in *introspector) ask(ctx context.Context, token string) (*auth.TokenInfo, error) {
	form := url.Values{"token": {token}, "token_type_hint": {"access_token"}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, in.o.IntrospectionURL, strings.NewReader(form.Encode()))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errIntrospection, err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	req.SetBasicAuth(url.QueryEscape(in.o.ClientID), url.QueryEscape(in.clientSecret))
	resp, err := in.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errIntrospection, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errIntrospection, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%w: %s answered %s (are oauth.client_id and client_secret the guard's credentials there?)",
			errIntrospection, in.o.IntrospectionURL, resp.Status)
	}
	var r introspection
	var claims map[string]any
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("%w: the answer is not an introspection response: %v", errIntrospection, err)
	}
	json.Unmarshal(body, &claims)
	switch {
	case !r.Active:
		return nil, fmt.Errorf("%w: the authorization server says the token is not active", auth.ErrInvalidToken)
	case !oauthex.MatchesResource(r.Audience, in.o.Resource):
		return nil, fmt.Errorf("%w: the token was not issued for this resource (%s)", auth.ErrInvalidToken, in.o.Resource)
	case r.Issuer != "" && !slices.ContainsFunc(in.o.AuthorizationServers, func(s string) bool {
		return strings.TrimSuffix(s, "/") == strings.TrimSuffix(r.Issuer, "/")
	}):
		return nil, fmt.Errorf("%w: the token's issuer is not one of oauth.authorization_servers", auth.ErrInvalidToken)
	}
	principal, _ := claims[in.o.PrincipalClaim].(string)
	if principal == "" {
		return nil, fmt.Errorf("%w: the token names no principal (%q)", auth.ErrInvalidToken, in.o.PrincipalClaim)
	}
	info := &auth.TokenInfo{UserID: principal, Scopes: strings.Fields(r.Scope)}
	if r.Exp > 0 {
		info.Expiration = time.Unix(r.Exp, 0)
	}
	return info, nil
}

// HTTPHandler returns the guard's front as streamable HTTP behind the
// configuration's bearer tokens (Config.Tokens, Config.OAuth): with OAuth,
// it also serves the protected resource metadata, and a request without a
// valid token is answered 401 with a WWW-Authenticate header that points
// a client to it. It fails as [Config.Verifier] does.
func (g *Guard) HTTPHandler() (http.Handler, error) {
	checked, err := g.cfg.Verifier()
	if err != nil {
		return nil, err
	}
	// A token that could not be checked is answered 500 with no detail:
	// the request is not yet anyone's, and the detail (the introspection
	// endpoint, what failed) is the operator's, in the log.
	verify := func(ctx context.Context, token string, r *http.Request) (*auth.TokenInfo, error) {
		info, err := checked(ctx, token, r)
		if err != nil && !errors.Is(err, auth.ErrInvalidToken) {
			g.log.Warn("mcpguard: a bearer token could not be checked", "err", err)
			return nil, errors.New("the bearer token could not be checked; try again later")
		}
		return info, err
	}
	front := http.Handler(newStreamableHandler(g))
	o := g.cfg.OAuth
	if o == nil {
		return auth.RequireBearerToken(verify, nil)(front), nil
	}
	u, _ := url.Parse(o.Resource)
	path := metadataPath(o.Resource)
	var skew time.Duration
	if o.JWKSURL != "" {
		skew = jwtLeeway
	}
	meta := auth.ProtectedResourceMetadataHandler(&oauthex.ProtectedResourceMetadata{
		Resource: o.Resource, AuthorizationServers: o.AuthorizationServers, ScopesSupported: o.Scopes,
		BearerMethodsSupported: []string{"header"}, ResourceName: "retrysafe guard",
	})
	mux := http.NewServeMux()
	mux.Handle(path, meta)
	if path != "/.well-known/oauth-protected-resource" {
		mux.Handle("/.well-known/oauth-protected-resource", meta)
	}
	mux.Handle("/", auth.RequireBearerToken(verify, &auth.RequireBearerTokenOptions{
		ResourceMetadataURL: u.Scheme + "://" + u.Host + path, Scopes: o.Scopes,
		// An introspected token without exp is valid while the
		// authorization server says it is active.
		AllowMissingExpiration: true,
		// A JWT's exp is judged with the clock skew its verifier allows.
		ClockSkew: skew,
	})(front))
	return mux, nil
}

// authServerClient is the client the guard asks its authorization server
// with: within ten seconds, and never redirected from https to plain
// http, where anyone on the path could answer for the server (its keys,
// its word that a token is active).
func authServerClient() *http.Client {
	return &http.Client{Timeout: 10 * time.Second, CheckRedirect: func(req *http.Request, via []*http.Request) error {
		if len(via) >= 10 {
			return errors.New("stopped after 10 redirects")
		}
		if via[0].URL.Scheme == "https" && req.URL.Scheme != "https" {
			return fmt.Errorf("refused a redirect from https to %s", req.URL.Redacted())
		}
		return nil
	}}
}
