// Package auth issues and verifies Stampede's bearer tokens: HS256 JWTs whose
// sub is the decimal userId and whose role claim is "admin" for admins
// (SPEC §3). The gateway, push and the load generator share it. It does no I/O.
package auth

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/golang-jwt/jwt/v5"
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
		Issuer:    "stampede",
	}}
	if admin {
		c.Role = RoleAdmin
	}
	return jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString(secret)
}

// Verifier checks tokens signed with one secret. Safe for concurrent use.
type Verifier struct {
	secret []byte
	parser *jwt.Parser
}

// NewVerifier returns a Verifier for secret.
func NewVerifier(secret []byte) *Verifier {
	return &Verifier{secret: secret, parser: jwt.NewParser(
		jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}),
		jwt.WithExpirationRequired(),
		jwt.WithLeeway(5*time.Second),
	)}
}

// Verify returns the claims of a valid token, or ErrUnauthenticated.
func (v *Verifier) Verify(token string) (Claims, error) {
	var c jwtClaims
	_, err := v.parser.ParseWithClaims(token, &c, func(*jwt.Token) (any, error) { return v.secret, nil })
	if err != nil {
		return Claims{}, fmt.Errorf("%w: %v", ErrUnauthenticated, err)
	}
	uid, err := strconv.ParseInt(c.Subject, 10, 64)
	if err != nil || uid <= 0 {
		return Claims{}, fmt.Errorf("%w: bad subject", ErrUnauthenticated)
	}
	return Claims{UserID: uid, Admin: c.Role == RoleAdmin}, nil
}
