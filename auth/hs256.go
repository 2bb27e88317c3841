package auth

import (
	"cmp"
	"fmt"
	"strconv"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Defaults of the HS256 issuer and audience (Options.HS256Issuer,
// HS256Audience; Signer).
const (
	DefaultHS256Issuer   = "stampede"
	DefaultHS256Audience = "stampede"
)

// Signer makes HS256 tokens that a Verifier with the same secret, HS256
// issuer and audience and admin group accepts. The zero value of each field
// but Secret means its default.
type Signer struct {
	Secret   []byte
	Issuer   string // iss; default DefaultHS256Issuer
	Audience string // aud; default DefaultHS256Audience
	// AdminGroup, if set, is listed in the GroupsClaim claim of admin tokens
	// (a Verifier with an admin group accepts nothing else as an admin).
	AdminGroup  string
	GroupsClaim string // default "groups"
}

// Issue signs a token for userID (1 … MaxDirectUserID) valid for ttl, at
// most MaxTokenTTL (admin: MaxAdminTokenTTL); a ttl ≤ 0 makes a token that
// is already expired. Admin tokens carry role "admin" and, with an admin
// group, the group.
func (s Signer) Issue(userID int64, admin bool, ttl time.Duration) (string, error) {
	if userID <= 0 || userID > MaxDirectUserID {
		return "", fmt.Errorf("auth: userId must be from 1 to %d", MaxDirectUserID)
	}
	bound := MaxTokenTTL
	if admin {
		bound = MaxAdminTokenTTL
	}
	if ttl > bound {
		return "", fmt.Errorf("auth: token lifetime %s exceeds %s", ttl, bound)
	}
	now := time.Now()
	c := jwt.MapClaims{
		"sub": strconv.FormatInt(userID, 10),
		"iss": cmp.Or(s.Issuer, DefaultHS256Issuer),
		"aud": cmp.Or(s.Audience, DefaultHS256Audience),
		"iat": now.Unix(),
		"exp": now.Add(ttl).Unix(),
	}
	if admin {
		c["role"] = RoleAdmin
		if s.AdminGroup != "" {
			c[cmp.Or(s.GroupsClaim, "groups")] = []string{s.AdminGroup}
		}
	}
	return jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString(s.Secret)
}

// Issue is Signer{Secret: secret}.Issue: a token of the default HS256
// issuer and audience.
func Issue(secret []byte, userID int64, admin bool, ttl time.Duration) (string, error) {
	return Signer{Secret: secret}.Issue(userID, admin, ttl)
}
