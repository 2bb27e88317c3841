package auth_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/lestrrat-go/jwx/v3/jwk"

	"github.com/stampede-sh/stampede/auth"
)

// idp is an identity provider served from the test: a JWKS on loopback whose
// keys the test replaces (rotation), counting the fetches.
type idp struct {
	t       *testing.T
	srv     *httptest.Server
	mu      sync.Mutex
	set     []byte
	fetches atomic.Int64
}

func newIDP(t *testing.T, keys ...publicKey) *idp {
	t.Helper()
	p := &idp{t: t}
	p.publish(keys...)
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.fetches.Add(1)
		p.mu.Lock()
		b := p.set
		p.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.Write(b)
	}))
	t.Cleanup(p.srv.Close)
	return p
}

// publicKey is one JWKS entry.
type publicKey struct {
	kid string
	key any // *rsa.PublicKey, *ecdsa.PublicKey, []byte (a symmetric key: must never verify anything)
	alg string
}

// publish replaces the served key set.
func (p *idp) publish(keys ...publicKey) {
	p.t.Helper()
	set := jwk.NewSet()
	for _, k := range keys {
		key, err := jwk.Import(k.key)
		if err != nil {
			p.t.Fatal(err)
		}
		key.Set(jwk.KeyIDKey, k.kid)
		if k.alg != "" {
			key.Set(jwk.AlgorithmKey, k.alg)
		}
		set.AddKey(key)
	}
	b, err := json.Marshal(set)
	if err != nil {
		p.t.Fatal(err)
	}
	p.mu.Lock()
	p.set = b
	p.mu.Unlock()
}

func rsaKey(t *testing.T) *rsa.PrivateKey {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func ecKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

const (
	testIssuer   = "https://id.example.test/"
	testAudience = "stampede-shop"
)

// sign makes a token with method, kid and claims (sub 42, the test issuer
// and audience, valid 1h, unless claims overrides them).
func sign(t *testing.T, m jwt.SigningMethod, kid string, key any, claims jwt.MapClaims) string {
	t.Helper()
	c := jwt.MapClaims{"sub": "42", "iss": testIssuer, "aud": testAudience, "exp": time.Now().Add(time.Hour).Unix()}
	for k, v := range claims {
		if v == nil {
			delete(c, k)
		} else {
			c[k] = v
		}
	}
	tok := jwt.NewWithClaims(m, c)
	if kid != "" {
		tok.Header["kid"] = kid
	}
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func newVerifier(t *testing.T, p *idp, o auth.Options) *auth.Verifier {
	t.Helper()
	o.JWKSURL = p.srv.URL + "/.well-known/jwks.json"
	if o.Issuer == "" {
		o.Issuer = testIssuer
	}
	if o.Audience == "" {
		o.Audience = testAudience
	}
	v, err := auth.New(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { v.Close() })
	return v
}

func TestJWKSTokens(t *testing.T) {
	rk, ek := rsaKey(t), ecKey(t)
	p := newIDP(t, publicKey{kid: "rsa-1", key: &rk.PublicKey, alg: "RS256"}, publicKey{kid: "ec-1", key: &ek.PublicKey})
	secret := []byte("0123456789abcdef0123456789abcdef")
	v := newVerifier(t, p, auth.Options{Secret: secret, AdminGroup: "shop-admins"})

	ok := map[string]struct {
		token string
		admin bool
	}{
		"RS256":            {sign(t, jwt.SigningMethodRS256, "rsa-1", rk, nil), false},
		"ES256":            {sign(t, jwt.SigningMethodES256, "ec-1", ek, nil), false},
		"role admin":       {sign(t, jwt.SigningMethodRS256, "rsa-1", rk, jwt.MapClaims{"role": "admin"}), true},
		"admin group":      {sign(t, jwt.SigningMethodES256, "ec-1", ek, jwt.MapClaims{"groups": []string{"buyers", "shop-admins"}}), true},
		"other group":      {sign(t, jwt.SigningMethodES256, "ec-1", ek, jwt.MapClaims{"groups": []string{"buyers"}}), false},
		"audience in list": {sign(t, jwt.SigningMethodRS256, "rsa-1", rk, jwt.MapClaims{"aud": []string{"x", testAudience}}), false},
	}
	for name, c := range ok {
		got, err := v.Verify(c.token)
		if err != nil || got.UserID != 42 || got.Admin != c.admin {
			t.Errorf("%s: claims %+v err %v, want user 42 admin %v", name, got, err, c.admin)
		}
	}
	// The shared secret still works next to the JWKS.
	hs, _ := auth.Issue(secret, 7, false, time.Minute)
	if c, err := v.Verify(hs); err != nil || c.UserID != 7 {
		t.Errorf("HS256 token: %+v %v", c, err)
	}

	pubDER, _ := x509.MarshalPKIXPublicKey(&rk.PublicKey)
	otherRSA := rsaKey(t)
	bad := map[string]string{
		"wrong issuer":   sign(t, jwt.SigningMethodRS256, "rsa-1", rk, jwt.MapClaims{"iss": "https://evil.test/"}),
		"no issuer":      sign(t, jwt.SigningMethodRS256, "rsa-1", rk, jwt.MapClaims{"iss": nil}),
		"wrong audience": sign(t, jwt.SigningMethodRS256, "rsa-1", rk, jwt.MapClaims{"aud": "other-app"}),
		"no exp":         sign(t, jwt.SigningMethodRS256, "rsa-1", rk, jwt.MapClaims{"exp": nil}),
		"expired":        sign(t, jwt.SigningMethodRS256, "rsa-1", rk, jwt.MapClaims{"exp": time.Now().Add(-time.Hour).Unix()}),
		"uuid subject":   sign(t, jwt.SigningMethodRS256, "rsa-1", rk, jwt.MapClaims{"sub": "7f0c-uuid"}),
		"foreign key":    sign(t, jwt.SigningMethodRS256, "rsa-1", otherRSA, nil),
		"unknown kid":    sign(t, jwt.SigningMethodRS256, "rsa-9", otherRSA, nil),
		// alg confusion: the kid of an RSA key with ES256, and the other way round
		"ES256 on RSA key": sign(t, jwt.SigningMethodES256, "rsa-1", ek, nil),
		"RS256 on EC key":  sign(t, jwt.SigningMethodRS256, "ec-1", rk, nil),
		// alg confusion: HS256 keyed with the provider's public key
		"HS256 with public key DER": sign(t, jwt.SigningMethodHS256, "rsa-1", pubDER, nil),
		"HS256 wrong secret":        sign(t, jwt.SigningMethodHS256, "", []byte("fedcba9876543210fedcba9876543210"), nil),
		"none":                      sign(t, jwt.SigningMethodNone, "rsa-1", jwt.UnsafeAllowNoneSignatureType, nil),
		"RS512":                     sign(t, jwt.SigningMethodRS512, "rsa-1", rk, nil),
	}
	for name, tok := range bad {
		if c, err := v.Verify(tok); !errors.Is(err, auth.ErrUnauthenticated) {
			t.Errorf("%s: accepted as %+v (err %v)", name, c, err)
		}
	}
}

// A symmetric key in the JWKS never verifies anything, and without a secret
// HS256 tokens are refused.
func TestJWKSSymmetricKeyAndNoSecret(t *testing.T) {
	sym := []byte("0123456789abcdef0123456789abcdef")
	rk := rsaKey(t)
	p := newIDP(t, publicKey{kid: "oct", key: sym}, publicKey{kid: "rsa-1", key: &rk.PublicKey})
	v := newVerifier(t, p, auth.Options{})
	for name, tok := range map[string]string{
		"HS256 on oct kid": sign(t, jwt.SigningMethodHS256, "oct", sym, nil),
		"RS256 on oct kid": sign(t, jwt.SigningMethodRS256, "oct", rk, nil),
	} {
		if _, err := v.Verify(tok); !errors.Is(err, auth.ErrUnauthenticated) {
			t.Errorf("%s accepted", name)
		}
	}
	if _, err := v.Verify(sign(t, jwt.SigningMethodRS256, "rsa-1", rk, nil)); err != nil {
		t.Errorf("RS256: %v", err)
	}
}

// The provider rotates its key: a token of the new key is accepted at once
// (its unknown kid refetches the set), the old key's tokens are refused once
// the set no longer has it, and unknown kids do not refetch more than once
// per JWKSMinRefresh.
func TestJWKSRotation(t *testing.T) {
	k1, k2 := rsaKey(t), rsaKey(t)
	p := newIDP(t, publicKey{kid: "k1", key: &k1.PublicKey, alg: "RS256"})
	const minRefresh = 300 * time.Millisecond
	v := newVerifier(t, p, auth.Options{JWKSMinRefresh: minRefresh})
	old := sign(t, jwt.SigningMethodRS256, "k1", k1, nil)
	if _, err := v.Verify(old); err != nil {
		t.Fatalf("k1 before rotation: %v", err)
	}
	before := p.fetches.Load()

	time.Sleep(minRefresh) // the rotation comes later than the first fetch
	p.publish(publicKey{kid: "k2", key: &k2.PublicKey, alg: "RS256"})
	if _, err := v.Verify(sign(t, jwt.SigningMethodRS256, "k2", k2, nil)); err != nil {
		t.Fatalf("k2 after rotation: %v", err)
	}
	if p.fetches.Load() <= before {
		t.Fatalf("the unknown kid k2 did not refetch the set")
	}
	if _, err := v.Verify(old); !errors.Is(err, auth.ErrUnauthenticated) {
		t.Errorf("k1 token accepted after k1 left the set: %v", err)
	}

	// A flood of unknown kids refetches at most once per minRefresh: the
	// tokens are signed first, and the bound follows from the time the flood
	// took (a slow machine may need several minRefresh periods for it).
	stranger := rsaKey(t)
	var flood []string
	for i := range 50 {
		flood = append(flood, sign(t, jwt.SigningMethodRS256, "nope-"+string(rune('a'+i%26)), stranger, nil))
	}
	n := p.fetches.Load()
	start := time.Now()
	for _, tok := range flood {
		v.Verify(tok)
	}
	took := time.Since(start)
	if got, most := p.fetches.Load()-n, 1+int64(took/minRefresh); got > most {
		t.Errorf("50 unknown kids within %s made %d fetches, want at most %d (one per %s)", took, got, most, minRefresh)
	}
}

func TestNewRefusesBadJWKS(t *testing.T) {
	if _, err := auth.New(context.Background(), auth.Options{JWKSURL: "ftp://x/jwks"}); err == nil {
		t.Error("ftp JWKS URL accepted")
	}
	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close()
	if _, err := auth.New(context.Background(), auth.Options{JWKSURL: dead.URL, JWKSWait: 2 * time.Second}); err == nil {
		t.Error("unreachable JWKS accepted")
	}
	if _, err := auth.New(context.Background(), auth.Options{}); err == nil {
		t.Error("no secret and no JWKS accepted")
	}
}
