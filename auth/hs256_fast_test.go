package auth_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/stampede-sh/stampede/auth"
)

// The HS256 tokens with the header our signers write take one parse
// (auth.go, hs256Header) and keep every check of the full path; a token with
// any other header takes the full path.
func TestHS256CanonicalHeaderKeepsEveryCheck(t *testing.T) {
	secret := []byte("0123456789abcdef0123456789abcdef")
	v := auth.NewVerifierCache(secret, auth.CacheOptions{Size: -1})
	const canonical = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9."
	sign := func(c jwt.MapClaims, header map[string]any) string {
		tk := jwt.NewWithClaims(jwt.SigningMethodHS256, c)
		for k, val := range header {
			tk.Header[k] = val
		}
		s, err := tk.SignedString(secret)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	now := time.Now()
	good := jwt.MapClaims{"sub": "42", "iss": "stampede", "aud": "stampede", "iat": now.Unix(), "exp": now.Add(time.Hour).Unix()}
	tok := sign(good, nil)
	if !strings.HasPrefix(tok, canonical) {
		t.Fatalf("golang-jwt's HS256 header changed: %s", tok)
	}
	if c, err := v.Verify(tok); err != nil || c.UserID != 42 || c.Admin {
		t.Fatalf("claims %+v, err %v", c, err)
	}
	with := func(k string, val any) jwt.MapClaims {
		c := jwt.MapClaims{}
		for kk, vv := range good {
			c[kk] = vv
		}
		if val == nil {
			delete(c, k)
		} else {
			c[k] = val
		}
		return c
	}
	parts := strings.Split(tok, ".")
	for name, bad := range map[string]string{
		"tampered claims":   parts[0] + "." + jwtSegment(`{"sub":"43","iss":"stampede","aud":"stampede","exp":9999999999}`) + "." + parts[2],
		"no signature":      parts[0] + "." + parts[1] + ".",
		"expired":           sign(with("exp", now.Add(-time.Minute).Unix()), nil),
		"no exp":            sign(with("exp", nil), nil),
		"other issuer":      sign(with("iss", "evil"), nil),
		"other audience":    sign(with("aud", "evil"), nil),
		"subject not an id": sign(with("sub", "042"), nil),
		"lives too long":    sign(with("exp", now.Add(48*time.Hour).Unix()), nil),
		"crit header":       sign(good, map[string]any{"crit": []string{"x"}}),
	} {
		if _, err := v.Verify(bad); !errors.Is(err, auth.ErrUnauthenticated) {
			t.Errorf("%s: accepted (err %v)", name, err)
		}
	}
}

func jwtSegment(s string) string { return (&jwt.Token{}).EncodeSegment([]byte(s)) }
