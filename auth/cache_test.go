package auth_test

import (
	"errors"
	"strconv"
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

// TestOwnHS256TokensBypassTheCache: a token with our signers' header is
// checked in full every time (cheaper than the cache's miss), one with
// another header (here a kid) once, then answered from the cache.
func TestOwnHS256TokensBypassTheCache(t *testing.T) {
	secret := []byte("0123456789abcdef0123456789abcdef")
	v := auth.NewVerifier(secret)
	own, _ := auth.Issue(secret, 42, false, time.Hour)
	other := kidToken(secret, 42)
	for _, tc := range []struct {
		tok  string
		want int64
	}{{own, 3}, {other, 1}} {
		before := auth.FullChecks(v)
		for range 3 {
			if c, err := v.VerifyBytes([]byte(tc.tok)); err != nil || c.UserID != 42 {
				t.Fatalf("verify: %+v %v", c, err)
			}
		}
		if got := auth.FullChecks(v) - before; got != tc.want {
			t.Fatalf("token %.40s…: %d full checks in 3 verifications, want %d", tc.tok, got, tc.want)
		}
	}
}

// kidToken is an HS256 token for user with a kid in its header: not the
// header our signers write, so golang-jwt's parser checks it and the cache
// keeps it.
func kidToken(secret []byte, user int64) string {
	tok := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": strconv.FormatInt(user, 10),
		"iss": auth.DefaultHS256Issuer, "aud": auth.DefaultHS256Audience, "exp": time.Now().Add(time.Hour).Unix()})
	tok.Header["kid"] = "k1"
	s, err := tok.SignedString(secret)
	if err != nil {
		panic(err)
	}
	return s
}

// BenchmarkVerify: one token verified again and again (a retry storm): ours
// checked each time, another header's answered by a hash and a lookup.
//
//	go test -run '^$' -bench Verify -benchmem ./auth/
func BenchmarkVerify(b *testing.B) {
	secret := []byte("0123456789abcdef0123456789abcdef")
	own, _ := auth.Issue(secret, 42, false, time.Hour)
	for _, tc := range []struct {
		name string
		tok  string
	}{{"own header", own}, {"kid header, cached", kidToken(secret, 42)}} {
		b.Run(tc.name, func(b *testing.B) {
			v := auth.NewVerifier(secret)
			raw := []byte(tc.tok)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := v.VerifyBytes(raw); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkVerifyNewTokens: the opening of a sale, every buyer's token seen
// for the first time (200,000 tokens in turn, more than the cache holds):
// ours checked without the cache; with a kid header, golang-jwt's parser
// with and without the cache.
//
//	go test -run '^$' -bench VerifyNewTokens -benchmem ./auth/
func BenchmarkVerifyNewTokens(b *testing.B) {
	secret := []byte("0123456789abcdef0123456789abcdef")
	own, kid := make([][]byte, 200_000), make([][]byte, 200_000)
	for i := range own {
		tok, _ := auth.Issue(secret, int64(i+1), false, time.Hour)
		own[i], kid[i] = []byte(tok), []byte(kidToken(secret, int64(i+1)))
	}
	for _, tc := range []struct {
		name string
		v    *auth.Verifier
		toks [][]byte
	}{
		{"own header", auth.NewVerifier(secret), own},
		{"kid header, cached", auth.NewVerifier(secret), kid},
		{"kid header, no cache", auth.NewVerifierCache(secret, auth.CacheOptions{Size: -1}), kid},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if _, err := tc.v.VerifyBytes(tc.toks[i%len(tc.toks)]); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}
