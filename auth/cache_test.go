package auth_test

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/stampede-sh/stampede/auth"
)

// clock is a settable time for auth.SetClock.
type clock struct{ ns atomic.Int64 }

func newClock() *clock               { c := &clock{}; c.ns.Store(time.Now().UnixNano()); return c }
func (c *clock) now() time.Time      { return time.Unix(0, c.ns.Load()) }
func (c *clock) set(t time.Time)     { c.ns.Store(t.UnixNano()) }
func (c *clock) add(d time.Duration) { c.ns.Add(int64(d)) }

// TestCachedTokenExpires: a verified token is answered from the cache, and
// refused once past its exp (beyond the full check's leeway) although it is
// still cached — for HS256 and for JWKS-verified tokens.
func TestCachedTokenExpires(t *testing.T) {
	secret := []byte("0123456789abcdef0123456789abcdef")
	rk := rsaKey(t)
	p := newIDP(t, publicKey{kid: "rsa-1", key: &rk.PublicKey, alg: "RS256"})

	for _, tc := range []struct {
		name  string
		v     func() *auth.Verifier
		token func(exp time.Time) string
	}{
		{"HS256", func() *auth.Verifier { return auth.NewVerifier(secret) }, func(exp time.Time) string {
			return hsToken(t, secret, jwt.MapClaims{"exp": exp.Unix()})
		}},
		{"RS256 (JWKS)", func() *auth.Verifier { return newVerifier(t, p, auth.Options{Secret: secret}) }, func(exp time.Time) string {
			return sign(t, jwt.SigningMethodRS256, "rsa-1", rk, jwt.MapClaims{"exp": exp.Unix()})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := tc.v()
			clk := newClock()
			auth.SetClock(v, clk.now)
			exp := clk.now().Add(10 * time.Minute).Truncate(time.Second)
			tok := tc.token(exp)
			for i := range 3 { // the first checks in full and caches, the others hit
				if c, err := v.Verify(tok); err != nil || c.Subject != "42" {
					t.Fatalf("verify %d: %+v %v", i, c, err)
				}
				if c, err := v.VerifyBytes([]byte(tok)); err != nil || c.Subject != "42" {
					t.Fatalf("verify bytes %d: %+v %v", i, c, err)
				}
			}
			// Past exp and past any leeway: refused, cached or not.
			clk.set(exp.Add(time.Minute))
			if c, err := v.Verify(tok); !errors.Is(err, auth.ErrUnauthenticated) {
				t.Fatalf("expired cached token accepted as %+v (err %v)", c, err)
			}
			if c, err := v.VerifyBytes([]byte(tok)); !errors.Is(err, auth.ErrUnauthenticated) {
				t.Fatalf("expired cached token accepted as %+v (err %v)", c, err)
			}
		})
	}
}

// TestCachedTokenAtExp: the cache never answers at or after exp, even where
// the full check's leeway would still accept the token; and a token refused
// once is not remembered as valid.
func TestCachedTokenAtExp(t *testing.T) {
	secret := []byte("0123456789abcdef0123456789abcdef")
	v := auth.NewVerifier(secret)
	clk := newClock()
	auth.SetClock(v, clk.now)
	exp := clk.now().Add(time.Minute).Truncate(time.Second)
	tok := hsToken(t, secret, jwt.MapClaims{"exp": exp.Unix()})
	if _, err := v.Verify(tok); err != nil {
		t.Fatal(err)
	}
	clk.set(exp.Add(6 * time.Second)) // past the HS256 leeway of 5s
	if _, err := v.Verify(tok); !errors.Is(err, auth.ErrUnauthenticated) {
		t.Fatalf("token at exp+6s accepted: %v", err)
	}
	clk.add(-5 * time.Second) // exp+1s: within the leeway, checked in full again
	if _, err := v.Verify(tok); err != nil {
		t.Fatalf("token within the leeway refused: %v", err)
	}
	bad := hsToken(t, []byte("fedcba9876543210fedcba9876543210"), nil)
	for range 2 {
		if _, err := v.Verify(bad); !errors.Is(err, auth.ErrUnauthenticated) {
			t.Fatalf("wrongly signed token accepted: %v", err)
		}
	}
}

// BenchmarkVerify: a cached token costs a hash and a lookup, no allocation.
//
//	go test -run '^$' -bench Verify -benchmem ./auth/
func BenchmarkVerify(b *testing.B) {
	secret := []byte("0123456789abcdef0123456789abcdef")
	tok, _ := auth.Issue(secret, 42, false, time.Hour)
	raw := []byte(tok)
	for _, tc := range []struct {
		name string
		v    *auth.Verifier
	}{{"uncached", auth.NewVerifierCache(secret, auth.CacheOptions{Size: -1})}, {"cached", auth.NewVerifier(secret)}} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := tc.v.VerifyBytes(raw); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
