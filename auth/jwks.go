package auth

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/lestrrat-go/httprc/v3"
	"github.com/lestrrat-go/jwx/v3/jwk"
)

// Options configures New.
type Options struct {
	// Secret verifies HS256 tokens. Empty: HS256 tokens are refused.
	Secret []byte

	// JWKSURL is where the identity provider publishes its public keys (a
	// JSON Web Key Set). Empty: only HS256 tokens are accepted. The set is
	// fetched when New runs, cached, refreshed in the background (every
	// JWKSRefresh at the latest, sooner when the answer's cache headers say
	// so) and refetched at once when a token names a key id the cached set
	// lacks (key rotation), at most once per JWKSMinRefresh.
	JWKSURL string
	// Issuer, if set, must be the iss claim of every JWKS-verified token.
	Issuer string
	// Audience, if set, must be among the aud claim of every JWKS-verified
	// token.
	Audience string
	// JWKSRefresh is the longest time a fetched key set is used without
	// fetching it again. Default 15m.
	JWKSRefresh time.Duration
	// JWKSMinRefresh is the shortest interval between two fetches, also
	// those forced by an unknown key id. Default 5s.
	JWKSMinRefresh time.Duration
	// JWKSWait bounds the first fetch in New. Default 10s.
	JWKSWait time.Duration
	// HTTPClient fetches the key set. Default: a client with a 10s timeout.
	HTTPClient *http.Client

	// AdminGroup, if set, makes a caller an admin when the GroupsClaim claim
	// of its token lists this group (besides role "admin").
	AdminGroup string
	// GroupsClaim is the claim that lists the caller's groups. Default
	// "groups".
	GroupsClaim string

	// Cache sizes the cache of verified tokens (cache.go).
	Cache CacheOptions

	Logger *slog.Logger
}

// New returns a Verifier configured by o. With a JWKS URL it fetches the key
// set before returning (an unreachable provider is an error, so a bad URL
// stops the start) and refreshes it in the background until ctx is done or
// Close is called.
func New(ctx context.Context, o Options) (*Verifier, error) {
	if o.GroupsClaim == "" {
		o.GroupsClaim = "groups"
	}
	v := NewVerifier(o.Secret)
	v.cache = newTokenCache(o.Cache)
	v.adminGroup, v.groups = o.AdminGroup, o.GroupsClaim
	if o.JWKSURL == "" {
		if len(o.Secret) == 0 {
			return nil, errors.New("auth: neither a secret nor a JWKS URL")
		}
		return v, nil
	}
	u, err := url.Parse(o.JWKSURL)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return nil, fmt.Errorf("auth: JWKS URL %q is not an http(s) URL", o.JWKSURL)
	}
	keys, err := newJWKS(ctx, o)
	if err != nil {
		return nil, err
	}
	v.keys = keys
	opts := []jwt.ParserOption{
		jwt.WithValidMethods([]string{jwt.SigningMethodRS256.Alg(), jwt.SigningMethodES256.Alg()}),
		jwt.WithExpirationRequired(),
		jwt.WithLeeway(30 * time.Second),
		jwt.WithTimeFunc(v.now),
	}
	if o.Issuer != "" {
		opts = append(opts, jwt.WithIssuer(o.Issuer))
	}
	if o.Audience != "" {
		opts = append(opts, jwt.WithAudience(o.Audience))
	}
	v.idp = jwt.NewParser(opts...)
	return v, nil
}

// Close stops the background refresh of the key set, if any.
func (v *Verifier) Close() error {
	if v.keys == nil {
		return nil
	}
	return v.keys.close()
}

// jwks is the cached key set of one URL (lestrrat-go/jwx's jwk.Cache).
type jwks struct {
	url        string
	cache      *jwk.Cache
	cancel     context.CancelFunc
	minRefresh time.Duration
	log        *slog.Logger

	mu       sync.Mutex // serialises forced refreshes
	lastPull time.Time
}

func newJWKS(ctx context.Context, o Options) (*jwks, error) {
	if o.JWKSRefresh <= 0 {
		o.JWKSRefresh = 15 * time.Minute
	}
	if o.JWKSMinRefresh <= 0 {
		o.JWKSMinRefresh = 5 * time.Second
	}
	if o.JWKSWait <= 0 {
		o.JWKSWait = 10 * time.Second
	}
	if o.HTTPClient == nil {
		o.HTTPClient = &http.Client{Timeout: 10 * time.Second}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	cctx, cancel := context.WithCancel(ctx)
	cache, err := jwk.NewCache(cctx, httprc.NewClient())
	if err != nil {
		cancel()
		return nil, fmt.Errorf("auth: JWKS cache: %w", err)
	}
	k := &jwks{url: o.JWKSURL, cache: cache, cancel: cancel, minRefresh: o.JWKSMinRefresh, log: o.Logger}
	wctx, wcancel := context.WithTimeout(ctx, o.JWKSWait)
	defer wcancel()
	err = cache.Register(wctx, o.JWKSURL,
		jwk.WithHTTPClient(o.HTTPClient),
		jwk.WithMinInterval(o.JWKSMinRefresh),
		jwk.WithMaxInterval(o.JWKSRefresh),
	)
	if err == nil {
		_, err = cache.Lookup(wctx, o.JWKSURL)
	}
	if err != nil {
		k.close()
		return nil, fmt.Errorf("auth: fetch JWKS %s: %w", o.JWKSURL, err)
	}
	k.lastPull = time.Now()
	return k, nil
}

func (k *jwks) close() error {
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := k.cache.Shutdown(sctx)
	k.cancel()
	return err
}

// keyOf is the key lookup of RS256/ES256 tokens: the public key of the
// token's kid, of the type its alg needs (never a symmetric key), and the
// JWKS entry it came from.
func (k *jwks) keyOf(t *jwt.Token) (jwk.Key, any, error) {
	alg := t.Method.Alg()
	kid, _ := t.Header["kid"].(string)
	key, err := k.lookup(kid)
	if err != nil {
		return nil, nil, err
	}
	pub, err := publicKeyFor(key, kid, alg)
	return key, pub, err
}

// holds reports whether key is still the entry of kid in the cached set
// (no fetch): false once the set was fetched again, even with the same keys.
func (k *jwks) holds(kid string, key jwk.Key) bool {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	cur, ok := k.find(ctx, kid)
	return ok && cur == key
}

func publicKeyFor(key jwk.Key, kid, alg string) (any, error) {
	if ka, ok := key.Algorithm(); ok && ka.String() != alg {
		return nil, fmt.Errorf("key %q is for %s, token says %s", kid, ka, alg)
	}
	if use, ok := key.KeyUsage(); ok && use != "sig" {
		return nil, fmt.Errorf("key %q is not a signing key", kid)
	}
	var raw any
	if err := jwk.Export(key, &raw); err != nil {
		return nil, fmt.Errorf("key %q: %w", kid, err)
	}
	switch pub := raw.(type) {
	case *rsa.PublicKey:
		if alg == jwt.SigningMethodRS256.Alg() && pub.N.BitLen() >= 2048 {
			return pub, nil
		}
	case *ecdsa.PublicKey:
		if alg == jwt.SigningMethodES256.Alg() && pub.Curve == elliptic.P256() {
			return pub, nil
		}
	}
	return nil, fmt.Errorf("key %q (%T) does not fit %s", kid, raw, alg)
}

// lookup returns the key with kid (or the only key of a one-key set when
// the token names none). A kid the cached set lacks fetches the set again,
// at most once per minRefresh: the provider may have rotated its keys.
func (k *jwks) lookup(kid string) (jwk.Key, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	find := func() (jwk.Key, bool) { return k.find(ctx, kid) }
	if key, ok := find(); ok {
		return key, nil
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if key, ok := find(); ok { // another caller just refreshed
		return key, nil
	}
	if time.Since(k.lastPull) < k.minRefresh {
		return nil, fmt.Errorf("no key %q in the JWKS", kid)
	}
	k.lastPull = time.Now()
	if _, err := k.cache.Refresh(ctx, k.url); err != nil {
		k.log.Warn("JWKS refresh failed", "url", k.url, "err", err)
		return nil, fmt.Errorf("no key %q in the JWKS (refresh failed)", kid)
	}
	if key, ok := find(); ok {
		return key, nil
	}
	return nil, fmt.Errorf("no key %q in the JWKS", kid)
}

// find returns the key with kid of the cached set (or its only key when kid
// is empty), without fetching.
func (k *jwks) find(ctx context.Context, kid string) (jwk.Key, bool) {
	set, err := k.cache.Lookup(ctx, k.url)
	if err != nil {
		return nil, false
	}
	if kid == "" {
		if set.Len() == 1 {
			return set.Key(0)
		}
		return nil, false
	}
	return set.LookupKeyID(kid)
}
