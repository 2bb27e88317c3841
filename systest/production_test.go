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
	"github.com/stampede-sh/stampede/systest/ports"
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
	t.Parallel()
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
			cmd := exec.Command(bin, append([]string{"serve", "--http-addr", ports.Addr(t)}, c.args...)...)
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
		cmd := exec.Command(bin, "serve", "--mode", "development", "--mysql-dsn", "root@tcp("+ports.Addr(t)+")/x?timeout=1s")
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

// prodRun is the world of TestProductionMode: the binary configured with
// docs/production.md's identity example, its provider and keys, the processes.
type prodRun struct {
	e              *env
	idp            *tlsIdP
	buyers, staff  *realm
	rsa1, staffKey *rsa.PrivateKey
	ec1            *ecdsa.PrivateKey
	p              *proc  // every role
	pushAddr       string // p's push listener
	base2          string // a second gateway
	mu             sync.Mutex
	people         map[int64]prodBuyer // the sale's buyers by their test user number
}

// The staff realm's admin.
const prodAdminSub = "7c9e6679-7425-40de-944b-e07fc1f90ae7"

// TestProductionMode runs the real binary in production mode configured
// with docs/production.md's identity example verbatim (two Keycloak realms served
// over https, see idp_test.go) and checks issues 12 and 26 against it: UUID
// subjects of two issuers buy, replay on a second gateway and follow their
// orders over push; admins come from the group only; HS256 is off, and on a
// gateway that enables it is held to its issuer and audience; a socket
// closes with 4401 when its token expires; support finds orders by subject;
// a refund, a waiting-room change and a dead-letter replay are audited; a
// JWT split across fasthttp's 200-byte log tail leaves no piece in the log;
// then a sale that must pass the docs/spec.md §5 audit.
func TestProductionMode(t *testing.T) {
	t.Parallel()
	r := startProduction(t)
	t.Run("admins by group only", r.admins)
	t.Run("no demo login", r.noDemoLogin)
	t.Run("tokens", r.tokens)
	t.Run("HS256 where enabled: held to its issuer and audience; the debug log holds no request byte", r.hs256Gateway)
	t.Run("metrics only on the metrics listener", r.metricsListener)
	t.Run("readyz and config name no internals", r.noInternals)
	t.Run("client security headers", r.securityHeaders)
	pid, intents := r.sale(t)
	var paid []*intent
	for _, in := range intents {
		if in.orderNo != "" {
			paid = append(paid, in)
		}
	}
	a, b, c := paid[0], paid[1], paid[2]
	t.Run("no demo checkout; paymentNo reuse is 409", func(t *testing.T) { r.payments(t, a, b) })
	t.Run("support finds orders by the provider's subject", func(t *testing.T) { r.supportSearch(t, intents, a) })
	t.Run("a refund, a waiting-room change and a replay are audited", func(t *testing.T) { r.audited(t, pid, c) })
	t.Run("websocket: own snapshots, cap, origin, other users' orders", func(t *testing.T) { r.websockets(t, a, b) })
	t.Run("websocket: closed with 4401 when its token expires", func(t *testing.T) { r.expiringSocket(t, intents, c) })

	// The payments and refusals above leave the invariants intact.
	ctx, cancel := context.WithTimeout(r.e.ctx, 30*time.Second)
	defer cancel()
	for ctx.Err() == nil {
		if r.e.orderStatus(a.orderNo) == order.Paid {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	r.e.settle(pid, time.Now(), 60*time.Second)
}

// startProduction serves the docs/production.md example's providers and starts the
// binary with every role, and a second gateway, configured by it.
func startProduction(t *testing.T) *prodRun {
	r := &prodRun{e: newEnvFor(t, "production"), people: map[int64]prodBuyer{}}
	r.idp = newTLSIdP(t, identityExample(t))
	r.buyers, r.staff = r.idp.realms[0], r.idp.realms[1]
	var err error
	if r.rsa1, err = rsa.GenerateKey(rand.Reader, 2048); err != nil {
		t.Fatal(err)
	}
	r.ec1, _ = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	r.staffKey, _ = rsa.GenerateKey(rand.Reader, 2048)
	r.buyers.publish(t, map[string]any{"rsa-1": &r.rsa1.PublicKey, "ec-1": &r.ec1.PublicKey})
	r.staff.publish(t, map[string]any{"staff-1": &r.staffKey.PublicKey})
	e := r.e
	e.procEnv = r.idp.env
	r.pushAddr = ports.Addr(t)
	r.p = e.serve("prod", "gateway,writer,relay,consumer,sweeper,push",
		"--mode", "production", "--jwt-secret", prodJWTSecret, "--payment-secret", prodPaySecret,
		"--push-addr", r.pushAddr, "--push-max-sockets", "2", "--static-dir", "../client/dist", "--log-level", "info")
	e.waitReady(30 * time.Second)
	if lines := r.p.logLines("DEVELOPMENT MODE"); len(lines) != 0 {
		t.Errorf("production logged %q", lines)
	}
	if r.idp.connects.Load() == 0 || r.idp.fetches.Load() < 2 {
		t.Fatalf("the binary fetched the key sets %d times over %d CONNECT tunnels", r.idp.fetches.Load(), r.idp.connects.Load())
	}
	// A second gateway: replays land there.
	gw2 := ports.Addr(t)
	e.serveAt("prod-gw2", "gateway", gw2, "--mode", "production", "--payment-secret", prodPaySecret, "--log-level", "info")
	r.base2 = "http://" + gw2
	e.waitReadyAt(r.base2, 30*time.Second)
	e.admin = r.adminToken(t)
	return r
}

// adminToken is a fresh token of the staff realm's admin (the admin group).
func (r *prodRun) adminToken(t *testing.T) string {
	return r.idp.token(t, r.staff, jwt.SigningMethodRS256, "staff-1", r.staffKey, prodAdminSub, time.Hour,
		jwt.MapClaims{"groups": []string{r.idp.group}})
}

// admins: the admin group of the staff realm makes an admin; role: admin in
// a token counts for nothing once a group is configured.
func (r *prodRun) admins(t *testing.T) {
	if a, _ := r.e.call("GET", "/api/admin/reconcile", r.e.admin, nil); a.status != 200 {
		t.Fatalf("staff admin (group claim): %d %s", a.status, a.raw)
	}
	roleAdmin := r.idp.token(t, r.buyers, jwt.SigningMethodRS256, "rsa-1", r.rsa1, uuid(2), time.Hour, jwt.MapClaims{"role": "admin"})
	if a, _ := r.e.call("GET", "/api/admin/reconcile", roleAdmin, nil); a.status != 403 {
		t.Fatalf("role: admin without the group: %d %s, want 403", a.status, a.raw)
	}
}

func (r *prodRun) noDemoLogin(t *testing.T) {
	a, err := r.e.call("POST", "/api/auth/login", "", map[string]any{"userId": 1})
	if err != nil || a.status != 404 {
		t.Fatalf("POST /api/auth/login: %d %s %v, want 404", a.status, a.raw, err)
	}
}

// tokens: what the gateway accepts and refuses, then a key rotation.
func (r *prodRun) tokens(t *testing.T) {
	e, idp, buyers, staff := r.e, r.idp, r.buyers, r.staff
	pubDER, _ := x509.MarshalPKIXPublicKey(&r.rsa1.PublicKey)
	hsGood, _ := auth.Issue([]byte(prodJWTSecret), 5, false, time.Hour)
	none, _ := jwt.NewWithClaims(jwt.SigningMethodNone, jwt.MapClaims{"sub": "5", "exp": time.Now().Add(time.Hour).Unix(),
		"role": "admin"}).SignedString(jwt.UnsafeAllowNoneSignatureType)
	crit := jwt.NewWithClaims(jwt.SigningMethodRS256, jwt.MapClaims{"iss": buyers.issuer, "aud": idp.audience, "sub": uuid(5),
		"exp": time.Now().Add(time.Hour).Unix()})
	crit.Header["kid"], crit.Header["crit"] = "rsa-1", []string{"x-unknown"}
	critTok, _ := crit.SignedString(r.rsa1)
	tok := func(rl *realm, m jwt.SigningMethod, kid string, key any, extra jwt.MapClaims) string {
		return idp.token(t, rl, m, kid, key, uuid(5), time.Hour, extra)
	}
	for name, c := range map[string]struct {
		token string
		want  int
	}{
		"RS256 of the buyers realm":                 {tok(buyers, jwt.SigningMethodRS256, "rsa-1", r.rsa1, nil), 200},
		"ES256 of the buyers realm":                 {tok(buyers, jwt.SigningMethodES256, "ec-1", r.ec1, nil), 200},
		"RS256 of the staff realm":                  {tok(staff, jwt.SigningMethodRS256, "staff-1", r.staffKey, nil), 200},
		"HS256 of the shared secret: off":           {hsGood, 401},
		"HS256 keyed with the RSA public key":       {tok(buyers, jwt.SigningMethodHS256, "rsa-1", pubDER, nil), 401},
		"alg none":                                  {none, 401},
		"crit header":                               {critTok, 401},
		"expired":                                   {idp.token(t, buyers, jwt.SigningMethodRS256, "rsa-1", r.rsa1, uuid(5), -time.Hour, nil), 401},
		"wrong audience":                            {tok(buyers, jwt.SigningMethodRS256, "rsa-1", r.rsa1, jwt.MapClaims{"aud": "other"}), 401},
		"unknown issuer":                            {tok(buyers, jwt.SigningMethodRS256, "rsa-1", r.rsa1, jwt.MapClaims{"iss": "https://evil.example/"}), 401},
		"a buyers key signing a staff token":        {tok(staff, jwt.SigningMethodRS256, "rsa-1", r.rsa1, nil), 401},
		"the staff key signing a buyers token":      {tok(buyers, jwt.SigningMethodRS256, "staff-1", r.staffKey, nil), 401},
		"a subject with a control character":        {tok(buyers, jwt.SigningMethodRS256, "rsa-1", r.rsa1, jwt.MapClaims{"sub": "a\x07b"}), 401},
		"a numeric subject is a subject, not an id": {tok(buyers, jwt.SigningMethodRS256, "rsa-1", r.rsa1, jwt.MapClaims{"sub": "+1001"}), 200},
	} {
		if a, _ := e.call("GET", "/api/orders", c.token, nil); a.status != c.want {
			t.Errorf("%s: %d %s, want %d", name, a.status, a.raw, c.want)
		}
	}
	// Key rotation: the buyers realm replaces rsa-1 by rsa-2. A token of the
	// new key is accepted at once (its kid refetches the set), the old key's
	// tokens are refused from then on.
	time.Sleep(6 * time.Second) // the gateway refetches at most every 5s
	rsa2, _ := rsa.GenerateKey(rand.Reader, 2048)
	buyers.publish(t, map[string]any{"rsa-2": &rsa2.PublicKey, "ec-1": &r.ec1.PublicKey})
	if a, _ := e.call("GET", "/api/orders", idp.token(t, buyers, jwt.SigningMethodRS256, "rsa-2", rsa2, uuid(6), time.Hour, nil), nil); a.status != 200 {
		t.Fatalf("token of the rotated-in key: %d %s", a.status, a.raw)
	}
	if a, _ := e.call("GET", "/api/orders", idp.token(t, buyers, jwt.SigningMethodRS256, "rsa-1", r.rsa1, uuid(6), time.Hour, nil), nil); a.status != 401 {
		t.Fatalf("token of the rotated-out key: %d %s, want 401", a.status, a.raw)
	}
}

// hsToken is an HS256 token of the production secret for user 5 with the
// default HS256 issuer and audience, changed by c (nil removes a claim).
func hsToken(c jwt.MapClaims) string {
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

// hs256Gateway: a gateway with --jwt-hs256 holds HS256 tokens to their
// issuer, audience, lifetime and subject form; at debug level a working
// token split across fasthttp's 200-byte head and tail of an unreadable
// request leaves no 12-byte piece of itself in the log.
func (r *prodRun) hs256Gateway(t *testing.T) {
	e := r.e
	hsAddr := ports.Addr(t)
	hs := e.serveAt("prod-hs256", "gateway", hsAddr, "--mode", "production", "--jwt-secret", prodJWTSecret,
		"--payment-secret", prodPaySecret, "--jwt-hs256", "--log-level", "debug")
	hsBase := "http://" + hsAddr
	e.waitReadyAt(hsBase, 30*time.Second)
	good, _ := auth.Issue([]byte(prodJWTSecret), 5, false, time.Hour)
	for name, c := range map[string]struct {
		token string
		want  int
	}{
		"stampede token's kind":   {good, 200},
		"no audience":             {hsToken(jwt.MapClaims{"aud": nil}), 401},
		"another audience":        {hsToken(jwt.MapClaims{"aud": "other"}), 401},
		"another issuer":          {hsToken(jwt.MapClaims{"iss": "someone"}), 401},
		"a century":               {hsToken(jwt.MapClaims{"exp": time.Now().Add(876000 * time.Hour).Unix()}), 401},
		"sub not canonical":       {hsToken(jwt.MapClaims{"sub": "0005"}), 401},
		"the providers' still ok": {r.idp.token(t, r.staff, jwt.SigningMethodRS256, "staff-1", r.staffKey, uuid(5), time.Hour, nil), 200},
	} {
		if a, _ := e.callAt(hsBase, "GET", "/api/orders", c.token, nil); a.status != c.want {
			t.Errorf("%s: %d %s, want %d", name, a.status, a.raw, c.want)
		}
	}
	long := hsToken(jwt.MapClaims{"pad": strings.Repeat("p", 600)}) // head and tail both inside it
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
}

func (r *prodRun) metricsListener(t *testing.T) {
	a, err := r.e.call("GET", "/metrics", "", nil)
	if err != nil || a.status != 404 || strings.Contains(a.raw, "stampede_") {
		t.Fatalf("GET /metrics on the API port: %d %.200s %v, want 404", a.status, a.raw, err)
	}
	resp, err := http.Get("http://" + r.p.metricsAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(b), "stampede_http_request_duration_seconds") {
		t.Fatalf("metrics listener: %d %.200s", resp.StatusCode, b)
	}
}

func (r *prodRun) noInternals(t *testing.T) {
	e := r.e
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
}

func (r *prodRun) securityHeaders(t *testing.T) {
	e := r.e
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
}

// buyerOf is the sale's buyer number user: even users in the buyers realm
// (ES256), odd ones in the staff realm (RS256), UUID subjects.
func (r *prodRun) buyerOf(user int64) prodBuyer {
	r.mu.Lock()
	defer r.mu.Unlock()
	if b, ok := r.people[user]; ok {
		return b
	}
	b := prodBuyer{realm: r.buyers, kid: "ec-1", key: r.ec1, m: jwt.SigningMethodES256, sub: uuid(user)}
	if user%2 == 1 {
		b = prodBuyer{realm: r.staff, kid: "staff-1", key: r.staffKey, m: jwt.SigningMethodRS256, sub: uuid(user)}
	}
	r.people[user] = b
	return b
}

func (r *prodRun) tokenOf(t *testing.T, b prodBuyer, ttl time.Duration) string {
	return r.idp.token(t, b.realm, b.m, b.kid, b.key, b.sub, ttl, nil)
}

// saleUser is the test's user number of the sale's intent i.
func saleUser(i int) int64 { return 2_000_000 + int64(i) }

// sale sells 60 units to 100 buyers of both realms over both gateways,
// replays every answered intent on the other gateway with a fresh token of
// the same person (the same orderNo), and checks the orders are stored
// under the ids the subjects mapped to, one per (issuer, subject).
func (r *prodRun) sale(t *testing.T) (int64, []*intent) {
	e := r.e
	const stock, sold = 60, 100
	e.tokenFor = func(user int64) string { return r.tokenOf(t, r.buyerOf(user), time.Hour) }
	e.bases = []string{e.base, r.base2}
	pid := e.product(stock)
	intents := e.sale(pid, sold, saleUser(0), saleOptions{workers: 8})
	rep := e.settle(pid, time.Now(), 60*time.Second)
	if got, other := count202(intents); got != stock {
		t.Errorf("%d × 202, want %d (others %v)", got, stock, other)
	}
	bad := 0
	for _, in := range intents {
		if in.orderNo == "" {
			continue
		}
		a, err := e.callAt(e.bases[(in.user+1)%2], "POST", "/api/orders", r.tokenOf(t, r.buyerOf(in.user), time.Hour),
			map[string]any{"productId": pid, "quantity": 1, "requestId": in.requestID})
		if (err != nil || a.status != 200 || a.body["orderNo"] != in.orderNo) && bad < 5 {
			bad++
			t.Errorf("replay of %s on the other gateway: %d %s %v, want 200 %s", r.buyerOf(in.user).sub, a.status, a.raw, err, in.orderNo)
		}
	}
	byUser := map[int64]bool{}
	for _, in := range intents {
		b := r.buyerOf(in.user)
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
	return pid, intents
}

// callback sends a payment callback signed with the production secret.
func (r *prodRun) callback(t *testing.T, no, paymentNo string) answer {
	e := r.e
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

func (r *prodRun) payments(t *testing.T, a, b *intent) {
	e := r.e
	if res, _ := e.call("POST", "/api/orders/"+a.orderNo+"/pay", a.token, nil); res.status != 404 && res.status != 405 {
		t.Fatalf("demo checkout: %d %s, want 404/405", res.status, res.raw)
	}
	if res := r.callback(t, a.orderNo, "prov-pay-1"); res.status != 200 {
		t.Fatalf("provider callback: %d %s", res.status, res.raw)
	}
	if res := r.callback(t, b.orderNo, "prov-pay-1"); res.status != 409 || !strings.Contains(res.raw, "PAYMENT_NO_REUSED") {
		t.Fatalf("paymentNo reused for another order: %d %s, want 409 PAYMENT_NO_REUSED", res.status, res.raw)
	}
	if res := r.callback(t, a.orderNo, "prov-pay-1"); res.status != 200 {
		t.Fatalf("callback replay: %d %s", res.status, res.raw)
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
	if res, _ := e.call("GET", "/api/orders/"+a.orderNo, b.token, nil); res.status != 404 {
		t.Fatalf("another user's order: %d %s, want 404", res.status, res.raw)
	}
}

func (r *prodRun) supportSearch(t *testing.T, intents []*intent, a *intent) {
	ba := r.buyerOf(saleUser(intentIndex(intents, a)))
	q := url.Values{"subject": {ba.sub}, "issuer": {ba.realm.issuer}}
	res, _ := r.e.call("GET", "/api/admin/orders?"+q.Encode(), r.e.admin, nil)
	if res.status != 200 || !strings.Contains(res.raw, a.orderNo) {
		t.Fatalf("search by subject %s: %d %s, want %s", ba.sub, res.status, res.raw, a.orderNo)
	}
	res, _ = r.e.call("GET", "/api/admin/orders/"+a.orderNo, r.e.admin, nil)
	if res.body["subject"] != ba.sub || res.body["issuer"] != ba.realm.issuer {
		t.Fatalf("admin order read: %s", res.raw)
	}
}

// audited: c cancels, its payment arrives anyway (REFUND_PENDING); the
// staff admin refunds it, turns pid's waiting room off and replays the
// dead letters: three audit entries with the admin's issuer and subject.
func (r *prodRun) audited(t *testing.T, pid int64, c *intent) {
	e := r.e
	if res, _ := e.call("POST", "/api/orders/"+c.orderNo+"/cancel", c.token, nil); res.status != 200 {
		t.Fatalf("cancel: %d %s", res.status, res.raw)
	}
	if res := r.callback(t, c.orderNo, "late-c"); res.status != 200 {
		t.Fatalf("late callback: %d %s", res.status, res.raw)
	}
	for _, call := range []struct {
		path string
		body map[string]any
	}{
		{"/api/admin/payments/late-c/refund", map[string]any{"refundNo": "RF-late-c"}},
		{fmt.Sprintf("/api/admin/products/%d/waiting-room", pid), map[string]any{"on": false}},
		{"/api/admin/dlq/replay", map[string]any{"all": true}},
	} {
		if res, _ := e.call("POST", call.path, r.adminToken(t), call.body); res.status != 200 {
			t.Fatalf("POST %s: %d %s", call.path, res.status, res.raw)
		}
	}
	admins, err := e.store.FindSubject(e.ctx, r.staff.issuer, prodAdminSub)
	if err != nil || len(admins) != 1 {
		t.Fatalf("admin's mapping: %v %v", admins, err)
	}
	res, _ := e.call("GET", "/api/admin/audit?limit=50", e.admin, nil)
	var list struct {
		Entries []struct {
			AdminID      int64  `json:"adminId"`
			AdminIssuer  string `json:"adminIssuer"`
			AdminSubject string `json:"adminSubject"`
			Action       string `json:"action"`
		} `json:"entries"`
	}
	if err := json.Unmarshal([]byte(res.raw), &list); err != nil {
		t.Fatalf("audit: %d %s", res.status, res.raw)
	}
	got := map[string]int{}
	for _, en := range list.Entries {
		if en.AdminID == admins[0] && en.AdminIssuer == r.staff.issuer && en.AdminSubject == prodAdminSub {
			got[en.Action]++
		}
	}
	for _, action := range []string{"refund", "room", "replay"} {
		if got[action] != 1 {
			t.Errorf("audit entries of %s by the staff admin: %d, want 1 (all: %+v)", action, got[action], list.Entries)
		}
	}
}

// dialPush opens a socket to push with tok, from a page of origin ("" for
// none).
func (r *prodRun) dialPush(tok, origin string) (*websocket.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h := http.Header{}
	if origin != "" {
		h.Set("Origin", origin)
	}
	ws, _, err := websocket.Dial(ctx, "ws://"+r.pushAddr+"/ws", &websocket.DialOptions{Subprotocols: []string{"stampede", tok}, HTTPHeader: h})
	return ws, err
}

// closeOf reads ws until it closes and returns the close.
func closeOf(ctx context.Context, ws *websocket.Conn) (websocket.CloseError, error) {
	var err error
	for err == nil {
		_, _, err = ws.Read(ctx)
	}
	var ce websocket.CloseError
	errors.As(err, &ce)
	return ce, err
}

// websockets: push maps a's subject to the gateway's user (a's connect
// snapshot is a's order); a third socket of a closes the first with 4429;
// a foreign origin is refused; b asking for a's order gets what a
// nonexistent order gets.
func (r *prodRun) websockets(t *testing.T, a, b *intent) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := r.dialPush(a.token, "http://evil.example"); err == nil || !strings.Contains(err.Error(), "403") {
		t.Fatalf("foreign origin: %v, want 403", err)
	}
	page := "http://" + r.e.httpAddr // the page's own host, the gateway's port
	var socks []*websocket.Conn
	for range 3 {
		ws, err := r.dialPush(a.token, page)
		if err != nil {
			t.Fatalf("own origin: %v", err)
		}
		defer ws.CloseNow()
		socks = append(socks, ws)
		time.Sleep(100 * time.Millisecond) // registration order = dial order
	}
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
	if ce, err := closeOf(ctx, socks[0]); ce.Code != 4429 || !strings.Contains(ce.Reason, "too many sockets") {
		t.Fatalf("oldest socket: %v, want close 4429", err)
	}
	ws, err := r.dialPush(b.token, page)
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
}

// expiringSocket: the socket of a token that expires while it is open is
// closed with 4401 at its exp.
func (r *prodRun) expiringSocket(t *testing.T, intents []*intent, c *intent) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	short, err := r.dialPush(r.tokenOf(t, r.buyerOf(saleUser(intentIndex(intents, c))), 3*time.Second), "http://"+r.e.httpAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer short.CloseNow()
	opened := time.Now()
	if ce, err := closeOf(ctx, short); ce.Code != 4401 || ce.Reason != "token expired" {
		t.Fatalf("socket of an expiring token: %v after %v, want close 4401 \"token expired\"", err, time.Since(opened))
	}
}

// intentIndex is the position of in among intents (its user number is saleUser of it).
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
