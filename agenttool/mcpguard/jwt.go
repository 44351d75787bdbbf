package mcpguard

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/big"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
)

// JWT access tokens (RFC 9068), checked at the guard against the
// authorization server's published keys (jwks_url), for servers that
// offer no introspection (most hosted identity providers).

// jwtMethods are the signature algorithms a token may use: asymmetric
// ones only. "none" and the HMAC family never verify here (a public key
// taken for an HMAC secret would let anyone sign).
var jwtMethods = []string{"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}

const (
	// jwtLeeway is the clock skew allowed between the authorization
	// server and the guard, for exp, nbf and iat.
	jwtLeeway = 30 * time.Second
	// jwksStale is how long keys serve while the set cannot be fetched
	// again: past it, tokens are not judged (500) rather than checked
	// against keys the server may have withdrawn.
	jwksStale = time.Hour
)

// jwksMaxAge is how long fetched keys serve before they are fetched
// again, so that a key the server withdrew stops verifying (a variable
// for tests).
var jwksMaxAge = 10 * time.Minute

// jwksMinInterval is the least time between two fetches of the key set,
// so that tokens with made-up key ids cannot make the guard hammer the
// authorization server (a variable for tests).
var jwksMinInterval = 10 * time.Second

// errKeys is a failure to get the authorization server's keys: the
// request is refused (500), the token not judged.
var errKeys = errors.New("mcpguard: the authorization server's keys (oauth.jwks_url) could not be fetched")

// jwtVerifier checks JWT access tokens against a key set.
type jwtVerifier struct {
	o      OAuth
	url    string
	client *http.Client
	parser *jwt.Parser

	mu      sync.Mutex
	keys    map[string][]jwk // by kid
	fetched time.Time        // when keys were fetched
	tried   time.Time        // the last fetch, whatever came of it
	failed  error            // why the last fetch failed, or nil
	pending chan struct{}    // closed when the fetch under way ends; nil if none is
}

// jwk is one verification key of the set.
type jwk struct {
	alg string // the algorithm the set pins the key to, if any
	key crypto.PublicKey
}

// fits reports whether a token signed alg may have been signed by k: the
// key's type (and an EC key's curve, RFC 7518 §3.4) is the algorithm's,
// and the set pins the key to no other algorithm.
func (k jwk) fits(alg string) bool {
	if k.alg != "" && k.alg != alg {
		return false
	}
	switch key := k.key.(type) {
	case *rsa.PublicKey:
		return strings.HasPrefix(alg, "RS") || strings.HasPrefix(alg, "PS")
	case *ecdsa.PublicKey:
		return map[string]string{"ES256": "P-256", "ES384": "P-384", "ES512": "P-521"}[alg] == key.Curve.Params().Name
	case ed25519.PublicKey:
		return alg == "EdDSA"
	}
	return false
}

func newJWTVerifier(o *OAuth) *jwtVerifier {
	v := &jwtVerifier{o: *o, url: os.ExpandEnv(o.JWKSURL), client: authServerClient(),
		parser: jwt.NewParser(jwt.WithValidMethods(jwtMethods), jwt.WithExpirationRequired(), jwt.WithLeeway(jwtLeeway), jwt.WithIssuedAt())}
	if v.o.PrincipalClaim == "" {
		v.o.PrincipalClaim = "sub"
	}
	return v
}

// verify returns the token's principal and scopes if a key of the set
// signed it, for this guard, from one of the authorization servers, and
// it is within its lifetime.
func (v *jwtVerifier) verify(ctx context.Context, token string) (*auth.TokenInfo, error) {
	claims := jwt.MapClaims{}
	_, err := v.parser.ParseWithClaims(token, claims, func(t *jwt.Token) (any, error) { return v.key(ctx, t) })
	switch {
	case errors.Is(err, errKeys):
		return nil, err
	case err != nil:
		return nil, fmt.Errorf("%w: %v", auth.ErrInvalidToken, err)
	}
	iss, _ := claims["iss"].(string)
	aud, _ := claims.GetAudience()
	switch {
	case iss == "" || !slices.ContainsFunc(v.o.AuthorizationServers, func(s string) bool {
		return strings.TrimSuffix(s, "/") == strings.TrimSuffix(iss, "/")
	}):
		return nil, fmt.Errorf("%w: the token's issuer is not one of oauth.authorization_servers", auth.ErrInvalidToken)
	case !oauthex.MatchesResource(aud, v.o.Resource):
		return nil, fmt.Errorf("%w: the token was not issued for this resource (%s)", auth.ErrInvalidToken, v.o.Resource)
	}
	principal, _ := claims[v.o.PrincipalClaim].(string)
	if principal == "" {
		return nil, fmt.Errorf("%w: the token names no principal (%q)", auth.ErrInvalidToken, v.o.PrincipalClaim)
	}
	exp, _ := claims.GetExpirationTime()
	return &auth.TokenInfo{UserID: principal, Scopes: tokenScopes(claims), Expiration: exp.Time}, nil
}

// tokenScopes reads "scope" (RFC 9068: space-separated), or "scp" (a
// list, or a string, as some servers write it).
func tokenScopes(claims jwt.MapClaims) []string {
	if s, ok := claims["scope"].(string); ok {
		return strings.Fields(s)
	}
	switch scp := claims["scp"].(type) {
	case string:
		return strings.Fields(scp)
	case []any:
		var out []string
		for _, s := range scp {
			if s, ok := s.(string); ok {
				out = append(out, s)
			}
		}
		return out
	}
	return nil
}

// key finds the key that must have signed t: by its kid, or the set's
// only key for its algorithm when it names none. A kid the set lacks
// fetches the set again (a key the server just added), at most once per
// jwksMinInterval. Keys past jwksMaxAge serve while the set is fetched
// again: only a request that needs the new set (the guard holds none, or
// its kid is not in the set held) waits for it.
func (v *jwtVerifier) key(ctx context.Context, t *jwt.Token) (any, error) {
	alg := t.Method.Alg()
	kid, _ := t.Header["kid"].(string)
	v.mu.Lock()
	defer v.mu.Unlock()
	now := time.Now()
	if v.keys == nil || now.Sub(v.fetched) > jwksMaxAge {
		if pending := v.refresh(now); pending != nil && v.keys == nil {
			if err := v.await(ctx, pending); err != nil {
				return nil, err
			}
		}
	}
	switch {
	case v.keys == nil:
		return nil, fmt.Errorf("%w: %v", errKeys, v.failed)
	case now.Sub(v.fetched) > jwksStale:
		return nil, fmt.Errorf("%w: the keys held were fetched %s ago: %v", errKeys, now.Sub(v.fetched).Round(time.Second), v.failed)
	}
	k, err := v.find(kid, alg)
	if errors.Is(err, errNoKey) {
		if pending := v.refresh(now); pending != nil {
			if err := v.await(ctx, pending); err != nil {
				return nil, err
			}
			if v.failed != nil {
				return nil, fmt.Errorf("%w: %v", errKeys, v.failed)
			}
			k, err = v.find(kid, alg)
		}
	}
	if err != nil {
		return nil, err
	}
	return k.key, nil
}

// errNoKey is a kid the key set lacks.
var errNoKey = errors.New("no such key in the authorization server's key set")

// find returns the key that must have signed a token of alg naming kid:
// the one key of that kid that fits alg (two keys may share a kid when
// their types differ), or, when the token names none, the set's one key
// that fits alg.
func (v *jwtVerifier) find(kid, alg string) (jwk, error) {
	named := v.keys[kid]
	if kid == "" {
		named = slices.Concat(slices.Collect(maps.Values(v.keys))...)
	}
	var fit []jwk
	for _, k := range named {
		if k.fits(alg) {
			fit = append(fit, k)
		}
	}
	switch {
	case len(fit) == 1:
		return fit[0], nil
	case kid == "":
		return jwk{}, fmt.Errorf("the token names no key (kid), and the key set has not exactly one key for %s", alg)
	case len(named) == 0:
		return jwk{}, fmt.Errorf("%w: %q", errNoKey, kid)
	case len(fit) == 0:
		return jwk{}, fmt.Errorf("key %q is not for %s", kid, alg)
	default:
		return jwk{}, fmt.Errorf("the key set has %d keys %q for %s", len(fit), kid, alg)
	}
}

// refresh starts fetching the set, unless a fetch is under way or the
// last one began less than jwksMinInterval ago, and returns the fetch
// under way (closed when it ends), or nil; v.mu is held. The fetch is
// the guard's, not the request's: a client that hangs up does not fail
// it, and it runs without v.mu, so that the keys held serve meanwhile.
func (v *jwtVerifier) refresh(now time.Time) <-chan struct{} {
	if v.pending == nil && now.Sub(v.tried) >= jwksMinInterval {
		v.tried = now
		done := make(chan struct{})
		v.pending = done
		go func() {
			keys, err := v.fetch()
			v.mu.Lock()
			defer v.mu.Unlock()
			if err == nil {
				v.keys, v.fetched = keys, now
			}
			v.failed, v.pending = err, nil
			close(done)
		}()
	}
	return v.pending
}

// await waits, v.mu released, for the fetch under way to end, or for the
// request to be given up.
func (v *jwtVerifier) await(ctx context.Context, pending <-chan struct{}) error {
	v.mu.Unlock()
	defer v.mu.Lock()
	select {
	case <-pending:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%w: the request ended while they were fetched: %v", errKeys, context.Cause(ctx))
	}
}

// fetch gets the key set, within the client's timeout; v.mu is not held.
func (v *jwtVerifier) fetch() (map[string][]jwk, error) {
	req, err := http.NewRequest(http.MethodGet, v.url, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errKeys, err)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := v.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errKeys, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errKeys, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%w: %s answered %s", errKeys, v.url, resp.Status)
	}
	keys, err := parseJWKS(body)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", errKeys, v.url, err)
	}
	return keys, nil
}

// parseJWKS reads a JSON Web Key Set (RFC 7517): its public signature
// keys, by kid. Keys of other types or uses (symmetric keys, encryption
// keys), and those the guard cannot or will not use (another curve, an
// RSA key too weak or too large, a garbled one), are left out, so that
// one of them does not take the rest of the set down; a set with no key
// left is an error.
func parseJWKS(b []byte) (map[string][]jwk, error) {
	var set struct {
		Keys []struct {
			Kty string `json:"kty"`
			Use string `json:"use"`
			Alg string `json:"alg"`
			Kid string `json:"kid"`
			Crv string `json:"crv"`
			N   string `json:"n"`
			E   string `json:"e"`
			X   string `json:"x"`
			Y   string `json:"y"`
		} `json:"keys"`
	}
	if err := json.Unmarshal(b, &set); err != nil {
		return nil, fmt.Errorf("not a JSON Web Key Set: %v", err)
	}
	keys := map[string][]jwk{}
	var left []error
	for _, k := range set.Keys {
		if k.Use != "" && k.Use != "sig" {
			continue
		}
		var pub crypto.PublicKey
		var err error
		switch k.Kty {
		case "RSA":
			pub, err = rsaKey(k.N, k.E)
		case "EC":
			pub, err = ecKey(k.Crv, k.X, k.Y)
		case "OKP":
			pub, err = edKey(k.Crv, k.X)
		default:
			continue
		}
		if err != nil {
			left = append(left, fmt.Errorf("key %q: %v", k.Kid, err))
			continue
		}
		keys[k.Kid] = append(keys[k.Kid], jwk{alg: k.Alg, key: pub})
	}
	if len(keys) == 0 {
		return nil, errors.Join(append([]error{errors.New("no public signature key the guard can use in the set")}, left...)...)
	}
	return keys, nil
}

func b64(s string) ([]byte, error) { return base64.RawURLEncoding.DecodeString(s) }

func rsaKey(n, e string) (*rsa.PublicKey, error) {
	nb, err1 := b64(n)
	eb, err2 := b64(e)
	if err := errors.Join(err1, err2); err != nil || len(eb) == 0 || len(eb) > 4 {
		return nil, errors.New("an RSA key's n and e must be base64url")
	}
	key := &rsa.PublicKey{N: new(big.Int).SetBytes(nb), E: int(new(big.Int).SetBytes(eb).Int64())}
	if bits := key.N.BitLen(); bits < 2048 || bits > 16384 {
		return nil, fmt.Errorf("an RSA key of %d bits: 2048 at least, 16384 at most", bits)
	}
	return key, nil
}

func ecKey(crv, x, y string) (*ecdsa.PublicKey, error) {
	var c elliptic.Curve
	switch crv {
	case "P-256":
		c = elliptic.P256()
	case "P-384":
		c = elliptic.P384()
	case "P-521":
		c = elliptic.P521()
	default:
		return nil, fmt.Errorf("curve %q: P-256, P-384 or P-521", crv)
	}
	size := (c.Params().BitSize + 7) / 8
	xb, err1 := b64(x)
	yb, err2 := b64(y)
	if errors.Join(err1, err2) != nil || len(xb) != size || len(yb) != size {
		return nil, fmt.Errorf("an EC key's x and y must be base64url, %d bytes each", size)
	}
	// Parsing the uncompressed point checks that it is on the curve.
	return ecdsa.ParseUncompressedPublicKey(c, append(append([]byte{4}, xb...), yb...))
}

func edKey(crv, x string) (ed25519.PublicKey, error) {
	xb, err := b64(x)
	if crv != "Ed25519" || err != nil || len(xb) != ed25519.PublicKeySize {
		return nil, errors.New("an OKP key must be Ed25519, x base64url of 32 bytes")
	}
	return ed25519.PublicKey(xb), nil
}
