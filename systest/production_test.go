package systest

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
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/golang-jwt/jwt/v5"

	"github.com/stampede-sh/stampede/auth"
	"github.com/stampede-sh/stampede/gateway"
	"github.com/stampede-sh/stampede/order"
)

// Secrets of the production-mode tests: long enough, not the built-in keys.
const (
	prodJWTSecret = "systest-production-jwt-secret-0123456789abcdef"
	prodPaySecret = "systest-production-payment-secret-0123456789ab"
)

// cleanEnv is the test process's environment without STAMPEDE_ variables,
// so a child's mode and secrets come from its flags only.
func cleanEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "STAMPEDE_") {
			out = append(out, kv)
		}
	}
	return out
}

// TestProductionRefusesUnsafeStart: `stampede serve` without a mode is in
// production mode and refuses to start with a missing, built-in or short
// secret, or with the demo login, naming the setting; development logs one
// warning line.
func TestProductionRefusesUnsafeStart(t *testing.T) {
	if testing.Short() {
		t.Skip("system test")
	}
	bin := binary(t)
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"no secrets (default mode)", nil, "STAMPEDE_JWT_SECRET is not set"},
		{"no payment secret", []string{"--jwt-secret", prodJWTSecret}, "STAMPEDE_PAYMENT_SECRET is not set"},
		{"built-in JWT key", []string{"--jwt-secret", "stampede-dev-jwt-secret-change-me", "--payment-secret", prodPaySecret},
			"STAMPEDE_JWT_SECRET is the built-in development key"},
		{"built-in payment key", []string{"--jwt-secret", prodJWTSecret, "--payment-secret", "stampede-dev-payment-secret-change-me"},
			"STAMPEDE_PAYMENT_SECRET is the built-in development key"},
		{"short JWT secret", []string{"--jwt-secret", "too-short-0123456789", "--payment-secret", prodPaySecret},
			"STAMPEDE_JWT_SECRET is 20 bytes: production mode needs at least 32"},
		{"short payment secret", []string{"--jwt-secret", prodJWTSecret, "--payment-secret", "0123456789abcdef0123456789abcde"},
			"STAMPEDE_PAYMENT_SECRET is 31 bytes: production mode needs at least 32"},
		{"demo login", []string{"--jwt-secret", prodJWTSecret, "--payment-secret", prodPaySecret, "--demo-login"},
			"STAMPEDE_DEMO_LOGIN"},
		// Issue 26: pprof beyond loopback (its cmdline served every flag).
		{"pprof on 0.0.0.0", []string{"--jwt-secret", prodJWTSecret, "--payment-secret", prodPaySecret, "--pprof-addr", "0.0.0.0:6060"},
			"STAMPEDE_PPROF_ADDR 0.0.0.0:6060 is not a loopback address"},
		{"weak JWT secret", []string{"--jwt-secret", strings.Repeat("a", 32), "--payment-secret", prodPaySecret},
			"STAMPEDE_JWT_SECRET has only 1 distinct characters"},
		{"one secret twice", []string{"--jwt-secret", prodPaySecret, "--payment-secret", prodPaySecret}, "are the same"},
		{"plain-http JWKS", []string{"--payment-secret", prodPaySecret, "--jwt-jwks-url", "http://id.shop.example/certs",
			"--jwt-issuer", "https://id.shop.example/", "--jwt-audience", "stampede"}, "production mode needs https"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cmd := exec.Command(bin, append([]string{"serve", "--http-addr", freeAddr(t)}, c.args...)...)
			cmd.Env = cleanEnv()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			done := make(chan struct{})
			var out []byte
			var err error
			go func() { out, err = cmd.CombinedOutput(); close(done) }()
			select {
			case <-done:
			case <-ctx.Done():
				cmd.Process.Kill()
				<-done
				t.Fatalf("still running after 20s: it started\n%s", out)
			}
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() == 0 {
				t.Fatalf("exit %v, want a refused start\n%s", err, out)
			}
			if !strings.Contains(string(out), c.want) || !strings.Contains(string(out), "invalid config") {
				t.Fatalf("output lacks %q:\n%s", c.want, out)
			}
		})
	}
	t.Run("development warns once", func(t *testing.T) {
		// A MySQL that refuses at once: the process logs its warning, then
		// fails to connect.
		cmd := exec.Command(bin, "serve", "--mode", "development", "--mysql-dsn", "root@tcp("+freeAddr(t)+")/x?timeout=1s")
		cmd.Env = cleanEnv()
		out, _ := cmd.CombinedOutput()
		if n := strings.Count(string(out), "DEVELOPMENT MODE"); n != 1 || !strings.Contains(string(out), "demo checkout") {
			t.Fatalf("%d development warnings, want 1:\n%s", n, out)
		}
	})
}

// prodBuyer is one buyer of the production test: a provider's subject.
type prodBuyer struct {
	realm *realm
	kid   string
	key   any
	m     jwt.SigningMethod
	sub   string
}

// TestProductionMode runs the real binary in production mode configured
// with README.md's identity example verbatim (two Keycloak realms served
// over https, see idp_test.go) and checks issues 12 and 26 against it: UUID
// subjects of two issuers buy, replay on a second gateway and follow their
// orders over push; admins come from the group only; HS256 is off, and on a
// gateway that enables it is held to its issuer and audience; a socket
// closes with 4401 when its token expires; support finds orders by subject;
// a refund, a waiting-room change and a dead-letter replay are audited; a
// JWT split across fasthttp's 200-byte log tail leaves no piece in the log;
// then a sale that must pass the SPEC §5 audit.
func TestProductionMode(t *testing.T) {
	e := newEnvFor(t, "production")
	lines := readmeIdentity(t)
	idp := newTLSIdP(t, lines)
	buyers, staff := idp.realms[0], idp.realms[1]
	rsa1, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	ec1, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	staffKey, _ := rsa.GenerateKey(rand.Reader, 2048)
	buyers.publish(t, map[string]any{"rsa-1": &rsa1.PublicKey, "ec-1": &ec1.PublicKey})
	staff.publish(t, map[string]any{"staff-1": &staffKey.PublicKey})
	e.procEnv = idp.env

	pushAddr := freeAddr(t)
	p := e.serve("prod", "gateway,writer,relay,consumer,sweeper,push",
		"--mode", "production", "--jwt-secret", prodJWTSecret, "--payment-secret", prodPaySecret,
		"--push-addr", pushAddr, "--push-max-sockets", "2", "--static-dir", "../client/dist", "--log-level", "info")
	e.waitReady(30 * time.Second)
	if lines := p.logLines("DEVELOPMENT MODE"); len(lines) != 0 {
		t.Errorf("production logged %q", lines)
	}
	if idp.connects.Load() == 0 || idp.fetches.Load() < 2 {
		t.Fatalf("the binary fetched the key sets %d times over %d CONNECT tunnels", idp.fetches.Load(), idp.connects.Load())
	}
	// A second gateway: replays land there.
	gw2 := freeAddr(t)
	e.serveAt("prod-gw2", "gateway", gw2, "--mode", "production", "--payment-secret", prodPaySecret, "--log-level", "info")
	base2 := "http://" + gw2
	e.waitReadyAt(base2, 30*time.Second)

	// Admins come from the admin group of the staff realm; role: admin in a
	// token counts for nothing once a group is configured.
	const adminSub = "7c9e6679-7425-40de-944b-e07fc1f90ae7"
	adminToken := func() string {
		return idp.token(t, staff, jwt.SigningMethodRS256, "staff-1", staffKey, adminSub, time.Hour, jwt.MapClaims{"groups": []string{idp.group}})
	}
	e.admin = adminToken()
	if a, _ := e.call("GET", "/api/admin/reconcile", e.admin, nil); a.status != 200 {
		t.Fatalf("staff admin (group claim): %d %s", a.status, a.raw)
	}
	roleAdmin := idp.token(t, buyers, jwt.SigningMethodRS256, "rsa-1", rsa1, uuid(2), time.Hour, jwt.MapClaims{"role": "admin"})
	if a, _ := e.call("GET", "/api/admin/reconcile", roleAdmin, nil); a.status != 403 {
		t.Fatalf("role: admin without the group: %d %s, want 403", a.status, a.raw)
	}

	t.Run("no demo login", func(t *testing.T) {
		a, err := e.call("POST", "/api/auth/login", "", map[string]any{"userId": 1})
		if err != nil || a.status != 404 {
			t.Fatalf("POST /api/auth/login: %d %s %v, want 404", a.status, a.raw, err)
		}
	})

	t.Run("tokens", func(t *testing.T) {
		pubDER, _ := x509.MarshalPKIXPublicKey(&rsa1.PublicKey)
		hsGood, _ := auth.Issue([]byte(prodJWTSecret), 5, false, time.Hour)
		none := func() string {
			tok := jwt.NewWithClaims(jwt.SigningMethodNone, jwt.MapClaims{"sub": "5", "exp": time.Now().Add(time.Hour).Unix(), "role": "admin"})
			s, _ := tok.SignedString(jwt.UnsafeAllowNoneSignatureType)
			return s
		}()
		crit := func() string {
			tok := jwt.NewWithClaims(jwt.SigningMethodRS256, jwt.MapClaims{"iss": buyers.issuer, "aud": idp.audience, "sub": uuid(5),
				"exp": time.Now().Add(time.Hour).Unix()})
			tok.Header["kid"], tok.Header["crit"] = "rsa-1", []string{"x-unknown"}
			s, _ := tok.SignedString(rsa1)
			return s
		}()
		tok := func(r *realm, m jwt.SigningMethod, kid string, key any, extra jwt.MapClaims) string {
			return idp.token(t, r, m, kid, key, uuid(5), time.Hour, extra)
		}
		for name, c := range map[string]struct {
			token string
			want  int
		}{
			"RS256 of the buyers realm":                 {tok(buyers, jwt.SigningMethodRS256, "rsa-1", rsa1, nil), 200},
			"ES256 of the buyers realm":                 {tok(buyers, jwt.SigningMethodES256, "ec-1", ec1, nil), 200},
			"RS256 of the staff realm":                  {tok(staff, jwt.SigningMethodRS256, "staff-1", staffKey, nil), 200},
			"HS256 of the shared secret: off":           {hsGood, 401},
			"HS256 keyed with the RSA public key":       {tok(buyers, jwt.SigningMethodHS256, "rsa-1", pubDER, nil), 401},
			"alg none":                                  {none, 401},
			"crit header":                               {crit, 401},
			"expired":                                   {idp.token(t, buyers, jwt.SigningMethodRS256, "rsa-1", rsa1, uuid(5), -time.Hour, nil), 401},
			"wrong audience":                            {tok(buyers, jwt.SigningMethodRS256, "rsa-1", rsa1, jwt.MapClaims{"aud": "other"}), 401},
			"unknown issuer":                            {tok(buyers, jwt.SigningMethodRS256, "rsa-1", rsa1, jwt.MapClaims{"iss": "https://evil.example/"}), 401},
			"a buyers key signing a staff token":        {tok(staff, jwt.SigningMethodRS256, "rsa-1", rsa1, nil), 401},
			"the staff key signing a buyers token":      {tok(buyers, jwt.SigningMethodRS256, "staff-1", staffKey, nil), 401},
			"a subject with a control character":        {tok(buyers, jwt.SigningMethodRS256, "rsa-1", rsa1, jwt.MapClaims{"sub": "a\x07b"}), 401},
			"a numeric subject is a subject, not an id": {tok(buyers, jwt.SigningMethodRS256, "rsa-1", rsa1, jwt.MapClaims{"sub": "+1001"}), 200},
		} {
			if a, _ := e.call("GET", "/api/orders", c.token, nil); a.status != c.want {
				t.Errorf("%s: %d %s, want %d", name, a.status, a.raw, c.want)
			}
		}
		// Key rotation: the buyers realm replaces rsa-1 by rsa-2. A token of
		// the new key is accepted at once (its kid refetches the set), the
		// old key's tokens are refused from then on.
		time.Sleep(6 * time.Second) // the gateway refetches at most every 5s
		rsa2, _ := rsa.GenerateKey(rand.Reader, 2048)
		buyers.publish(t, map[string]any{"rsa-2": &rsa2.PublicKey, "ec-1": &ec1.PublicKey})
		if a, _ := e.call("GET", "/api/orders", idp.token(t, buyers, jwt.SigningMethodRS256, "rsa-2", rsa2, uuid(6), time.Hour, nil), nil); a.status != 200 {
			t.Fatalf("token of the rotated-in key: %d %s", a.status, a.raw)
		}
		if a, _ := e.call("GET", "/api/orders", idp.token(t, buyers, jwt.SigningMethodRS256, "rsa-1", rsa1, uuid(6), time.Hour, nil), nil); a.status != 401 {
			t.Fatalf("token of the rotated-out key: %d %s, want 401", a.status, a.raw)
		}
	})

	t.Run("HS256 where enabled: held to its issuer and audience; the debug log holds no request byte", func(t *testing.T) {
		hsAddr := freeAddr(t)
		hs := e.serveAt("prod-hs256", "gateway", hsAddr, "--mode", "production", "--jwt-secret", prodJWTSecret,
			"--payment-secret", prodPaySecret, "--jwt-hs256", "--log-level", "debug")
		hsBase := "http://" + hsAddr
		e.waitReadyAt(hsBase, 30*time.Second)
		good, _ := auth.Issue([]byte(prodJWTSecret), 5, false, time.Hour)
		hsClaims := func(c jwt.MapClaims) string {
			m := jwt.MapClaims{"sub": "5", "iss": auth.DefaultHS256Issuer, "aud": auth.DefaultHS256Audience, "exp": time.Now().Add(time.Hour).Unix()}
			for k, v := range c {
				if v == nil {
					delete(m, k)
				} else {
					m[k] = v
				}
			}
			s, _ := jwt.NewWithClaims(jwt.SigningMethodHS256, m).SignedString([]byte(prodJWTSecret))
			return s
		}
		for name, c := range map[string]struct {
			token string
			want  int
		}{
			"stampede token's kind":   {good, 200},
			"no audience":             {hsClaims(jwt.MapClaims{"aud": nil}), 401},
			"another audience":        {hsClaims(jwt.MapClaims{"aud": "other"}), 401},
			"another issuer":          {hsClaims(jwt.MapClaims{"iss": "someone"}), 401},
			"a century":               {hsClaims(jwt.MapClaims{"exp": time.Now().Add(876000 * time.Hour).Unix()}), 401},
			"sub not canonical":       {hsClaims(jwt.MapClaims{"sub": "0005"}), 401},
			"the providers' still ok": {idp.token(t, staff, jwt.SigningMethodRS256, "staff-1", staffKey, uuid(5), time.Hour, nil), 200},
		} {
			if a, _ := e.callAt(hsBase, "GET", "/api/orders", c.token, nil); a.status != c.want {
				t.Errorf("%s: %d %s, want %d", name, a.status, a.raw, c.want)
			}
		}
		// A working token, long enough (a big claim) that fasthttp's 200-byte
		// head of the unreadable request holds its start and the tail its
		// end: no 12-byte piece of it may reach the debug log.
		long := hsClaims(jwt.MapClaims{"pad": strings.Repeat("p", 600)})
		if a, _ := e.callAt(hsBase, "GET", "/api/orders", long, nil); a.status != 200 {
			t.Fatalf("the long token does not work: %d %s", a.status, a.raw)
		}
		c, err := net.Dial("tcp", hsAddr)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(c, "GET /api/orders HTTP/1.1\r\nHost: shop\r\nAuthorization: Bearer %s\r\nBroken\r\n\r\n", long)
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		io.ReadAll(c)
		c.Close()
		deadline := time.Now().Add(10 * time.Second)
		for len(hs.logLines("malformed request headers")) == 0 && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		logs := hs.stderr.String()
		if len(hs.logLines("malformed request headers")) == 0 {
			t.Fatalf("no debug line about the malformed request:\n%s", tail(logs, 3000))
		}
		for i := 12; i+12 <= len(long); i++ {
			if strings.Contains(logs, long[i:i+12]) {
				t.Fatalf("a piece of the token (%q at %d) reached the log", long[i:i+12], i)
			}
		}
	})

	t.Run("metrics only on the metrics listener", func(t *testing.T) {
		a, err := e.call("GET", "/metrics", "", nil)
		if err != nil || a.status != 404 || strings.Contains(a.raw, "stampede_") {
			t.Fatalf("GET /metrics on the API port: %d %.200s %v, want 404", a.status, a.raw, err)
		}
		resp, err := http.Get("http://" + p.metricsAddr + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(b), "stampede_http_request_duration_seconds") {
			t.Fatalf("metrics listener: %d %.200s", resp.StatusCode, b)
		}
	})

	t.Run("readyz and config name no internals", func(t *testing.T) {
		a, _ := e.call("GET", "/readyz", "", nil)
		if a.status != 200 || a.raw != `{"status":"ready"}` {
			t.Fatalf("readyz: %d %s", a.status, a.raw)
		}
		req, _ := http.NewRequest("GET", e.base+"/api/config", nil)
		req.Host = "evil.example"
		resp, err := e.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || strings.Contains(string(b), "evil") {
			t.Fatalf("/api/config with Host evil.example: %d %s", resp.StatusCode, b)
		}
	})

	t.Run("client security headers", func(t *testing.T) {
		for _, path := range []string{"/", "/orders/123"} {
			resp, err := e.client.Get(e.base + path)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			h := resp.Header
			csp := h.Get("Content-Security-Policy")
			if resp.StatusCode != 200 || !strings.Contains(string(b), `<div id="app">`) {
				t.Fatalf("GET %s: %d", path, resp.StatusCode)
			}
			for _, want := range []string{"script-src 'self'", "frame-ancestors 'none'", "object-src 'none'", "connect-src 'self' ws://127.0.0.1:"} {
				if !strings.Contains(csp, want) {
					t.Errorf("GET %s: CSP %q lacks %q", path, csp, want)
				}
			}
			if h.Get("X-Content-Type-Options") != "nosniff" || h.Get("Referrer-Policy") == "" {
				t.Errorf("GET %s: headers %v", path, h)
			}
		}
		resp, err := e.client.Get(e.base + "/assets/..%2f..%2f..%2fgo.mod")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if strings.Contains(string(b), "module github.com") {
				t.Fatal("static path traversal served go.mod")
			}
		}
	})

	// The sale: buyers of both realms, UUID subjects (even users in the
	// buyers realm, odd ones in the staff realm), spread over both gateways.
	const stock, sold = 60, 100
	people := map[int64]prodBuyer{}
	var pmu sync.Mutex
	buyerOf := func(user int64) prodBuyer {
		pmu.Lock()
		defer pmu.Unlock()
		if b, ok := people[user]; ok {
			return b
		}
		b := prodBuyer{realm: buyers, kid: "ec-1", key: ec1, m: jwt.SigningMethodES256, sub: uuid(user)}
		if user%2 == 1 {
			b = prodBuyer{realm: staff, kid: "staff-1", key: staffKey, m: jwt.SigningMethodRS256, sub: uuid(user)}
		}
		people[user] = b
		return b
	}
	tokenOf := func(b prodBuyer, ttl time.Duration) string {
		return idp.token(t, b.realm, b.m, b.kid, b.key, b.sub, ttl, nil)
	}
	e.tokenFor = func(user int64) string { return tokenOf(buyerOf(user), time.Hour) }
	e.bases = []string{e.base, base2}
	pid := e.product(stock)
	intents := e.sale(pid, sold, 2_000_000, saleOptions{workers: 8})
	saleEnd := time.Now()
	rep := e.settle(pid, saleEnd, 60*time.Second)
	if got, other := count202(intents); got != stock {
		t.Errorf("%d × 202, want %d (others %v)", got, stock, other)
	}
	// Every answered intent replays on the other gateway, with a fresh token
	// of the same person: the same orderNo.
	bad := 0
	for _, in := range intents {
		if in.orderNo == "" {
			continue
		}
		other := e.bases[(in.user+1)%2]
		a, err := e.callAt(other, "POST", "/api/orders", tokenOf(buyerOf(in.user), time.Hour),
			map[string]any{"productId": pid, "quantity": 1, "requestId": in.requestID})
		if (err != nil || a.status != 200 || a.body["orderNo"] != in.orderNo) && bad < 5 {
			bad++
			t.Errorf("replay of %s on the other gateway: %d %s %v, want 200 %s", buyerOf(in.user).sub, a.status, a.raw, err, in.orderNo)
		}
	}
	// The orders are stored under the internal ids the subjects mapped to,
	// one per (issuer, subject).
	byUser := map[int64]bool{}
	for _, in := range intents {
		b := buyerOf(in.user)
		ids, err := e.store.FindSubject(e.ctx, b.realm.issuer, b.sub)
		if err != nil || len(ids) != 1 || ids[0] < auth.FirstMappedUserID {
			t.Fatalf("%s at %s: mapping %v %v", b.sub, b.realm.issuer, ids, err)
		}
		byUser[ids[0]] = true
		in.user = ids[0] // what checkIntents compares with order_info.user_id
	}
	if len(byUser) != sold {
		t.Errorf("%d internal ids for %d subjects", len(byUser), sold)
	}
	e.checkIntents(pid, intents, rep)

	var paid []*intent
	for _, in := range intents {
		if in.orderNo != "" {
			paid = append(paid, in)
		}
	}
	a, b, c := paid[0], paid[1], paid[2]
	callback := func(no, paymentNo string) answer {
		body := fmt.Sprintf(`{"orderNo":%q,"paymentNo":%q,"amount":1000,"paidAt":%q}`, no, paymentNo, time.Now().UTC().Format(time.RFC3339))
		req, _ := http.NewRequest("POST", e.base+"/api/payments/callback", strings.NewReader(body))
		req.Header.Set(gateway.HeaderSignature, gateway.Sign([]byte(prodPaySecret), []byte(body)))
		resp, err := e.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return answer{status: resp.StatusCode, raw: string(raw)}
	}

	t.Run("no demo checkout; paymentNo reuse is 409", func(t *testing.T) {
		if r, _ := e.call("POST", "/api/orders/"+a.orderNo+"/pay", a.token, nil); r.status != 404 && r.status != 405 {
			t.Fatalf("demo checkout: %d %s, want 404/405", r.status, r.raw)
		}
		if r := callback(a.orderNo, "prov-pay-1"); r.status != 200 {
			t.Fatalf("provider callback: %d %s", r.status, r.raw)
		}
		if r := callback(b.orderNo, "prov-pay-1"); r.status != 409 || !strings.Contains(r.raw, "PAYMENT_NO_REUSED") {
			t.Fatalf("paymentNo reused for another order: %d %s, want 409 PAYMENT_NO_REUSED", r.status, r.raw)
		}
		if r := callback(a.orderNo, "prov-pay-1"); r.status != 200 {
			t.Fatalf("callback replay: %d %s", r.status, r.raw)
		}
		body := `{"orderNo":"` + b.orderNo + `","paymentNo":"forged","amount":1000,"paidAt":"2026-01-01T00:00:00Z"}`
		req, _ := http.NewRequest("POST", e.base+"/api/payments/callback", strings.NewReader(body))
		req.Header.Set(gateway.HeaderSignature, gateway.Sign([]byte("stampede-dev-payment-secret-change-me"), []byte(body)))
		if resp, err := e.client.Do(req); err != nil || resp.StatusCode != 401 {
			t.Fatalf("callback signed with the development key: %v %v, want 401", resp, err)
		} else {
			resp.Body.Close()
		}
		if st := e.orderStatus(b.orderNo); st != order.WaitingPay {
			t.Fatalf("order b is %s, want WAITING_PAY", st)
		}
		if r, _ := e.call("GET", "/api/orders/"+a.orderNo, b.token, nil); r.status != 404 {
			t.Fatalf("another user's order: %d %s, want 404", r.status, r.raw)
		}
	})

	t.Run("support finds orders by the provider's subject", func(t *testing.T) {
		ba := buyerOf(int64(2_000_000 + intentIndex(intents, a)))
		q := url.Values{"subject": {ba.sub}, "issuer": {ba.realm.issuer}}
		r, _ := e.call("GET", "/api/admin/orders?"+q.Encode(), e.admin, nil)
		if r.status != 200 || !strings.Contains(r.raw, a.orderNo) {
			t.Fatalf("search by subject %s: %d %s, want %s", ba.sub, r.status, r.raw, a.orderNo)
		}
		r, _ = e.call("GET", "/api/admin/orders/"+a.orderNo, e.admin, nil)
		if r.body["subject"] != ba.sub || r.body["issuer"] != ba.realm.issuer {
			t.Fatalf("admin order read: %s", r.raw)
		}
	})

	t.Run("a refund, a waiting-room change and a replay are audited", func(t *testing.T) {
		// c cancels, then its payment arrives anyway: REFUND_PENDING.
		if r, _ := e.call("POST", "/api/orders/"+c.orderNo+"/cancel", c.token, nil); r.status != 200 {
			t.Fatalf("cancel: %d %s", r.status, r.raw)
		}
		if r := callback(c.orderNo, "late-c"); r.status != 200 {
			t.Fatalf("late callback: %d %s", r.status, r.raw)
		}
		for _, call := range []struct{ method, path, body string }{
			{"POST", "/api/admin/payments/late-c/refund", `{"refundNo":"RF-late-c"}`},
			{"POST", fmt.Sprintf("/api/admin/products/%d/waiting-room", pid), `{"on":false}`},
			{"POST", "/api/admin/dlq/replay", `{"all":true}`},
		} {
			var body map[string]any
			json.Unmarshal([]byte(call.body), &body)
			if r, _ := e.call(call.method, call.path, adminToken(), body); r.status != 200 {
				t.Fatalf("%s %s: %d %s", call.method, call.path, r.status, r.raw)
			}
		}
		admins, err := e.store.FindSubject(e.ctx, staff.issuer, adminSub)
		if err != nil || len(admins) != 1 {
			t.Fatalf("admin's mapping: %v %v", admins, err)
		}
		r, _ := e.call("GET", "/api/admin/audit?limit=50", e.admin, nil)
		var list struct {
			Entries []struct {
				AdminID      int64  `json:"adminId"`
				AdminIssuer  string `json:"adminIssuer"`
				AdminSubject string `json:"adminSubject"`
				Action       string `json:"action"`
			} `json:"entries"`
		}
		if err := json.Unmarshal([]byte(r.raw), &list); err != nil {
			t.Fatalf("audit: %d %s", r.status, r.raw)
		}
		got := map[string]int{}
		for _, en := range list.Entries {
			if en.AdminID == admins[0] && en.AdminIssuer == staff.issuer && en.AdminSubject == adminSub {
				got[en.Action]++
			}
		}
		for _, action := range []string{"refund", "room", "replay"} {
			if got[action] != 1 {
				t.Errorf("audit entries of %s by the staff admin: %d, want 1 (all: %+v)", action, got[action], list.Entries)
			}
		}
	})

	t.Run("websocket: own snapshots, cap, origin, other users' orders, token expiry", func(t *testing.T) {
		wsURL := "ws://" + pushAddr + "/ws"
		dial := func(tok, origin string) (*websocket.Conn, error) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			h := http.Header{}
			if origin != "" {
				h.Set("Origin", origin)
			}
			ws, _, err := websocket.Dial(ctx, wsURL, &websocket.DialOptions{Subprotocols: []string{"stampede", tok}, HTTPHeader: h})
			return ws, err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := dial(a.token, "http://evil.example"); err == nil || !strings.Contains(err.Error(), "403") {
			t.Fatalf("foreign origin: %v, want 403", err)
		}
		page := "http://" + e.httpAddr // the page's own host, the gateway's port
		var socks []*websocket.Conn
		for range 3 {
			ws, err := dial(a.token, page)
			if err != nil {
				t.Fatalf("own origin: %v", err)
			}
			defer ws.CloseNow()
			socks = append(socks, ws)
			time.Sleep(100 * time.Millisecond) // registration order = dial order
		}
		// Push maps a's subject to the same user as the gateway did: the
		// connect snapshot is a's order.
		for {
			_, data, err := socks[2].Read(ctx)
			if err != nil {
				t.Fatalf("a's snapshot: %v", err)
			}
			var m map[string]any
			json.Unmarshal(data, &m)
			if m["type"] == "order" && m["orderNo"] == a.orderNo {
				break
			}
		}
		// Cap 2: the first socket is closed with 4429.
		var closeErr error
		for closeErr == nil {
			_, _, closeErr = socks[0].Read(ctx)
		}
		var ce websocket.CloseError
		if !errors.As(closeErr, &ce) || ce.Code != 4429 || !strings.Contains(ce.Reason, "too many sockets") {
			t.Fatalf("oldest socket: %v, want close 4429", closeErr)
		}
		// b subscribes to a's order: the same answer as a nonexistent one.
		ws, err := dial(b.token, page)
		if err != nil {
			t.Fatal(err)
		}
		defer ws.CloseNow()
		answerFor := func(no string) map[string]any {
			if err := ws.Write(ctx, websocket.MessageText, []byte(`{"type":"subscribe","orderNo":"`+no+`"}`)); err != nil {
				t.Fatal(err)
			}
			for {
				_, data, err := ws.Read(ctx)
				if err != nil {
					t.Fatalf("read: %v", err)
				}
				var m map[string]any
				json.Unmarshal(data, &m)
				if m["orderNo"] == no {
					delete(m, "orderNo")
					return m
				}
			}
		}
		other, missing := answerFor(a.orderNo), answerFor(a.orderNo[:len(a.orderNo)-1]+"9")
		if other["type"] != "error" || fmt.Sprint(other) != fmt.Sprint(missing) {
			t.Fatalf("another user's order over WS: %v; nonexistent: %v", other, missing)
		}
		// A token that expires while its socket is open: 4401 at its exp.
		ec := buyerOf(int64(2_000_000 + intentIndex(intents, c)))
		short, err := dial(tokenOf(ec, 3*time.Second), page)
		if err != nil {
			t.Fatal(err)
		}
		defer short.CloseNow()
		opened := time.Now()
		closeErr = nil
		for closeErr == nil {
			_, _, closeErr = short.Read(ctx)
		}
		if !errors.As(closeErr, &ce) || ce.Code != 4401 || ce.Reason != "token expired" {
			t.Fatalf("socket of an expiring token: %v after %v, want close 4401 \"token expired\"", closeErr, time.Since(opened))
		}
	})

	// The payments and refusals above leave the invariants intact.
	ctx, cancel := context.WithTimeout(e.ctx, 30*time.Second)
	defer cancel()
	for ctx.Err() == nil {
		if e.orderStatus(a.orderNo) == order.Paid {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	e.settle(pid, time.Now(), 60*time.Second)
}

// intentIndex is the position of in among intents (its user is 2,000,000 + it).
func intentIndex(intents []*intent, in *intent) int {
	for i, x := range intents {
		if x == in {
			return i
		}
	}
	return -1
}

// orderStatus is the order's status in MySQL ("" if it is not there).
func (e *env) orderStatus(no string) order.Status {
	e.t.Helper()
	var st string
	e.store.DB.QueryRowContext(e.ctx, `SELECT status FROM order_info WHERE order_no = ?`, no).Scan(&st)
	return order.Status(st)
}
