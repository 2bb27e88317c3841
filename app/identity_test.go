package app

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// Issue 26: identity settings, secrets, pprof and -h.

const kcJWKS = "https://id.shop.example/realms/buyers/protocol/openid-connect/certs"

// parseProd parses serve's settings in production mode with the good
// secrets unless env overrides them.
func parseProd(t *testing.T, env map[string]string, args ...string) (*Config, error) {
	t.Helper()
	unsetMode(t)
	t.Setenv("STAMPEDE_JWT_SECRET", goodJWT)
	t.Setenv("STAMPEDE_PAYMENT_SECRET", goodPay)
	for k, v := range env {
		t.Setenv(k, v)
	}
	return parse("serve", args, nil)
}

func wantErr(t *testing.T, err error, want string) {
	t.Helper()
	switch {
	case want == "" && err != nil:
		t.Fatalf("refused: %v", err)
	case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
		t.Fatalf("error %v, want one containing %q", err, want)
	}
}

// TestJWKSOnlyProduction: with an identity provider HS256 is off unless
// enabled (the JWT secret is then not needed); enabled, it needs the secret
// and its own issuer; without a provider HS256 stays the default.
func TestJWKSOnlyProduction(t *testing.T) {
	idp := []string{"--jwt-jwks-url", kcJWKS, "--jwt-issuer", "https://id.shop.example/realms/buyers", "--jwt-audience", "stampede"}
	cfg, err := parseProd(t, map[string]string{"STAMPEDE_JWT_SECRET": ""}, idp...)
	wantErr(t, err, "")
	if cfg.JWTHS256 || cfg.verifierOptions().Secret != nil {
		t.Fatalf("HS256 on with a JWKS and no STAMPEDE_JWT_HS256: %+v", cfg.verifierOptions())
	}
	_, err = parseProd(t, map[string]string{"STAMPEDE_JWT_SECRET": ""}, append(idp, "--jwt-hs256")...)
	wantErr(t, err, "STAMPEDE_JWT_SECRET is not set")
	cfg, err = parseProd(t, nil, append(idp, "--jwt-hs256")...)
	wantErr(t, err, "")
	if o := cfg.verifierOptions(); string(o.Secret) != goodJWT || o.HS256Issuer != "stampede" || o.HS256Audience != "stampede" || !o.RequireHTTPS {
		t.Fatalf("HS256 enabled: %+v", o)
	}
	_, err = parseProd(t, nil, append(idp, "--jwt-hs256", "--jwt-hs256-issuer", "https://id.shop.example/realms/buyers")...)
	wantErr(t, err, "is also STAMPEDE_JWT_HS256_ISSUER")
	cfg, err = parseProd(t, nil)
	wantErr(t, err, "")
	if !cfg.JWTHS256 {
		t.Fatal("HS256 off without an identity provider")
	}
	_, err = parseProd(t, nil, "--jwt-hs256=false")
	wantErr(t, err, "no token would be accepted")

	// `stampede token` refuses to mint what no gateway accepts.
	t.Setenv("STAMPEDE_JWT_JWKS_URL", kcJWKS)
	t.Setenv("STAMPEDE_JWT_ISSUER", "https://id.shop.example/realms/buyers")
	t.Setenv("STAMPEDE_JWT_AUDIENCE", "stampede")
	if err := run(context.Background(), []string{"token", "--user", "5"}, &bytes.Buffer{}); !errors.Is(err, errUsage) || !strings.Contains(err.Error(), "HS256 tokens are off") {
		t.Fatalf("token with HS256 off: %v", err)
	}
}

// TestJWKSURLRules: production needs https (plain http only on loopback),
// one issuer per key set, distinct issuers; development accepts http.
func TestJWKSURLRules(t *testing.T) {
	with := func(urls, issuers string) []string {
		return []string{"--jwt-jwks-url", urls, "--jwt-issuer", issuers, "--jwt-audience", "stampede"}
	}
	for _, c := range []struct {
		name, urls, issuers, want string
	}{
		{"https", kcJWKS, "https://a/", ""},
		{"plain http", "http://id.shop.example/certs", "https://a/", "production mode needs https"},
		{"plain http on loopback", "http://127.0.0.1:8443/certs", "https://a/", ""},
		{"not http", "file:///etc/keys", "https://a/", "not an http(s) URL"},
		{"two providers", kcJWKS + "," + strings.Replace(kcJWKS, "buyers", "staff", 1), "https://a/,https://b/", ""},
		{"an issuer short", kcJWKS + "," + kcJWKS, "https://a/", "give one issuer per key set"},
		{"an issuer twice", kcJWKS + "," + kcJWKS, "https://a/,https://a/", "lists \"https://a/\" twice"},
		{"issuer without JWKS", "", "https://a/", "without STAMPEDE_JWT_JWKS_URL"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := parseProd(t, nil, with(c.urls, c.issuers)...)
			wantErr(t, err, c.want)
		})
	}
	t.Setenv("STAMPEDE_MODE", "development")
	if _, err := parse("serve", with("http://id.dev.example/certs", "https://a/"), nil); err != nil {
		t.Fatalf("development with plain http: %v", err)
	}
}

// TestWeakSecretsRefused: production refuses secrets that are obviously
// low in entropy and the JWT secret equal to the payment secret (both
// accepted before issue 26).
func TestWeakSecretsRefused(t *testing.T) {
	for _, c := range []struct {
		name, jwt, pay, want string
	}{
		{"32 × a", strings.Repeat("a", 32), goodPay, "STAMPEDE_JWT_SECRET has only 1 distinct characters"},
		{"a pattern", strings.Repeat("0123456789abcdef", 2), goodPay, "STAMPEDE_JWT_SECRET repeats a pattern of 16"},
		{"few characters", "aabbccddaabbccddabcdabcdabcdabcddcba", goodPay, "distinct characters"},
		{"low payment", goodJWT, strings.Repeat("xy", 20), "STAMPEDE_PAYMENT_SECRET"},
		{"the same twice", goodJWT, goodJWT, "are the same"},
		{"openssl rand -hex 16", "3f9a1c07e2b84d5a9c16f0e7b2d4a8c3", goodPay, ""},
		{"openssl rand -hex 32", "9d41e7a2c35b80f6e1d27c94a0b3f58e6c21d7a49be03f5182c6d9e7a4b01f3c", goodPay, ""},
		{"openssl rand -base64 32", "q3Zb9Xw1Kf0sT7yLm2Hc8Vn4Rj6Pd5Ue0GaQoIxWt8E=", goodPay, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := parseProd(t, map[string]string{"STAMPEDE_JWT_SECRET": c.jwt, "STAMPEDE_PAYMENT_SECRET": c.pay})
			wantErr(t, err, c.want)
		})
	}
}

// TestPowSecretChecked: production checks STAMPEDE_POW_SECRET as it checks
// the other secrets (a one-byte secret started before) and refuses it equal
// to the payment or JWT secret; unset, the key is derived from the payment
// secret (also in a JWKS-only deployment, which has no JWT secret).
func TestPowSecretChecked(t *testing.T) {
	idp := []string{"--jwt-jwks-url", kcJWKS, "--jwt-issuer", "https://id.shop.example/realms/buyers", "--jwt-audience", "stampede"}
	for _, c := range []struct {
		name, pow, want string
		args            []string
	}{
		{"one byte", "x", "STAMPEDE_POW_SECRET is 1 bytes", nil},
		{"a pattern", strings.Repeat("0123456789abcdef", 2), "STAMPEDE_POW_SECRET repeats a pattern", nil},
		{"the payment secret", goodPay, "STAMPEDE_POW_SECRET is the payment or the JWT secret", nil},
		{"the JWT secret", goodJWT, "STAMPEDE_POW_SECRET is the payment or the JWT secret", nil},
		{"its own", "5e0c9a1f7d3b2846ae91c0d7f3b5a2e8c4d6f1a0", "", nil},
		{"unset", "", "", nil},
		{"unset, JWKS only", "", "", idp},
	} {
		t.Run(c.name, func(t *testing.T) {
			env := map[string]string{"STAMPEDE_POW_SECRET": c.pow}
			if c.args != nil {
				env["STAMPEDE_JWT_SECRET"] = ""
			}
			_, err := parseProd(t, env, c.args...)
			wantErr(t, err, c.want)
		})
	}
}

// TestPprofOffLoopbackRefused: production refuses a pprof listener beyond
// loopback (it only warned, and /debug/pprof/cmdline then served the whole
// command line, secrets given as flags included); no mode serves cmdline.
func TestPprofOffLoopbackRefused(t *testing.T) {
	for addr, want := range map[string]string{
		"0.0.0.0:6060": "STAMPEDE_PPROF_ADDR 0.0.0.0:6060 is not a loopback address", "[::]:6060": "not a loopback address",
		"10.1.2.3:6060": "not a loopback address", "127.0.0.1:6060": "", "localhost:6060": "", "[::1]:6060": "",
	} {
		_, err := parseProd(t, nil, "--pprof-addr", addr)
		wantErr(t, err, want)
	}
	t.Setenv("STAMPEDE_MODE", "development")
	if _, err := parse("serve", []string{"--pprof-addr", "0.0.0.0:6060"}, nil); err != nil {
		t.Fatalf("development: %v", err)
	}
	srv := httptest.NewServer(pprofMux())
	defer srv.Close()
	for path, status := range map[string]int{"/debug/pprof/": 200, "/debug/pprof/cmdline": 404, "/debug/pprof/heap?debug=1": 200} {
		res, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != status {
			t.Errorf("GET %s: %d, want %d", path, res.StatusCode, status)
		}
	}
}

// TestHelpMasksJWKSURL: -h shows a JWKS URL without its credentials and
// query (an API key may sit in either).
func TestHelpMasksJWKSURL(t *testing.T) {
	t.Setenv("STAMPEDE_JWT_JWKS_URL", "https://svc:hunter2-jwks@id.shop.example/certs?api_key=k3y-from-the-query,https://id2.shop.example/certs")
	t.Setenv("STAMPEDE_REDIS_PASSWORD", "redis-pass-nobody-may-see")
	for _, cmd := range []string{"serve", "token"} {
		var cfg Config
		var errs []error
		fs := newFlagSet(cmd, &cfg, &errs, nil)
		var out bytes.Buffer
		fs.SetOutput(&out)
		if err := fs.Parse([]string{"-h"}); !errors.Is(err, flag.ErrHelp) {
			t.Fatal(err)
		}
		help := out.String()
		for _, secret := range []string{"hunter2", "svc:", "k3y-from-the-query", "redis-pass-nobody"} {
			if strings.Contains(help, secret) {
				t.Errorf("%s -h shows %q", cmd, secret)
			}
		}
		if !strings.Contains(help, "id.shop.example/certs") || !strings.Contains(help, "id2.shop.example/certs") {
			t.Errorf("%s -h lost the JWKS URLs' hosts and paths:\n%s", cmd, help)
		}
	}
}
