package auth_test

import (
	"encoding/json"
	"errors"
	"strconv"
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

// The canonical-header path (hs256_verify.go) reads the claims itself; it
// must accept exactly what golang-jwt's parser accepts and read the same
// caller out of it. Each claim set is signed twice with the same secret:
// with the canonical header (the fast path) and with a kid added to the
// header (the parser's path); the two verdicts and claims must be equal, and
// the expected verdict is asserted too so that both cannot be wrong alike.
func TestHS256CanonicalPathAgreesWithParser(t *testing.T) {
	secret := []byte("0123456789abcdef0123456789abcdef")
	now := time.Now()
	exp := now.Add(time.Hour).Unix()
	plain := auth.NewVerifierCache(secret, auth.CacheOptions{Size: -1})
	grouped, err := auth.New(t.Context(), auth.Options{Secret: secret, AdminGroup: "ops", GroupsClaim: "roles", Cache: auth.CacheOptions{Size: -1}})
	if err != nil {
		t.Fatal(err)
	}
	base := func(extra map[string]any) jwt.MapClaims {
		c := jwt.MapClaims{"sub": "42", "iss": "stampede", "aud": "stampede", "exp": exp}
		for k, val := range extra {
			if val == nil {
				delete(c, k)
			} else {
				c[k] = val
			}
		}
		return c
	}
	type want struct {
		ok, admin bool
	}
	cases := []struct {
		name    string
		v       *auth.Verifier
		claims  jwt.MapClaims
		want    want
		payload string // raw claims JSON instead of claims
	}{
		{name: "good", v: plain, claims: base(nil), want: want{ok: true}},
		{name: "fractional exp", v: plain, claims: base(map[string]any{"exp": float64(exp) + 0.75}), want: want{ok: true}},
		{name: "aud list", v: plain, claims: base(map[string]any{"aud": []any{"other", "stampede"}}), want: want{ok: true}},
		{name: "aud list without us", v: plain, claims: base(map[string]any{"aud": []any{"other"}})},
		{name: "aud list with a number", v: plain, claims: base(map[string]any{"aud": []any{"stampede", 7}})},
		{name: "aud number", v: plain, claims: base(map[string]any{"aud": 7})},
		{name: "aud null", v: plain, payload: `{"sub":"42","iss":"stampede","aud":null,"exp":` + jsonInt(exp) + `}`},
		{name: "no aud", v: plain, claims: base(map[string]any{"aud": nil})},
		{name: "iss number", v: plain, claims: base(map[string]any{"iss": 1})},
		{name: "no iss", v: plain, claims: base(map[string]any{"iss": nil})},
		{name: "exp string", v: plain, claims: base(map[string]any{"exp": "9999999999"})},
		{name: "exp null", v: plain, payload: `{"sub":"42","iss":"stampede","aud":"stampede","exp":null}`},
		{name: "expired", v: plain, claims: base(map[string]any{"exp": now.Add(-time.Minute).Unix()})},
		{name: "expired within leeway", v: plain, claims: base(map[string]any{"exp": now.Add(-2 * time.Second).Unix()}), want: want{ok: true}},
		{name: "nbf past", v: plain, claims: base(map[string]any{"nbf": now.Add(-time.Minute).Unix()}), want: want{ok: true}},
		{name: "nbf future", v: plain, claims: base(map[string]any{"nbf": now.Add(time.Minute).Unix()})},
		{name: "nbf string", v: plain, claims: base(map[string]any{"nbf": "0"})},
		{name: "sub number", v: plain, claims: base(map[string]any{"sub": 42})},
		{name: "sub not canonical", v: plain, claims: base(map[string]any{"sub": "+42"})},
		{name: "no sub", v: plain, claims: base(map[string]any{"sub": nil})},
		{name: "lives too long", v: plain, claims: base(map[string]any{"exp": now.Add(25 * time.Hour).Unix()})},
		{name: "admin by role", v: plain, claims: base(map[string]any{"role": "admin", "exp": now.Add(30 * time.Minute).Unix()}), want: want{ok: true, admin: true}},
		{name: "admin lives too long", v: plain, claims: base(map[string]any{"role": "admin", "exp": now.Add(2 * time.Hour).Unix()})},
		{name: "role not a string", v: plain, claims: base(map[string]any{"role": []any{"admin"}}), want: want{ok: true}},
		{name: "group list", v: grouped, claims: base(map[string]any{"roles": []any{"x", "ops"}, "exp": now.Add(30 * time.Minute).Unix()}), want: want{ok: true, admin: true}},
		{name: "group string", v: grouped, claims: base(map[string]any{"roles": "ops", "exp": now.Add(30 * time.Minute).Unix()}), want: want{ok: true, admin: true}},
		{name: "role without group", v: grouped, claims: base(map[string]any{"role": "admin"}), want: want{ok: true}},
		{name: "other group", v: grouped, claims: base(map[string]any{"roles": []any{"opsx"}}), want: want{ok: true}},
		{name: "claims an array", v: plain, payload: `["sub","42"]`},
		// Found by an outside review (fuzzed and crafted claims): claims a
		// strict JSON decoder reads otherwise than fastjson, which the fast
		// path now leaves to the parser.
		{name: "sub twice", v: plain, payload: `{"sub":"42","sub":"43","iss":"stampede","aud":"stampede","exp":` + jsonInt(exp) + `}`, want: want{ok: true}},
		{name: "sub twice, one escaped", v: plain, payload: `{"s\u0075b":"41","sub":"42","iss":"stampede","aud":"stampede","exp":` + jsonInt(exp) + `}`, want: want{ok: true}},
		{name: "role twice", v: plain, payload: `{"sub":"42","iss":"stampede","aud":"stampede","role":"admin","role":"user","exp":` + jsonInt(now.Add(30*time.Minute).Unix()) + `}`, want: want{ok: true}},
		{name: "exp twice, the last past", v: plain, payload: `{"sub":"42","iss":"stampede","aud":"stampede","exp":` + jsonInt(exp) + `,"exp":` + jsonInt(now.Add(-time.Hour).Unix()) + `}`},
		{name: "groups twice", v: grouped, payload: `{"sub":"42","iss":"stampede","aud":"stampede","roles":["ops"],"roles":[],"exp":` + jsonInt(now.Add(30*time.Minute).Unix()) + `}`, want: want{ok: true}},
		{name: "nbf NaN", v: plain, payload: `{"sub":"42","iss":"stampede","aud":"stampede","nbf":NaN,"exp":` + jsonInt(exp) + `}`},
		{name: "nbf out of range", v: plain, payload: `{"sub":"42","iss":"stampede","aud":"stampede","nbf":-1e400,"exp":` + jsonInt(exp) + `}`},
		{name: "exp with a leading zero", v: plain, payload: `{"sub":"42","iss":"stampede","aud":"stampede","exp":0` + jsonInt(exp) + `}`},
		{name: "exp ending in a dot", v: plain, payload: `{"sub":"42","iss":"stampede","aud":"stampede","exp":` + jsonInt(exp) + `.}`},
		{name: "exp with a long mantissa", v: plain, payload: `{"sub":"42","iss":"stampede","aud":"stampede","exp":` + jsonInt(exp) + `99999988e-8}`, want: want{ok: true}},
		{name: "a string escape JSON does not have", v: plain, payload: `{"sub":"42","iss":"stampede","aud":"stampede","x":"\q","exp":` + jsonInt(exp) + `}`},
		{name: "claims not JSON", v: plain, payload: `{"sub":"42",`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			payload := tc.payload
			if payload == "" {
				b, err := json.Marshal(tc.claims)
				if err != nil {
					t.Fatal(err)
				}
				payload = string(b)
			}
			canonical := signRaw(t, secret, `{"alg":"HS256","typ":"JWT"}`, payload)
			other := signRaw(t, secret, `{"alg":"HS256","kid":"k","typ":"JWT"}`, payload)
			if !strings.HasPrefix(canonical, "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.") {
				t.Fatalf("not the canonical header: %s", canonical)
			}
			fast, fastErr := tc.v.Verify(canonical)
			full, fullErr := tc.v.Verify(other)
			if (fastErr == nil) != (fullErr == nil) {
				t.Fatalf("canonical path err %v, parser err %v", fastErr, fullErr)
			}
			if got := (want{ok: fastErr == nil, admin: fast.Admin}); got != tc.want {
				t.Fatalf("got %+v (err %v), want %+v", got, fastErr, tc.want)
			}
			if fastErr == nil && (fast.UserID != full.UserID || fast.Admin != full.Admin || fast.Issuer != full.Issuer ||
				fast.Subject != full.Subject || !fast.Expires.Equal(full.Expires)) {
				t.Fatalf("canonical path %+v, parser %+v", fast, full)
			}
			if fastErr != nil && !errors.Is(fastErr, auth.ErrUnauthenticated) {
				t.Fatalf("err %v is not ErrUnauthenticated", fastErr)
			}
		})
	}
	// A canonical token signed with another secret, cut short, or with its
	// signature moved into a fourth segment is refused.
	good := signRaw(t, secret, `{"alg":"HS256","typ":"JWT"}`, `{"sub":"42","iss":"stampede","aud":"stampede","exp":`+jsonInt(exp)+`}`)
	wrong := signRaw(t, []byte("another secret, just as long....."), `{"alg":"HS256","typ":"JWT"}`, `{"sub":"42","iss":"stampede","aud":"stampede","exp":`+jsonInt(exp)+`}`)
	i := strings.LastIndexByte(good, '.')
	for name, bad := range map[string]string{
		"other secret":    wrong,
		"no signature":    good[:i],
		"short signature": good[:len(good)-2],
		"extra segment":   good[:i] + ".x" + good[i:],
		"header only":     "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.",
	} {
		if _, err := plain.Verify(bad); !errors.Is(err, auth.ErrUnauthenticated) {
			t.Errorf("%s: accepted (err %v)", name, err)
		}
	}
}

// signRaw signs header.payload (both JSON texts, base64url-encoded here)
// with HS256 through golang-jwt's signing method.
func signRaw(t *testing.T, secret []byte, header, payload string) string {
	t.Helper()
	in := jwtSegment(header) + "." + jwtSegment(payload)
	sig, err := jwt.SigningMethodHS256.Sign(in, secret)
	if err != nil {
		t.Fatal(err)
	}
	return in + "." + jwtSegment(string(sig))
}

func jsonInt(n int64) string { return strconv.FormatInt(n, 10) }

// NumericDates out of range (beyond year 9999, or before year 1) are
// refused, on both HS256 paths and for provider tokens: nbf 1e300 was
// accepted before (float64 → int64 overflowed to a date far in the past).
func TestOutOfRangeNumericDatesRefused(t *testing.T) {
	secret := []byte("0123456789abcdef0123456789abcdef")
	rk := rsaKey(t)
	p := newIDP(t, publicKey{kid: "rsa-1", key: &rk.PublicKey, alg: "RS256"})
	v := newVerifier(t, p, auth.Options{Secret: secret})
	exp := time.Now().Add(time.Hour).Unix()
	for _, c := range []jwt.MapClaims{
		{"nbf": 1e300}, {"nbf": -1e300}, {"nbf": 9.3e18}, {"iat": 1e300}, {"iat": -1e300}, {"exp": 1e300},
		{"nbf": 253402300800.0}, // 10000-01-01
	} {
		hs := jwt.MapClaims{"sub": "42", "exp": exp}
		for k, x := range c {
			hs[k] = x
		}
		for path, tok := range map[string]string{
			"HS256":            hsToken(t, secret, hs),
			"HS256 (parser)":   sign(t, jwt.SigningMethodHS256, "k", secret, jwt.MapClaims{"iss": auth.DefaultHS256Issuer, "aud": auth.DefaultHS256Audience, "nbf": hs["nbf"], "iat": hs["iat"], "exp": hs["exp"]}),
			"RS256 (provider)": sign(t, jwt.SigningMethodRS256, "rsa-1", rk, c),
		} {
			if got, err := v.Verify(tok); !errors.Is(err, auth.ErrUnauthenticated) {
				t.Errorf("%s with %v: accepted as %+v (%v)", path, c, got, err)
			}
		}
	}
	if _, err := v.Verify(hsToken(t, secret, jwt.MapClaims{"sub": "42", "exp": exp, "nbf": 1e9, "iat": 1.7e9})); err != nil {
		t.Fatalf("dates in range: %v", err)
	}
}
