package auth

import (
	"crypto/sha256"
	"strings"
	"time"
	"unsafe"

	"github.com/hashicorp/golang-lru/v2/expirable"
)

// Verified tokens are cached (issue 19): in a retry storm one buyer sends the
// same token many times a second, and parsing and checking it (base64, JSON,
// HMAC or RSA/ECDSA) was the largest CPU cost of an answer from memory. The
// cache maps SHA-256(token) to the claims (user id already mapped) and a
// deadline: the token's exp (never later, whatever the leeway of the full
// check), or MaxAge after the check if that is sooner. A hit before the
// deadline is the answer; at or after it the entry is dropped and the token
// is checked in full again, so an expired token is refused even if it was
// cached. Keying by a hash keeps the lookup free of allocations and the
// cache free of bearer tokens; only tokens that verified are cached (a flood
// of bad tokens cannot evict good ones faster than it could be verified).
// Tokens of our own HS256 signers bypass the cache since their check got
// cheaper than a miss (Verifier.cacheable): the cache is for provider
// tokens (RSA/ECDSA, a subject mapped through the store) and HS256 tokens
// with other headers.
//
// A JWKS-verified entry also names the key it was checked with (set, kid,
// RFC 7638 thumbprint), and a hit needs that key still in its provider's set
// as last fetched: a withdrawn key is refused as soon as the verifier knows
// of it, while a refetch that keeps the key (the periodic refresh, a rotation
// that adds a key) keeps its tokens cached.
//
// The LRU is hashicorp/golang-lru's expirable.LRU without its cache-wide
// TTL: the deadline is per token, and the TTL mode starts a goroutine per
// cache that never stops (v2.0.7). Expired entries are removed when met and
// otherwise age out of the LRU order; Size bounds the memory (about 200 bytes
// an entry).

// CacheOptions size the cache of verified tokens.
type CacheOptions struct {
	// Size is the number of tokens kept. 0: 65,536. Negative: no cache.
	Size int
	// MaxAge is the longest a verified token is answered from the cache
	// (its exp permitting). 0: 1 minute.
	MaxAge time.Duration
}

type cachedClaims struct {
	c     Claims
	until int64 // unix ns: the entry is valid strictly before
}

type tokenCache struct {
	lru    *expirable.LRU[[sha256.Size]byte, cachedClaims]
	maxAge time.Duration
}

func newTokenCache(o CacheOptions) *tokenCache {
	if o.Size < 0 {
		return nil
	}
	if o.Size == 0 {
		o.Size = 1 << 16
	}
	if o.MaxAge <= 0 {
		o.MaxAge = time.Minute
	}
	return &tokenCache{lru: expirable.NewLRU[[sha256.Size]byte, cachedClaims](o.Size, nil, 0), maxAge: o.MaxAge}
}

func (tc *tokenCache) get(key [sha256.Size]byte, now time.Time) (Claims, bool) {
	e, ok := tc.lru.Get(key)
	if !ok {
		return Claims{}, false
	}
	if now.UnixNano() >= e.until || (e.c.key != nil && !e.c.key.current()) {
		tc.lru.Remove(key)
		return Claims{}, false
	}
	return e.c, true
}

func (tc *tokenCache) add(key [sha256.Size]byte, c Claims, now time.Time) {
	until := min(c.Expires.UnixNano(), now.Add(tc.maxAge).UnixNano())
	if now.UnixNano() >= until {
		return
	}
	tc.lru.Add(key, cachedClaims{c: c, until: until})
}

// VerifyBytes is Verify of a token held in a byte slice (an HTTP header),
// without copying it to a string when the token is cached.
func (v *Verifier) VerifyBytes(token []byte) (Claims, error) {
	if !v.cacheable(unsafe.String(unsafe.SliceData(token), len(token))) {
		return v.check(string(token))
	}
	key := sha256.Sum256(token)
	now := v.now()
	if c, ok := v.cache.get(key, now); ok {
		return c, nil
	}
	c, err := v.check(string(token))
	if err == nil {
		v.cache.add(key, c, now)
	}
	return c, err
}

// Verify returns the claims of a valid token; ErrUnauthenticated for a
// token that is missing, malformed, expired, wrongly signed or outside the
// rules of its kind; ErrIdentityUnavailable when a provider's subject could
// not be mapped (the mapping store failed). A token verified before is
// answered from the cache until its exp (CacheOptions).
func (v *Verifier) Verify(token string) (Claims, error) {
	if !v.cacheable(token) {
		return v.check(token)
	}
	return v.VerifyBytes(unsafe.Slice(unsafe.StringData(token), len(token))) // read only
}

// cacheable reports whether token goes through the cache: not without one,
// and not a token with the header of our own HS256 signers, whose check
// (hs256_verify.go, about 1.7 µs) costs less than the cache's miss and
// insertion (BenchmarkVerifyNewTokens: 1.8 µs uncached, 3.8 µs cached,
// every token new as at a sale's opening, where most tokens are seen once).
func (v *Verifier) cacheable(token string) bool {
	return v.cache != nil && (v.hs == nil || !strings.HasPrefix(token, hs256Header))
}

// now is the verifier's clock (tests replace it).
func (v *Verifier) now() time.Time {
	if v.clock != nil {
		return v.clock()
	}
	return time.Now()
}

// NewVerifierCache is NewVerifier with the cache sized by o.
func NewVerifierCache(secret []byte, o CacheOptions) *Verifier {
	v := NewVerifier(secret)
	v.cache = newTokenCache(o)
	return v
}
