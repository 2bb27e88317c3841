// Package auth issues and verifies Stampede's bearer tokens (SPEC §3): the
// sub claim is the decimal userId, and a caller is an admin when its role
// claim is "admin" or, if Options.AdminGroup is set, when its groups claim
// lists that group. Two kinds of tokens are accepted side by side:
//
//   - HS256 tokens signed with the shared secret (Issue makes them: the demo
//     login, `stampede token`, the load generator);
//   - RS256 and ES256 tokens of an identity provider, verified against the
//     keys it publishes at a JWKS URL (Options.JWKSURL; jwks.go), with the
//     configured issuer and audience.
//
// Each signing method only ever gets its own kind of key: an HS256 token is
// checked with the secret alone (never with a public key), an RS256 token only
// with an RSA key of the JWKS, an ES256 token only with a P-256 key; "none"
// and every other alg fail. The gateway, push and the load generator share
// the package. Only a Verifier with a JWKS URL does I/O.
package auth

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/lestrrat-go/jwx/v3/jwk"
)

// RoleAdmin is the role claim of administrators.
const RoleAdmin = "admin"

// ErrUnauthenticated is returned for a missing, malformed, expired or
// wrongly signed token.
var ErrUnauthenticated = errors.New("auth: unauthenticated")

// Claims is what a verified token says.
type Claims struct {
	UserID int64
	Admin  bool
}

type jwtClaims struct {
	Role string `json:"role,omitempty"`
	jwt.RegisteredClaims
}

// Issuer is the iss claim of the tokens Issue makes.
const Issuer = "stampede"

// Issue signs a token for userID (> 0) valid for ttl.
func Issue(secret []byte, userID int64, admin bool, ttl time.Duration) (string, error) {
	if userID <= 0 {
		return "", fmt.Errorf("auth: userId must be positive")
	}
	now := time.Now()
	c := jwtClaims{RegisteredClaims: jwt.RegisteredClaims{
		Subject:   strconv.FormatInt(userID, 10),
		IssuedAt:  jwt.NewNumericDate(now),
		ExpiresAt: jwt.NewNumericDate(now.Add(ttl)),
		Issuer:    Issuer,
	}}
	if admin {
		c.Role = RoleAdmin
	}
	return jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString(secret)
}

// Verifier checks tokens: HS256 ones with its secret, RS256 and ES256 ones
// against its JWKS (if it has one). Safe for concurrent use.
type Verifier struct {
	secret     []byte
	hs         *jwt.Parser // HS256 only
	idp        *jwt.Parser // RS256 and ES256 only, with issuer and audience; nil without a JWKS
	keys       *jwks       // nil without a JWKS
	adminGroup string
	groups     string           // name of the groups claim
	cache      *tokenCache      // nil: every token is checked in full
	clock      func() time.Time // nil: time.Now (tests set it)
}

// NewVerifier returns a Verifier of HS256 tokens signed with secret, with
// the default cache of verified tokens (CacheOptions).
func NewVerifier(secret []byte) *Verifier {
	v := &Verifier{secret: secret, cache: newTokenCache(CacheOptions{})}
	v.hs = jwt.NewParser(
		jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}),
		jwt.WithExpirationRequired(),
		jwt.WithLeeway(5*time.Second),
		jwt.WithTimeFunc(v.now),
	)
	return v
}

// proof is what a full check learnt besides the claims: the token's exp
// and, for a JWKS-verified token, the key of the set it was checked with.
type proof struct {
	exp time.Time
	kid string
	key jwk.Key // nil for HS256
}

// check verifies token in full.
func (v *Verifier) check(token string) (Claims, proof, error) {
	// The unverified header only picks the path; each path accepts its own
	// algorithms and keys only, so a lying header gains nothing.
	alg, err := headerAlg(token)
	if err != nil {
		return Claims{}, proof{}, fmt.Errorf("%w: %v", ErrUnauthenticated, err)
	}
	var c jwt.MapClaims
	var pr proof
	switch {
	case alg == jwt.SigningMethodHS256.Alg():
		if len(v.secret) == 0 {
			return Claims{}, proof{}, fmt.Errorf("%w: HS256 tokens are not accepted", ErrUnauthenticated)
		}
		_, err = v.hs.ParseWithClaims(token, &c, func(*jwt.Token) (any, error) { return v.secret, nil })
	case v.idp != nil && (alg == jwt.SigningMethodRS256.Alg() || alg == jwt.SigningMethodES256.Alg()):
		_, err = v.idp.ParseWithClaims(token, &c, func(t *jwt.Token) (any, error) {
			key, pub, err := v.keys.keyOf(t)
			pr.kid, _ = t.Header["kid"].(string)
			pr.key = key
			return pub, err
		})
	default:
		return Claims{}, proof{}, fmt.Errorf("%w: alg %q is not accepted", ErrUnauthenticated, alg)
	}
	if err != nil {
		return Claims{}, proof{}, fmt.Errorf("%w: %v", ErrUnauthenticated, err)
	}
	sub, _ := c.GetSubject()
	uid, err := strconv.ParseInt(sub, 10, 64)
	if err != nil || uid <= 0 {
		return Claims{}, proof{}, fmt.Errorf("%w: bad subject", ErrUnauthenticated)
	}
	exp, err := c.GetExpirationTime()
	if err != nil || exp == nil { // the parsers require exp: not reached
		return Claims{}, proof{}, fmt.Errorf("%w: no exp", ErrUnauthenticated)
	}
	pr.exp = exp.Time
	return Claims{UserID: uid, Admin: v.isAdmin(c)}, pr, nil
}

// headerAlg reads the alg of a token's header alone (the claims are parsed
// once, by the path it picks): the first of a buyer's requests, whose token
// no cache holds yet, pays one parse instead of two.
func headerAlg(token string) (string, error) {
	head, _, ok := strings.Cut(token, ".")
	if !ok || len(head) > 1024 {
		return "", errors.New("token is malformed")
	}
	raw, err := base64.RawURLEncoding.DecodeString(head)
	if err != nil {
		return "", fmt.Errorf("token header: %w", err)
	}
	var h struct {
		Alg string `json:"alg"`
	}
	if err := json.Unmarshal(raw, &h); err != nil {
		return "", fmt.Errorf("token header: %w", err)
	}
	return h.Alg, nil
}

// isAdmin: role "admin", or the admin group among the groups claim (a list
// of strings or one string).
func (v *Verifier) isAdmin(c jwt.MapClaims) bool {
	if r, _ := c["role"].(string); r == RoleAdmin {
		return true
	}
	if v.adminGroup == "" {
		return false
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
