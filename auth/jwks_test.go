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
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
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
	headers http.Header // sent with the set (cache headers)
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
		for k, v := range p.headers {
			w.Header()[k] = v
		}
		p.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.Write(b)
	}))
	t.Cleanup(p.srv.Close)
	return p
}

// setHeaders sets the headers sent with the set.
func (p *idp) setHeaders(h http.Header) {
	p.mu.Lock()
	p.headers = h
	p.mu.Unlock()
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

// subjects is an in-memory SubjectMapper: ids from FirstMappedUserID in
// order of first sight, counting calls; fail makes every call fail.
type subjects struct {
	mu    sync.Mutex
	ids   map[string]int64
	calls int
	fail  error
}

func (s *subjects) MapSubject(_ context.Context, issuer, subject string) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	if s.fail != nil {
		return 0, s.fail
	}
	if s.ids == nil {
		s.ids = map[string]int64{}
	}
	k := issuer + "|" + subject
	if id, ok := s.ids[k]; ok {
		return id, nil
	}
	id := auth.FirstMappedUserID + int64(len(s.ids))
	s.ids[k] = id
	return id, nil
}

// newVerifier is a Verifier of p's tokens (issuer testIssuer, audience
// testAudience unless o says otherwise), with an in-memory subject mapper
// unless o has one.
func newVerifier(t *testing.T, p *idp, o auth.Options) *auth.Verifier {
	t.Helper()
	if len(o.Providers) == 0 {
		o.Providers = []auth.Provider{{Issuer: testIssuer, JWKSURL: p.srv.URL + "/.well-known/jwks.json"}}
	}
	if o.Audience == "" {
		o.Audience = testAudience
	}
	if o.Subjects == nil {
		o.Subjects = &subjects{}
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
		"admin group":      {sign(t, jwt.SigningMethodES256, "ec-1", ek, jwt.MapClaims{"groups": []string{"buyers", "shop-admins"}}), true},
		"admin group str":  {sign(t, jwt.SigningMethodES256, "ec-1", ek, jwt.MapClaims{"groups": "shop-admins"}), true},
		"other group":      {sign(t, jwt.SigningMethodES256, "ec-1", ek, jwt.MapClaims{"groups": []string{"buyers"}}), false},
		"audience in list": {sign(t, jwt.SigningMethodRS256, "rsa-1", rk, jwt.MapClaims{"aud": []string{"x", testAudience}}), false},
		// With an admin group configured only the group makes an admin
		// (issue 26): role admin in a provider's token is no admin.
		"role admin without the group": {sign(t, jwt.SigningMethodRS256, "rsa-1", rk, jwt.MapClaims{"role": "admin"}), false},
	}
	var uid int64
	for name, c := range ok {
		got, err := v.Verify(c.token)
		if err != nil || got.Admin != c.admin || got.Subject != "42" || got.Issuer != testIssuer {
			t.Errorf("%s: claims %+v err %v, want subject 42 admin %v", name, got, err, c.admin)
		}
		// The provider's "42" is a subject, not a user id: it maps to one id
		// of the mapped range, the same for every token.
		if uid == 0 {
			uid = got.UserID
		}
		if got.UserID != uid || uid < auth.FirstMappedUserID {
			t.Errorf("%s: user id %d, want %d (≥ %d)", name, got.UserID, uid, auth.FirstMappedUserID)
		}
	}
	// The shared secret still works next to the JWKS when it is configured.
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
		"empty subject":  sign(t, jwt.SigningMethodRS256, "rsa-1", rk, jwt.MapClaims{"sub": ""}),
		"no subject":     sign(t, jwt.SigningMethodRS256, "rsa-1", rk, jwt.MapClaims{"sub": nil}),
		"control char":   sign(t, jwt.SigningMethodRS256, "rsa-1", rk, jwt.MapClaims{"sub": "ab\ncd"}),
		"long subject":   sign(t, jwt.SigningMethodRS256, "rsa-1", rk, jwt.MapClaims{"sub": strings.Repeat("x", 256)}),
		"foreign key":    sign(t, jwt.SigningMethodRS256, "rsa-1", otherRSA, nil),
		"unknown kid":    sign(t, jwt.SigningMethodRS256, "rsa-9", otherRSA, nil),
		// alg confusion: the kid of an RSA key with ES256, and the other way round
		"ES256 on RSA key": sign(t, jwt.SigningMethodES256, "rsa-1", ek, nil),
		"RS256 on EC key":  sign(t, jwt.SigningMethodRS256, "ec-1", rk, nil),
		// alg confusion: HS256 keyed with the provider's public key
		"HS256 with public key DER": sign(t, jwt.SigningMethodHS256, "rsa-1", pubDER, nil),
		"HS256 wrong secret":        hsToken(t, []byte("fedcba9876543210fedcba9876543210"), nil),
		"none":                      sign(t, jwt.SigningMethodNone, "rsa-1", jwt.UnsafeAllowNoneSignatureType, nil),
		"RS512":                     sign(t, jwt.SigningMethodRS512, "rsa-1", rk, nil),
	}
	for name, tok := range bad {
		if c, err := v.Verify(tok); !errors.Is(err, auth.ErrUnauthenticated) {
			t.Errorf("%s: accepted as %+v (err %v)", name, c, err)
		}
	}
}

// hsToken is an HS256 token of secret for user 42 with the default HS256
// issuer and audience, valid 1h, unless claims overrides them.
func hsToken(t *testing.T, secret []byte, claims jwt.MapClaims) string {
	t.Helper()
	c := jwt.MapClaims{"iss": auth.DefaultHS256Issuer, "aud": auth.DefaultHS256Audience}
	for k, v := range claims {
		c[k] = v
	}
	return sign(t, jwt.SigningMethodHS256, "", secret, c)
}

// TestUnknownCritRefused: a token whose header names critical extensions is
// refused whatever it signs (RFC 7515 §4.1.11: Stampede understands none);
// it was accepted before (issue 26).
func TestUnknownCritRefused(t *testing.T) {
	rk := rsaKey(t)
	p := newIDP(t, publicKey{kid: "rsa-1", key: &rk.PublicKey})
	secret := []byte("0123456789abcdef0123456789abcdef")
	v := newVerifier(t, p, auth.Options{Secret: secret})
	withCrit := func(m jwt.SigningMethod, key any, claims jwt.MapClaims) string {
		c := jwt.MapClaims{"sub": "42", "iss": testIssuer, "aud": testAudience, "exp": time.Now().Add(time.Hour).Unix(), "x-ext": true}
		for k, val := range claims {
			c[k] = val
		}
		tok := jwt.NewWithClaims(m, c)
		tok.Header["kid"] = "rsa-1"
		tok.Header["crit"] = []string{"x-ext"}
		s, err := tok.SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	for name, tok := range map[string]string{
		"RS256": withCrit(jwt.SigningMethodRS256, rk, nil),
		"HS256": withCrit(jwt.SigningMethodHS256, secret, jwt.MapClaims{"iss": auth.DefaultHS256Issuer, "aud": auth.DefaultHS256Audience}),
	} {
		if c, err := v.Verify(tok); !errors.Is(err, auth.ErrUnauthenticated) {
			t.Errorf("%s with crit: accepted as %+v (err %v)", name, c, err)
		}
	}
	if _, err := v.Verify(sign(t, jwt.SigningMethodRS256, "rsa-1", rk, nil)); err != nil {
		t.Errorf("the same token without crit: %v", err)
	}
}

// TestSubjectsMapOnce: provider subjects (UUIDs, opaque strings) map to one
// internal id each, per issuer; many tokens of one subject ask the mapper
// once, concurrent first tokens too; a mapper failure is 503-worthy
// (ErrIdentityUnavailable), not a 401, and is not remembered.
func TestSubjectsMapOnce(t *testing.T) {
	rk := rsaKey(t)
	p := newIDP(t, publicKey{kid: "rsa-1", key: &rk.PublicKey})
	url := p.srv.URL + "/.well-known/jwks.json"
	const staff = "https://id.example.test/realms/staff"
	m := &subjects{}
	v := newVerifier(t, p, auth.Options{Subjects: m, Providers: []auth.Provider{{Issuer: testIssuer, JWKSURL: url}, {Issuer: staff, JWKSURL: url}}})
	const uuid = "3f6c1a52-8d0e-4c59-9a5e-0b7f3c1e2d4a"
	tokenOf := func(iss, sub string, i int) string {
		return sign(t, jwt.SigningMethodRS256, "rsa-1", rk, jwt.MapClaims{"iss": iss, "sub": sub, "jti": fmt.Sprint(i)})
	}
	var wg sync.WaitGroup
	ids := make([]int64, 40)
	for i := range ids {
		wg.Go(func() {
			c, err := v.Verify(tokenOf(testIssuer, uuid, i)) // 40 distinct tokens: no token-cache hit
			if err != nil {
				t.Errorf("token %d: %v", i, err)
			}
			ids[i] = c.UserID
		})
	}
	wg.Wait()
	for i, id := range ids {
		if id != ids[0] || id < auth.FirstMappedUserID {
			t.Fatalf("token %d: user %d, token 0: %d", i, id, ids[0])
		}
	}
	if got := auth.MapperCalls(v); got != 1 {
		t.Errorf("40 tokens of one subject asked the mapper %d times, want 1", got)
	}
	// The same subject from another issuer is another person.
	other, err := v.Verify(tokenOf(staff, uuid, 0))
	if err != nil || other.UserID == ids[0] || other.Issuer != staff || other.Subject != uuid {
		t.Errorf("same sub, other issuer: %+v %v (first issuer's id %d)", other, err, ids[0])
	}
	for _, sub := range []string{"auth0|65f1c0ffee", "Ünïcødé user", "1001", "+1001", "0001001"} {
		if c, err := v.Verify(tokenOf(testIssuer, sub, 0)); err != nil || c.Subject != sub || c.UserID < auth.FirstMappedUserID {
			t.Errorf("subject %q: %+v %v", sub, c, err)
		}
	}

	m.mu.Lock()
	m.fail = errors.New("mysql: connection refused")
	m.mu.Unlock()
	tok := tokenOf(testIssuer, "new-buyer", 0)
	if _, err := v.Verify(tok); !errors.Is(err, auth.ErrIdentityUnavailable) || errors.Is(err, auth.ErrUnauthenticated) {
		t.Fatalf("mapper down: %v, want ErrIdentityUnavailable", err)
	}
	m.mu.Lock()
	m.fail = nil
	m.mu.Unlock()
	if c, err := v.Verify(tok); err != nil || c.UserID < auth.FirstMappedUserID {
		t.Fatalf("mapper back: %+v %v", c, err)
	}
}

// TestHS256Rules (issue 26): HS256 tokens are held to their issuer and
// audience and to a lifetime bound (admins shorter), their subject is a user
// id of the direct range in canonical decimal, and Signer refuses to make
// longer-lived tokens.
func TestHS256Rules(t *testing.T) {
	secret := []byte("0123456789abcdef0123456789abcdef")
	v := auth.NewVerifier(secret)
	now := time.Now()
	good := map[string]jwt.MapClaims{
		"24h buyer":       {"exp": now.Add(auth.MaxTokenTTL).Unix()},
		"1h admin":        {"exp": now.Add(auth.MaxAdminTokenTTL).Unix(), "role": "admin"},
		"largest user id": {"sub": fmt.Sprint(auth.MaxDirectUserID)},
		"audience list":   {"aud": []string{"other", auth.DefaultHS256Audience}},
	}
	for name, c := range good {
		if _, err := v.Verify(hsToken(t, secret, c)); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	bad := map[string]jwt.MapClaims{
		"no issuer":        {"iss": nil},
		"other issuer":     {"iss": "someone-else"},
		"no audience":      {"aud": nil},
		"other audience":   {"aud": "other-app"},
		"25h buyer":        {"exp": now.Add(25 * time.Hour).Unix()},
		"100 years":        {"exp": now.Add(876000 * time.Hour).Unix()},
		"2h admin":         {"exp": now.Add(2 * time.Hour).Unix(), "role": "admin"},
		"sub +1001":        {"sub": "+1001"},
		"sub 0001001":      {"sub": "0001001"},
		"sub 1001 space":   {"sub": "1001 "},
		"sub 0":            {"sub": "0"},
		"sub -5":           {"sub": "-5"},
		"sub mapped":       {"sub": fmt.Sprint(auth.FirstMappedUserID)},
		"sub uuid":         {"sub": "3f6c1a52-8d0e-4c59-9a5e-0b7f3c1e2d4a"},
		"sub beyond int64": {"sub": "9223372036854775808"},
	}
	for name, c := range bad {
		if got, err := v.Verify(hsToken(t, secret, c)); !errors.Is(err, auth.ErrUnauthenticated) {
			t.Errorf("%s: accepted as %+v (err %v)", name, got, err)
		}
	}
	s := auth.Signer{Secret: secret}
	if _, err := s.Issue(5, false, auth.MaxTokenTTL+time.Second); err == nil {
		t.Error("Signer made a buyer token beyond MaxTokenTTL")
	}
	if _, err := s.Issue(5, true, auth.MaxAdminTokenTTL+time.Second); err == nil {
		t.Error("Signer made an admin token beyond MaxAdminTokenTTL")
	}
	if _, err := s.Issue(auth.FirstMappedUserID, false, time.Minute); err == nil {
		t.Error("Signer made a token for a mapped user id")
	}
	// A Signer and a Verifier of another issuer, audience and admin group
	// agree with each other, and with nobody else.
	custom := auth.Signer{Secret: secret, Issuer: "shop-backend", Audience: "stampede-api", AdminGroup: "ops"}
	cv, err := auth.New(context.Background(), auth.Options{Secret: secret, HS256Issuer: "shop-backend", HS256Audience: "stampede-api", AdminGroup: "ops"})
	if err != nil {
		t.Fatal(err)
	}
	tok, err := custom.Issue(5, true, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if c, err := cv.Verify(tok); err != nil || c.UserID != 5 || !c.Admin {
		t.Errorf("custom signer → custom verifier: %+v %v", c, err)
	}
	if _, err := v.Verify(tok); err == nil {
		t.Error("a token of another HS256 issuer and audience was accepted by the default verifier")
	}
}

// TestHS256Off: a verifier with identity providers and no secret refuses
// every HS256 token, also one signed with what used to be the secret.
func TestHS256Off(t *testing.T) {
	rk := rsaKey(t)
	p := newIDP(t, publicKey{kid: "rsa-1", key: &rk.PublicKey})
	v := newVerifier(t, p, auth.Options{})
	for _, secret := range [][]byte{[]byte("0123456789abcdef0123456789abcdef"), nil, {}} {
		if _, err := v.Verify(hsToken(t, secret, nil)); !errors.Is(err, auth.ErrUnauthenticated) {
			t.Errorf("HS256 token (secret %q) accepted with HS256 off: %v", secret, err)
		}
	}
}

// A symmetric key in the JWKS never verifies anything.
func TestJWKSSymmetricKey(t *testing.T) {
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
	oldClaims, err := v.Verify(old)
	if err != nil {
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
	if v.KeyCurrent(oldClaims) {
		t.Error("claims of k1 still current after k1 left the set")
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

// TestRefetchKeepsCachedTokens (issue 26): a refetch of the key set that
// keeps a key (here forced by an unknown kid) keeps the tokens of that key
// answered from the cache; before, every refetch dropped them all.
func TestRefetchKeepsCachedTokens(t *testing.T) {
	k1, k2 := rsaKey(t), rsaKey(t)
	p := newIDP(t, publicKey{kid: "k1", key: &k1.PublicKey})
	const minRefresh = 200 * time.Millisecond
	v := newVerifier(t, p, auth.Options{JWKSMinRefresh: minRefresh})
	tok := sign(t, jwt.SigningMethodRS256, "k1", k1, nil)
	c, err := v.Verify(tok)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(minRefresh)
	p.publish(publicKey{kid: "k1", key: &k1.PublicKey}, publicKey{kid: "k2", key: &k2.PublicKey})
	fetches := p.fetches.Load()
	if _, err := v.Verify(sign(t, jwt.SigningMethodRS256, "k2", k2, nil)); err != nil { // refetches
		t.Fatal(err)
	}
	if p.fetches.Load() == fetches {
		t.Fatal("no refetch")
	}
	checks := auth.FullChecks(v)
	for range 5 {
		if _, err := v.Verify(tok); err != nil {
			t.Fatal(err)
		}
	}
	if got := auth.FullChecks(v) - checks; got != 0 {
		t.Errorf("k1's token checked in full %d times after a refetch that kept k1, want 0 (cached)", got)
	}
	if !v.KeyCurrent(c) {
		t.Error("k1's claims not current after a refetch that kept k1")
	}
}

// TestJWKSRefreshFollowsCacheHeaders (issue 26): without cache headers the
// set is refreshed every JWKSRefresh (default 15 min), not every
// JWKSMinRefresh as before; a provider's max-age is followed.
func TestJWKSRefreshFollowsCacheHeaders(t *testing.T) {
	rk := rsaKey(t)
	const minRefresh = 100 * time.Millisecond
	t.Run("no headers", func(t *testing.T) {
		p := newIDP(t, publicKey{kid: "rsa-1", key: &rk.PublicKey})
		newVerifier(t, p, auth.Options{JWKSMinRefresh: minRefresh})
		time.Sleep(20 * minRefresh)
		if got := p.fetches.Load(); got != 1 {
			t.Errorf("%d fetches in %s without cache headers, want 1 (next one after 15 min)", got, 20*minRefresh)
		}
	})
	t.Run("no-cache", func(t *testing.T) {
		p := newIDP(t, publicKey{kid: "rsa-1", key: &rk.PublicKey})
		p.setHeaders(http.Header{"Cache-Control": {"no-cache"}})
		newVerifier(t, p, auth.Options{JWKSMinRefresh: minRefresh})
		time.Sleep(20 * minRefresh)
		if got := p.fetches.Load(); got != 1 {
			t.Errorf("%d fetches in %s with no-cache, want 1", got, 20*minRefresh)
		}
	})
	t.Run("max-age", func(t *testing.T) {
		p := newIDP(t, publicKey{kid: "rsa-1", key: &rk.PublicKey})
		p.setHeaders(http.Header{"Cache-Control": {"public, max-age=1"}})
		newVerifier(t, p, auth.Options{JWKSMinRefresh: minRefresh})
		deadline := time.Now().Add(10 * time.Second)
		for p.fetches.Load() < 3 && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		if got := p.fetches.Load(); got < 3 {
			t.Errorf("%d fetches in 10s with max-age=1, want the set refreshed every second", got)
		}
	})
}

func TestNewRefusesBadJWKS(t *testing.T) {
	m := &subjects{}
	prov := func(u string) []auth.Provider { return []auth.Provider{{Issuer: testIssuer, JWKSURL: u}} }
	if _, err := auth.New(context.Background(), auth.Options{Providers: prov("ftp://x/jwks"), Subjects: m}); err == nil {
		t.Error("ftp JWKS URL accepted")
	}
	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close()
	if _, err := auth.New(context.Background(), auth.Options{Providers: prov(dead.URL), Subjects: m, JWKSWait: 2 * time.Second}); err == nil {
		t.Error("unreachable JWKS accepted")
	}
	if _, err := auth.New(context.Background(), auth.Options{}); err == nil {
		t.Error("no secret and no provider accepted")
	}
	rk := rsaKey(t)
	p := newIDP(t, publicKey{kid: "rsa-1", key: &rk.PublicKey})
	if _, err := auth.New(context.Background(), auth.Options{Providers: prov(p.srv.URL)}); err == nil {
		t.Error("providers without a subject mapper accepted")
	}
	twice := append(prov(p.srv.URL), prov(p.srv.URL)...)
	if _, err := auth.New(context.Background(), auth.Options{Providers: twice, Subjects: m}); err == nil {
		t.Error("one issuer configured twice accepted")
	}
	hsIss := []auth.Provider{{Issuer: auth.DefaultHS256Issuer, JWKSURL: p.srv.URL}}
	if _, err := auth.New(context.Background(), auth.Options{Secret: []byte("s"), Providers: hsIss, Subjects: m}); err == nil {
		t.Error("a provider issuer equal to the HS256 issuer accepted")
	}
	// RequireHTTPS: plain http off loopback is refused for being http (not
	// for being unreachable: the error names https, and .invalid never
	// resolves, so a fetch attempt would fail with a different error).
	_, err := auth.New(context.Background(), auth.Options{Providers: prov("http://jwks.invalid/certs"), Subjects: m, RequireHTTPS: true, JWKSWait: time.Second})
	if err == nil || !strings.Contains(err.Error(), "needs https") {
		t.Errorf("plain-http JWKS off loopback with RequireHTTPS: error %v, want one naming https", err)
	}
	// Plain http only on loopback (the test's server is on 127.0.0.1, so it
	// passes).
	v, err := auth.New(context.Background(), auth.Options{Providers: prov(p.srv.URL), Subjects: m, RequireHTTPS: true})
	if err != nil {
		t.Fatalf("http on loopback with RequireHTTPS: %v", err)
	}
	v.Close()
}

// TestCheckJWKSURL (issue 26): production (requireHTTPS) refuses plain http
// except on loopback; errors and logs never show credentials or the query.
func TestCheckJWKSURL(t *testing.T) {
	for u, wantOK := range map[string]bool{
		"https://id.example.com/.well-known/jwks.json": true,
		"http://127.0.0.1:8443/jwks":                   true,
		"http://[::1]/jwks":                            true,
		"http://localhost/jwks":                        true,
		"http://id.example.com/jwks":                   false,
		"http://10.0.0.5/jwks":                         false,
		"ftp://id.example.com/jwks":                    false,
		"https:///jwks":                                false,
	} {
		if err := auth.CheckJWKSURL(u, true); (err == nil) != wantOK {
			t.Errorf("%s: %v, want ok %v", u, err, wantOK)
		}
	}
	if err := auth.CheckJWKSURL("http://id.example.com/jwks", false); err != nil {
		t.Errorf("http without requireHTTPS: %v", err)
	}
	secretURL := "http://svc:hunter2-pass@id.example.com/jwks?api_key=k3y-s3cret"
	err := auth.CheckJWKSURL(secretURL, true)
	if err == nil || strings.Contains(err.Error(), "hunter2") || strings.Contains(err.Error(), "k3y-s3cret") || strings.Contains(err.Error(), "svc") {
		t.Errorf("error %v shows the URL's credentials or query", err)
	}
	if got := auth.RedactURL(secretURL); got != "http://xxxxx@id.example.com/jwks?xxxxx" {
		t.Errorf("RedactURL: %s", got)
	}
	// An unreachable URL with credentials: New's error shows neither.
	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close()
	u := strings.Replace(dead.URL, "http://", "http://svc:hunter2-pass@", 1) + "/jwks?api_key=k3y-s3cret"
	_, err = auth.New(context.Background(), auth.Options{Providers: []auth.Provider{{Issuer: testIssuer, JWKSURL: u}}, Subjects: &subjects{}, JWKSWait: time.Second})
	if err == nil || strings.Contains(err.Error(), "hunter2") || strings.Contains(err.Error(), "k3y-s3cret") {
		t.Errorf("New's error %v shows the URL's credentials or query", err)
	}
}

// The https rule holds on every redirect hop (RequireHTTPS): a loopback
// JWKS answering 302 to plain http on another host is not followed, so the
// keys served there are never trusted (before, they were fetched and
// verified tokens); without RequireHTTPS the redirect is followed.
func TestJWKSRedirectToPlainHTTPRefused(t *testing.T) {
	rk := rsaKey(t)
	evil := newIDP(t, publicKey{kid: "rsa-1", key: &rk.PublicKey, alg: "RS256"})
	hop := httptest.NewServer(http.RedirectHandler("http://keys.shop.example/certs", http.StatusFound))
	t.Cleanup(hop.Close)
	// keys.shop.example is served by evil: a client that follows the
	// redirect gets evil's keys.
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if strings.HasPrefix(addr, "keys.shop.example:") {
				addr = evil.srv.Listener.Addr().String()
			}
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		}}}
	prov := []auth.Provider{{Issuer: testIssuer, JWKSURL: hop.URL + "/certs"}}
	_, err := auth.New(context.Background(), auth.Options{Providers: prov, Subjects: &subjects{}, RequireHTTPS: true,
		HTTPClient: hc, JWKSWait: 3 * time.Second})
	if err == nil || evil.fetches.Load() != 0 {
		t.Fatalf("a redirect to plain http off loopback was followed (%d fetches there, err %v)", evil.fetches.Load(), err)
	}
	v := newVerifier(t, nil, auth.Options{Providers: prov, HTTPClient: hc})
	if _, err := v.Verify(sign(t, jwt.SigningMethodRS256, "rsa-1", rk, nil)); err != nil {
		t.Fatalf("without RequireHTTPS the redirect is followed: %v", err)
	}
}

// An identity provider's token lives at most Options.MaxProviderTokenTTL
// from now (default auth.DefaultMaxProviderTokenTTL, 24 h): one signed for
// a year is refused (before, any exp was accepted); the cap is configurable.
func TestProviderTokenLifetimeCapped(t *testing.T) {
	rk := rsaKey(t)
	p := newIDP(t, publicKey{kid: "rsa-1", key: &rk.PublicKey, alg: "RS256"})
	tok := func(d time.Duration) string {
		return sign(t, jwt.SigningMethodRS256, "rsa-1", rk, jwt.MapClaims{"exp": time.Now().Add(d).Unix()})
	}
	v := newVerifier(t, p, auth.Options{})
	for d, ok := range map[time.Duration]bool{time.Hour: true, 23 * time.Hour: true, 49 * time.Hour: false, 365 * 24 * time.Hour: false} {
		if _, err := v.Verify(tok(d)); (err == nil) != ok {
			t.Errorf("a token living %v: %v, want accepted %v", d, err, ok)
		}
	}
	long := newVerifier(t, p, auth.Options{MaxProviderTokenTTL: 72 * time.Hour})
	if _, err := long.Verify(tok(49 * time.Hour)); err != nil {
		t.Errorf("49 h under a 72 h cap: %v", err)
	}
	if _, err := long.Verify(tok(73 * time.Hour)); !errors.Is(err, auth.ErrUnauthenticated) {
		t.Errorf("73 h under a 72 h cap: %v", err)
	}
}
