package auth

import (
	"cmp"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/lestrrat-go/httpcc"
	"github.com/lestrrat-go/httprc/v3"
	"github.com/lestrrat-go/jwx/v3/jwk"
)

// Provider is one identity provider: the iss of its tokens and the URL of
// its JSON Web Key Set.
type Provider struct {
	Issuer  string // exact iss of its tokens, 1 to 255 bytes
	JWKSURL string // https (http only on loopback when Options.RequireHTTPS)
}

// Options configures New.
type Options struct {
	// Secret verifies HS256 tokens. Empty: HS256 tokens are refused.
	Secret []byte
	// HS256Issuer and HS256Audience must be the iss and one of the aud of
	// every HS256 token. Defaults DefaultHS256Issuer, DefaultHS256Audience.
	HS256Issuer   string
	HS256Audience string

	// Providers are the identity providers whose RS256 and ES256 tokens are
	// accepted; each issuer once. Each key set is fetched when New runs,
	// cached, refreshed in the background as the provider's Cache-Control
	// max-age or Expires says (bounded by JWKSMinRefresh and JWKSRefresh;
	// JWKSRefresh when it says nothing), and refetched at once when a token
	// names a key id the cached set lacks (key rotation), at most once per
	// JWKSMinRefresh.
	Providers []Provider
	// Audience, if set, must be among the aud claim of every provider
	// token.
	Audience string
	// MaxProviderTokenTTL is the longest a provider's token may still live
	// (exp − now, with the providers' leeway): one beyond it is refused, so
	// a token a provider (or whoever holds its key) issued for months is
	// not honoured for months. Default DefaultMaxProviderTokenTTL.
	MaxProviderTokenTTL time.Duration
	// RequireHTTPS refuses a JWKS URL that is not https, except on a
	// loopback host (production mode sets it: whoever sits on a plain-http
	// path could serve keys of their own).
	RequireHTTPS bool
	// JWKSRefresh is the refresh period of a key set whose answer has no
	// usable cache headers, and the longest time any set is used without
	// fetching it again. Default 15m.
	JWKSRefresh time.Duration
	// JWKSMinRefresh is the shortest interval between two fetches of a set,
	// also those forced by an unknown key id. Default 5s.
	JWKSMinRefresh time.Duration
	// JWKSWait bounds the first fetch in New. Default 10s.
	JWKSWait time.Duration
	// HTTPClient fetches the key sets. Default: a client with a 10s timeout.
	HTTPClient *http.Client

	// Subjects maps a provider's (issuer, subject) to an internal user id;
	// required with Providers (persistence.Store implements it).
	Subjects SubjectMapper
	// SubjectCache is the number of (issuer, subject) → user id mappings
	// kept in memory. Default 131,072 (about 200 bytes each).
	SubjectCache int
	// SubjectTimeout bounds one Subjects call. Default 3s.
	SubjectTimeout time.Duration

	// AdminGroup, if set, makes a caller an admin when the GroupsClaim claim
	// of its token lists this group, and nothing else does (role "admin"
	// then counts for nothing).
	AdminGroup string
	// GroupsClaim is the claim that lists the caller's groups. Default
	// "groups".
	GroupsClaim string

	// Cache sizes the cache of verified tokens (cache.go).
	Cache CacheOptions

	Logger *slog.Logger
}

// New returns a Verifier configured by o. It fetches every provider's key
// set before returning (an unreachable provider is an error, so a bad URL
// stops the start) and refreshes them in the background until ctx is done
// or Close is called.
func New(ctx context.Context, o Options) (*Verifier, error) {
	if len(o.Secret) == 0 && len(o.Providers) == 0 {
		return nil, errors.New("auth: neither an HS256 secret nor an identity provider")
	}
	if len(o.Providers) > 0 && o.Subjects == nil {
		return nil, errors.New("auth: identity providers need a subject mapper")
	}
	o.GroupsClaim = cmp.Or(o.GroupsClaim, "groups")
	o.HS256Issuer = cmp.Or(o.HS256Issuer, DefaultHS256Issuer)
	o.HS256Audience = cmp.Or(o.HS256Audience, DefaultHS256Audience)
	v := &Verifier{peek: jwt.NewParser(), cache: newTokenCache(o.Cache), adminGroup: o.AdminGroup, groups: o.GroupsClaim,
		providers: map[string]*provider{}, providerTTL: cmp.Or(o.MaxProviderTokenTTL, DefaultMaxProviderTokenTTL)}
	if len(o.Secret) > 0 {
		v.hs = v.newHS256(o.Secret, o.HS256Issuer, o.HS256Audience)
	}
	for _, p := range o.Providers {
		switch {
		case p.Issuer == "" || len(p.Issuer) > MaxSubjectBytes || !ValidSubject(p.Issuer):
			return nil, v.closeWith(fmt.Errorf("auth: issuer %q must be 1 to %d bytes of printable UTF-8", p.Issuer, MaxSubjectBytes))
		case v.providers[p.Issuer] != nil:
			return nil, v.closeWith(fmt.Errorf("auth: issuer %q is configured twice", p.Issuer))
		case len(o.Secret) > 0 && p.Issuer == o.HS256Issuer:
			return nil, v.closeWith(fmt.Errorf("auth: issuer %q is also the HS256 issuer", p.Issuer))
		}
		if err := CheckJWKSURL(p.JWKSURL, o.RequireHTTPS); err != nil {
			return nil, v.closeWith(err)
		}
		keys, err := newJWKS(ctx, p.JWKSURL, o)
		if err != nil {
			return nil, v.closeWith(err)
		}
		opts := []jwt.ParserOption{
			jwt.WithValidMethods([]string{jwt.SigningMethodRS256.Alg(), jwt.SigningMethodES256.Alg()}),
			jwt.WithExpirationRequired(),
			jwt.WithIssuer(p.Issuer),
			jwt.WithLeeway(idpLeeway),
			jwt.WithTimeFunc(v.now),
		}
		if o.Audience != "" {
			opts = append(opts, jwt.WithAudience(o.Audience))
		}
		v.providers[p.Issuer] = &provider{keys: keys, parser: jwt.NewParser(opts...)}
	}
	if len(o.Providers) > 0 {
		v.subjects = newSubjectCache(o.Subjects, o.SubjectCache, o.SubjectTimeout)
	}
	return v, nil
}

// provider is the check of one identity provider's tokens.
type provider struct {
	keys   *jwks
	parser *jwt.Parser // RS256 and ES256, its issuer, the audience
}

// closeWith closes what New opened so far and returns err.
func (v *Verifier) closeWith(err error) error {
	_ = v.Close() // the error being returned matters, not the cleanup's
	return err
}

// Close stops the background refresh of the key sets, if any.
func (v *Verifier) Close() error {
	var errs []error
	for _, p := range v.providers {
		errs = append(errs, p.keys.close())
	}
	return errors.Join(errs...)
}

// CheckJWKSURL returns an error unless raw is an http(s) URL with a host,
// and, with requireHTTPS, https or a loopback host (localhost, 127.0.0.0/8,
// ::1). The error shows the URL redacted (RedactURL).
func CheckJWKSURL(raw string, requireHTTPS bool) error {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return fmt.Errorf("auth: JWKS URL %s is not an http(s) URL", RedactURL(raw))
	}
	if requireHTTPS && u.Scheme == "http" && !loopbackHost(u.Hostname()) {
		return fmt.Errorf("auth: JWKS URL %s is plain http: production mode needs https (http only on a loopback host)", RedactURL(raw))
	}
	return nil
}

func loopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// RedactURL is raw for logs and help texts: credentials and query (which may
// carry an API key) replaced by "xxxxx", no fragment.
func RedactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	if u.User != nil {
		u.User = url.User("xxxxx")
	}
	if u.RawQuery != "" || u.ForceQuery {
		u.RawQuery, u.ForceQuery = "xxxxx", false
	}
	u.Fragment, u.RawFragment = "", ""
	return u.String()
}

// jwks is the cached key set of one URL (lestrrat-go/jwx's jwk.Cache) and an
// index of it by key id with each key's RFC 7638 thumbprint.
type jwks struct {
	url        string // as configured: never logged
	shown      string // RedactURL(url)
	cache      *jwk.Cache
	res        *httprc.ResourceBase[jwk.Set]
	cancel     context.CancelFunc
	minRefresh time.Duration
	log        *slog.Logger

	mu       sync.Mutex // serialises forced refreshes
	lastPull time.Time

	idxMu sync.Mutex // serialises index rebuilds
	idx   atomic.Pointer[keyIndex]
}

// keyIndex is one fetched set by key id ("" = the only key of a one-key
// set).
type keyIndex struct {
	set  jwk.Set
	keys map[string]indexedKey
}

type indexedKey struct {
	key   jwk.Key
	thumb string // RFC 7638 SHA-256 thumbprint: the same key in a refetched set has the same one
}

func newJWKS(ctx context.Context, rawURL string, o Options) (*jwks, error) {
	refresh := cmp.Or(o.JWKSRefresh, 15*time.Minute)
	minRefresh := cmp.Or(o.JWKSMinRefresh, 5*time.Second)
	wait := cmp.Or(o.JWKSWait, 10*time.Second)
	hc := checkedRedirects(o.HTTPClient, o.RequireHTTPS)
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cctx, cancel := context.WithCancel(ctx)
	cache, err := jwk.NewCache(cctx, httprc.NewClient())
	if err != nil {
		cancel()
		return nil, fmt.Errorf("auth: JWKS cache: %w", err)
	}
	k := &jwks{url: rawURL, shown: RedactURL(rawURL), cache: cache, cancel: cancel, minRefresh: minRefresh, log: log}
	wctx, wcancel := context.WithTimeout(ctx, wait)
	defer wcancel()
	err = cache.Register(wctx, rawURL,
		jwk.WithHTTPClient(defaultFreshness{hc, refresh}),
		jwk.WithMinInterval(minRefresh),
		jwk.WithMaxInterval(refresh),
	)
	if err == nil {
		_, err = cache.Lookup(wctx, rawURL)
	}
	if err == nil {
		k.res, err = cache.LookupResource(wctx, rawURL)
	}
	if err != nil {
		_ = k.close() // the fetch error is the one to report
		return nil, fmt.Errorf("auth: fetch JWKS %s: %s", k.shown, redactErr(err))
	}
	k.lastPull = time.Now()
	return k, nil
}

// checkedRedirects is a copy of hc (nil: a client with a 10s timeout)
// that follows a redirect only to a URL CheckJWKSURL accepts: with
// requireHTTPS, every hop is https or on a loopback host, as the
// configured URL is. At most 10 hops.
func checkedRedirects(hc *http.Client, requireHTTPS bool) *http.Client {
	c := http.Client{Timeout: 10 * time.Second}
	if hc != nil {
		c = *hc
	}
	next := c.CheckRedirect
	c.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		if err := CheckJWKSURL(req.URL.String(), requireHTTPS); err != nil {
			return fmt.Errorf("redirect refused: %w", err)
		}
		if next != nil {
			return next(req, via)
		}
		if len(via) >= 10 {
			return errors.New("stopped after 10 redirects")
		}
		return nil
	}
	return &c
}

// urlInText matches the URLs an error message may quote.
var urlInText = regexp.MustCompile(`https?://[^\s"]+`)

// redactErr is err's message with every URL in it redacted (RedactURL):
// net/http and httprc quote the URL they failed to fetch.
func redactErr(err error) string {
	return urlInText.ReplaceAllStringFunc(err.Error(), RedactURL)
}

// defaultFreshness fetches key sets with hc and gives an answer without
// usable freshness headers (no Cache-Control max-age above 0, no Expires in
// the future) a Cache-Control max-age of def: jwk.Cache refetches such an
// answer after its minimum interval (every few seconds) otherwise.
type defaultFreshness struct {
	hc  *http.Client
	def time.Duration
}

func (d defaultFreshness) Do(req *http.Request) (*http.Response, error) {
	res, err := d.hc.Do(req)
	if err == nil && !hasFreshness(res.Header) {
		res.Header.Set("Cache-Control", "max-age="+strconv.FormatInt(int64(d.def/time.Second), 10))
	}
	return res, err
}

func hasFreshness(h http.Header) bool {
	if v := h.Get("Cache-Control"); v != "" {
		if dir, err := httpcc.ParseResponse(v); err == nil {
			if n, ok := dir.MaxAge(); ok && n > 0 {
				return true
			}
		}
	}
	if v := h.Get("Expires"); v != "" {
		if t, err := http.ParseTime(v); err == nil && time.Until(t) > 0 {
			return true
		}
	}
	return false
}

func (k *jwks) close() error {
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := k.cache.Shutdown(sctx)
	k.cancel()
	return err
}

// current returns the index of the set as last fetched, rebuilding it when
// the cache holds a newer set (an atomic load and a comparison otherwise).
func (k *jwks) current() *keyIndex {
	set := k.res.Resource()
	if idx := k.idx.Load(); idx != nil && idx.set == set {
		return idx
	}
	k.idxMu.Lock()
	defer k.idxMu.Unlock()
	if idx := k.idx.Load(); idx != nil && idx.set == set {
		return idx
	}
	idx := &keyIndex{set: set, keys: map[string]indexedKey{}}
	if set != nil {
		for i := range set.Len() {
			key, _ := set.Key(i)
			tp, err := key.Thumbprint(crypto.SHA256)
			if err != nil {
				continue // not a key a token can use
			}
			e := indexedKey{key: key, thumb: string(tp)}
			if kid, ok := key.KeyID(); ok && kid != "" {
				idx.keys[kid] = e
			}
			if set.Len() == 1 {
				idx.keys[""] = e
			}
		}
	}
	k.idx.Store(idx)
	return idx
}

// keyRef names the key a token was verified with: its set, kid and
// thumbprint.
type keyRef struct {
	keys  *jwks
	kid   string
	thumb string
}

// current reports whether the key is still the entry of its kid in the set
// as last fetched (no fetch): true across refetches that keep the key,
// false once it left the set.
func (r *keyRef) current() bool {
	e, ok := r.keys.current().keys[r.kid]
	return ok && e.thumb == r.thumb
}

// keyOf is the key lookup of RS256/ES256 tokens: the public key of the
// token's kid, of the type its alg needs (never a symmetric key), and a
// reference to the set's entry.
func (k *jwks) keyOf(t *jwt.Token) (*keyRef, any, error) {
	alg := t.Method.Alg()
	kid, _ := t.Header["kid"].(string)
	e, err := k.lookup(kid)
	if err != nil {
		return nil, nil, err
	}
	pub, err := publicKeyFor(e.key, kid, alg)
	return &keyRef{keys: k, kid: kid, thumb: e.thumb}, pub, err
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

// lookup returns the entry of kid (or the only key of a one-key set when the
// token names none). A kid the cached set lacks fetches the set again, at
// most once per minRefresh: the provider may have rotated its keys.
func (k *jwks) lookup(kid string) (indexedKey, error) {
	if e, ok := k.current().keys[kid]; ok {
		return e, nil
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if e, ok := k.current().keys[kid]; ok { // another caller just refreshed
		return e, nil
	}
	if time.Since(k.lastPull) < k.minRefresh {
		return indexedKey{}, fmt.Errorf("no key %q in the JWKS", kid)
	}
	k.lastPull = time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := k.cache.Refresh(ctx, k.url); err != nil {
		k.log.Warn("JWKS refresh failed", "url", k.shown, "err", redactErr(err))
		return indexedKey{}, fmt.Errorf("no key %q in the JWKS (refresh failed)", kid)
	}
	if e, ok := k.current().keys[kid]; ok {
		return e, nil
	}
	return indexedKey{}, fmt.Errorf("no key %q in the JWKS", kid)
}
