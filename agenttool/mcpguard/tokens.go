package mcpguard

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"maps"
	"net/http"
	"os"
	"slices"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
)

// Verifier returns a bearer-token verifier for the SDK's
// auth.RequireBearerToken that accepts Config.Tokens — each token stands
// for its principal, the verified token's UserID; tokens are compared in
// constant time, every configured one each time — and, with Config.OAuth,
// a token the authorization server says is active, or a JWT one of its
// keys signed, issued for the guard, for the principal it names. It fails
// if it would accept no token, or a token or the OAuth client id is empty
// once its ${VARIABLES} are read, or the OAuth jwks_url is then not an
// http(s) URL.
func (c *Config) Verifier() (auth.TokenVerifier, error) {
	type entry struct {
		principal string
		digest    [32]byte
	}
	var entries []entry
	for _, p := range slices.Sorted(maps.Keys(c.Tokens)) {
		tok := os.ExpandEnv(c.Tokens[p])
		if tok == "" {
			return nil, &ConfigError{Path: "tokens." + p, Problem: "empty once its variables are read: set them in the guard's environment"}
		}
		d := sha256.Sum256([]byte(tok))
		for _, e := range entries {
			if e.digest == d {
				return nil, &ConfigError{Path: "tokens." + p, Problem: "the same token as " + e.principal + " once its variables are read: a token stands for one principal"}
			}
		}
		entries = append(entries, entry{principal: p, digest: d})
	}
	var oauth func(context.Context, string) (*auth.TokenInfo, error)
	switch {
	case c.OAuth != nil && c.OAuth.JWKSURL != "":
		switch u := os.ExpandEnv(c.OAuth.JWKSURL); {
		case u == "":
			return nil, &ConfigError{Path: "oauth.jwks_url", Problem: "empty once its variables are read: set them in the guard's environment"}
		case !isHTTPURL(u):
			return nil, &ConfigError{Path: "oauth.jwks_url", Problem: fmt.Sprintf("%q once its variables are read is not an http(s) URL: the authorization server's jwks_uri", u)}
		}
		oauth = newJWTVerifier(c.OAuth).verify
	case c.OAuth != nil:
		in, err := newIntrospector(c.OAuth)
		if err != nil {
			return nil, err
		}
		oauth = in.verify
	}
	if len(entries) == 0 && oauth == nil {
		return nil, &ConfigError{Path: "tokens", Problem: "none: an HTTP front accepts only the bearer tokens listed here, by principal, or those of an authorization server (oauth)"}
	}
	return func(ctx context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
		d := sha256.Sum256([]byte(token))
		found := ""
		for _, e := range entries {
			if subtle.ConstantTimeCompare(d[:], e.digest[:]) == 1 {
				found = e.principal
			}
		}
		switch {
		case found == "" && oauth != nil:
			return oauth(ctx, token)
		case found == "":
			return nil, fmt.Errorf("%w: unknown bearer token", auth.ErrInvalidToken)
		}
		// A static token is the operator's own: it carries the scopes an
		// OAuth token must have, so that both serve side by side.
		var scopes []string
		if c.OAuth != nil {
			scopes = c.OAuth.Scopes
		}
		return &auth.TokenInfo{UserID: found, Scopes: scopes, Expiration: time.Now().Add(time.Hour)}, nil
	}, nil
}
