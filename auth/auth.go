// Package auth issues and verifies Stampede's bearer tokens (docs/spec.md §3) and
// turns a verified token into the caller: Stampede's internal int64 user id
// and whether the caller is an admin. Two kinds of tokens:
//
//   - HS256 tokens signed with the shared secret (Signer makes them: the demo
//     login, `stampede token`, the load generator). They are held to their
//     own issuer and audience (Options.HS256Issuer and HS256Audience, both
//     "stampede" by default) and to a lifetime bound (MaxTokenTTL, shorter
//     for admins: MaxAdminTokenTTL). Their sub is the user id itself, in
//     canonical decimal ("42", never "+42" or "042"), 1 … MaxDirectUserID.
//   - RS256 and ES256 tokens of identity providers (Options.Providers). A
//     provider is an issuer and the JWKS URL where it publishes its public
//     keys (jwks.go). The token's iss picks the provider, only that
//     provider's keys verify it, and Options.Audience must be among its aud.
//     Its sub is whatever the provider issues (a UUID, an opaque string: 1 to
//     255 bytes of printable UTF-8); the pair (iss, sub) is mapped once to an
//     internal user id, FirstMappedUserID and up (subjects.go; the table is
//     persistence's user_identity), so the two id spaces never meet.
//
// An admin is a caller whose token lists Options.AdminGroup in its groups
// claim when an admin group is configured, and otherwise one whose role claim
// is "admin". Each signing method only ever gets its own kind of key: an
// HS256 token is checked with the secret alone (never with a public key), an
// RS256 token only with an RSA key of its provider's set, an ES256 token only
// with a P-256 key; "none" and every other alg fail, and so does a token
// with a crit header (RFC 7515 §4.1.11: no extension is understood here).
// The gateway and push share one Verifier per process.
package auth

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/golang-jwt/jwt/v5"

	"github.com/stampede-sh/stampede/order"
)

// RoleAdmin is the role claim of administrators (when no admin group is
// configured).
const RoleAdmin = "admin"

// The two user id spaces (order.FirstMappedUserID says more): HS256 tokens
// carry the id itself, 1 … MaxDirectUserID; identity-provider subjects are
// mapped to FirstMappedUserID and up.
const (
	FirstMappedUserID = order.FirstMappedUserID
	MaxDirectUserID   = order.MaxDirectUserID
)

// Lifetime bounds of HS256 tokens (exp − now, checked by Signer and by the
// Verifier): a buyer's token at most MaxTokenTTL, an admin's at most
// MaxAdminTokenTTL.
const (
	MaxTokenTTL      = 24 * time.Hour
	MaxAdminTokenTTL = time.Hour
)

// DefaultMaxProviderTokenTTL bounds an identity provider's token (exp −
// now) unless Options.MaxProviderTokenTTL says otherwise: a day, the
// longest default access-token lifetime of the common providers (Auth0's;
// Keycloak's, Okta's, Cognito's and Entra ID's are minutes to an hour).
const DefaultMaxProviderTokenTTL = 24 * time.Hour

// MaxSubjectBytes bounds the sub of an identity provider's token.
const MaxSubjectBytes = 255

// Errors of Verify. A token that cannot be trusted is ErrUnauthenticated
// (401); a valid token whose subject could not be mapped to a user id
// because the mapping store failed is ErrIdentityUnavailable (503: the
// caller may retry).
var (
	ErrUnauthenticated     = errors.New("auth: unauthenticated")
	ErrIdentityUnavailable = errors.New("auth: identity mapping unavailable")
)

// Claims is what a verified token says about its caller.
type Claims struct {
	UserID  int64     // Stampede's internal user id
	Admin   bool      // admin group (or role admin without a group)
	Issuer  string    // iss: the HS256 issuer or the identity provider's
	Subject string    // sub as the token carries it
	Expires time.Time // exp: the token is refused from then on

	key *keyRef // JWKS-verified: the key it was checked with; nil for HS256
}

// Verifier checks tokens: HS256 ones with its secret, RS256 and ES256 ones
// with the keys of the provider their iss names. Safe for concurrent use.
type Verifier struct {
	hs          *hs256               // nil: HS256 tokens are refused
	providers   map[string]*provider // by issuer; empty without identity providers
	subjects    *subjectCache        // nil without identity providers
	adminGroup  string
	groups      string        // name of the groups claim
	providerTTL time.Duration // Options.MaxProviderTokenTTL
	peek        *jwt.Parser
	cache       *tokenCache      // nil: every token is checked in full
	clock       func() time.Time // nil: time.Now (tests set it)
	checks      atomic.Int64     // full checks made (tests)
}

// NewVerifier returns a Verifier of HS256 tokens signed with secret, issuer
// and audience DefaultHS256Issuer and DefaultHS256Audience, with the default
// cache of verified tokens (CacheOptions) and no identity provider.
func NewVerifier(secret []byte) *Verifier {
	v := &Verifier{peek: jwt.NewParser(), cache: newTokenCache(CacheOptions{}), groups: "groups"}
	v.hs = v.newHS256(secret, DefaultHS256Issuer, DefaultHS256Audience)
	return v
}

// Leeways of the exp checks: HS256 tokens come from the shop's own clock;
// providers' clocks may be further off.
const (
	hsLeeway  = 5 * time.Second
	idpLeeway = 30 * time.Second
)

func unauthenticated(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrUnauthenticated, fmt.Sprintf(format, args...))
}

// hs256Header is the first segment and its dot of the tokens golang-jwt
// signs with HS256 (Signer, the demo login): base64url of
// {"alg":"HS256","typ":"JWT"}, no crit.
const hs256Header = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9."

// check verifies token in full and maps its subject to a user id.
func (v *Verifier) check(token string) (Claims, error) {
	v.checks.Add(1)
	if v.hs != nil && strings.HasPrefix(token, hs256Header) {
		// The header every HS256 signer of ours writes: no need to parse it
		// apart to pick the HS256 path, nor the claims into a map.
		c, err := v.hs.verifyCanonical(token, v.groups, v.adminGroup)
		switch {
		case err == nil:
			return v.claims(c, nil)
		case !errors.Is(err, errUseParser):
			return Claims{}, unauthenticated("%v", err)
		}
	}
	// The unverified header only picks the path; each path accepts its own
	// algorithms and keys only, so a lying header gains nothing.
	t, _, err := v.peek.ParseUnverified(token, jwt.MapClaims{})
	if err != nil {
		return Claims{}, unauthenticated("%v", err)
	}
	if _, ok := t.Header["crit"]; ok {
		return Claims{}, unauthenticated("crit header: no extension is supported")
	}
	var c jwt.MapClaims
	var key *keyRef
	switch alg, _ := t.Header["alg"].(string); {
	case alg == jwt.SigningMethodHS256.Alg():
		if v.hs == nil {
			return Claims{}, unauthenticated("HS256 tokens are not accepted")
		}
		_, err = v.hs.parser.ParseWithClaims(token, &c, func(*jwt.Token) (any, error) { return v.hs.secret, nil })
	case alg == jwt.SigningMethodRS256.Alg() || alg == jwt.SigningMethodES256.Alg():
		iss, _ := t.Claims.(jwt.MapClaims)["iss"].(string)
		p := v.providers[iss]
		if p == nil {
			return Claims{}, unauthenticated("issuer %q is not a configured identity provider", iss)
		}
		_, err = p.parser.ParseWithClaims(token, &c, func(t *jwt.Token) (any, error) {
			ref, pub, err := p.keys.keyOf(t)
			key = ref
			return pub, err
		})
	default:
		return Claims{}, unauthenticated("alg %q is not accepted", alg)
	}
	if err != nil {
		return Claims{}, unauthenticated("%v", err)
	}
	if err := datesInRange(c); err != nil {
		return Claims{}, unauthenticated("%v", err)
	}
	return v.claims(v.fromMap(c), key)
}

// NumericDate bounds (seconds since the epoch): years 1 to 9999. A date
// beyond them cannot be a token's, and converting a larger float64 to the
// int64 golang-jwt keeps overflows (nbf 1e300 became a date long past, and
// passed).
const (
	minNumericDate = -62135596800 // 0001-01-01T00:00:00Z
	maxNumericDate = 253402300799 // 9999-12-31T23:59:59Z
)

// errDateRange: exp, nbf or iat outside years 1–9999.
var errDateRange = errors.New("token has a date (exp, nbf or iat) outside years 1-9999")

func dateInRange(f float64) bool { return f >= minNumericDate && f <= maxNumericDate }

// datesInRange checks exp, nbf and iat of claims golang-jwt's parser read
// (numbers, as float64 or json.Number): errDateRange for one out of range,
// an error for one that is not a number.
func datesInRange(c jwt.MapClaims) error {
	for _, name := range [...]string{"exp", "nbf", "iat"} {
		var f float64
		switch x := c[name].(type) {
		case nil:
			continue
		case float64:
			f = x
		case json.Number:
			var err error
			if f, err = x.Float64(); err != nil {
				return errDateRange
			}
		default: // not a number (the parser refused such an exp or nbf already; the HS256 fast path refuses such an iat)
			return fmt.Errorf("%s is not a NumericDate", name)
		}
		if !dateInRange(f) {
			return errDateRange
		}
	}
	return nil
}

// fromMap reads verified claims out of the map golang-jwt's parser filled.
func (v *Verifier) fromMap(c jwt.MapClaims) verified {
	out := verified{admin: v.isAdmin(c)}
	out.sub, _ = c.GetSubject()
	out.iss, _ = c.GetIssuer()
	if exp, err := c.GetExpirationTime(); err == nil && exp != nil { // the parsers require exp
		out.exp = exp.Time
	}
	return out
}

// claims turns verified JWT claims into Claims: the subject rules and
// lifetime bounds of the token's kind, the user id, the admin flag.
func (v *Verifier) claims(c verified, key *keyRef) (Claims, error) {
	if c.exp.IsZero() { // the parsers require exp: not reached
		return Claims{}, unauthenticated("no exp")
	}
	out := Claims{Admin: c.admin, Issuer: c.iss, Subject: c.sub, Expires: c.exp, key: key}
	if key == nil { // HS256: the subject is the user id
		uid, ok := ParseDecimalID(c.sub)
		if !ok || uid > MaxDirectUserID {
			return Claims{}, unauthenticated("HS256 subject must be a user id from 1 to %d in canonical decimal", MaxDirectUserID)
		}
		bound := MaxTokenTTL
		if out.Admin {
			bound = MaxAdminTokenTTL
		}
		if c.exp.Sub(v.now()) > bound+hsLeeway {
			return Claims{}, unauthenticated("HS256 token lives beyond %s", bound)
		}
		out.UserID = uid
		return out, nil
	}
	if !ValidSubject(c.sub) {
		return Claims{}, unauthenticated("subject must be 1 to %d bytes of printable UTF-8", MaxSubjectBytes)
	}
	if c.exp.Sub(v.now()) > v.providerTTL+idpLeeway {
		return Claims{}, unauthenticated("the provider's token lives beyond %s (STAMPEDE_JWT_PROVIDER_MAX_TTL)", v.providerTTL)
	}
	uid, err := v.subjects.userID(c.iss, c.sub)
	if err != nil {
		return Claims{}, fmt.Errorf("%w: %v", ErrIdentityUnavailable, err)
	}
	out.UserID = uid
	return out, nil
}

// ValidSubject reports whether sub is an identity provider's subject
// Stampede accepts: 1 to MaxSubjectBytes bytes of valid UTF-8, every
// character printable (letters, marks, numbers, punctuation, symbols and
// the ASCII space; no control or format characters).
func ValidSubject(sub string) bool {
	if sub == "" || len(sub) > MaxSubjectBytes || !utf8.ValidString(sub) {
		return false
	}
	for _, r := range sub {
		if !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}

// ParseDecimalID parses a positive int64 written in canonical decimal: digits
// only, no sign, no leading zero, no spaces ("1001", never "+1001",
// "0001001" or "1001 "). Every text that names a number names it one way.
func ParseDecimalID(s string) (int64, bool) {
	if s == "" || s[0] < '1' || s[0] > '9' {
		return 0, false
	}
	for i := 1; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil
}

// isAdmin: with an admin group configured, only that group among the groups
// claim (a list of strings or one string) makes an admin; without one, role
// "admin" does.
func (v *Verifier) isAdmin(c jwt.MapClaims) bool {
	if v.adminGroup == "" {
		r, _ := c["role"].(string)
		return r == RoleAdmin
	}
	switch g := c[v.groups].(type) {
	case string:
		return g == v.adminGroup
	case []any:
		for _, x := range g {
			if s, _ := x.(string); s == v.adminGroup {
				return true
			}
		}
	}
	return false
}

// KeyCurrent reports whether the key that verified c is still in its
// provider's key set as last fetched (no fetch is made): false once the
// provider withdrew it. Always true for HS256 claims. Push closes a socket
// whose claims stop being current.
func (v *Verifier) KeyCurrent(c Claims) bool { return c.key == nil || c.key.current() }
