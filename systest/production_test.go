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
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/golang-jwt/jwt/v5"
	"github.com/lestrrat-go/jwx/v3/jwk"

	"github.com/stampede-sh/stampede/auth"
	"github.com/stampede-sh/stampede/gateway"
	"github.com/stampede-sh/stampede/order"
)

// Secrets of the production-mode tests: long enough, not the built-in keys.
const (
	prodJWTSecret = "systest-production-jwt-secret-0123456789abcdef"
	prodPaySecret = "systest-production-payment-secret-0123456789ab"
	prodIssuer    = "https://id.systest.example/"
	prodAudience  = "stampede-systest"
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

// jwksServer is the identity provider of the production test: a JWKS on
// loopback whose key the test rotates.
type jwksServer struct {
	srv *httptest.Server
	mu  sync.Mutex
	set []byte
}

func newJWKSServer(t *testing.T) *jwksServer {
	j := &jwksServer{}
	j.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		j.mu.Lock()
		b := j.set
		j.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.Write(b)
	}))
	t.Cleanup(j.srv.Close)
	return j
}

// publish serves exactly these public keys, by kid.
func (j *jwksServer) publish(t *testing.T, keys map[string]any) {
	t.Helper()
	set := jwk.NewSet()
	for kid, pub := range keys {
		k, err := jwk.Import(pub)
		if err != nil {
			t.Fatal(err)
		}
		k.Set(jwk.KeyIDKey, kid)
		set.AddKey(k)
	}
	b, err := json.Marshal(set)
	if err != nil {
		t.Fatal(err)
	}
	j.mu.Lock()
	j.set = b
	j.mu.Unlock()
}

// idpToken is a token of the identity provider for user, signed by key
// under kid; extra claims are added.
func idpToken(t *testing.T, m jwt.SigningMethod, kid string, key any, user int64, extra jwt.MapClaims) string {
	t.Helper()
	c := jwt.MapClaims{"sub": fmt.Sprint(user), "iss": prodIssuer, "aud": prodAudience, "exp": time.Now().Add(time.Hour).Unix()}
	for k, v := range extra {
		c[k] = v
	}
	tok := jwt.NewWithClaims(m, c)
	tok.Header["kid"] = kid
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestProductionMode runs the real binary in production mode with an
// identity provider and checks every item of issue 12 against it, then a
// sale that must pass the SPEC §5 audit.
func TestProductionMode(t *testing.T) {
	e := newEnvFor(t, "production")
	rsa1, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	ec1, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	idp := newJWKSServer(t)
	idp.publish(t, map[string]any{"rsa-1": &rsa1.PublicKey, "ec-1": &ec1.PublicKey})

	pushAddr := freeAddr(t)
	p := e.serve("prod", "gateway,writer,relay,consumer,sweeper,push",
		"--mode", "production", "--jwt-secret", prodJWTSecret, "--payment-secret", prodPaySecret,
		"--jwt-jwks-url", idp.srv.URL+"/jwks.json", "--jwt-issuer", prodIssuer, "--jwt-audience", prodAudience,
		"--jwt-admin-group", "shop-admins", "--push-addr", pushAddr, "--push-max-sockets", "2",
		"--static-dir", "../client/dist", "--log-level", "info")
	e.waitReady(30 * time.Second)
	if lines := p.logLines("DEVELOPMENT MODE"); len(lines) != 0 {
		t.Errorf("production logged %q", lines)
	}

	// Admins come from the identity provider's group claim; an ordinary
	// IdP user is no admin.
	e.admin = idpToken(t, jwt.SigningMethodES256, "ec-1", ec1, 1, jwt.MapClaims{"groups": []string{"shop-admins"}})
	if a, _ := e.call("GET", "/api/admin/reconcile", e.admin, nil); a.status != 200 {
		t.Fatalf("IdP admin (group claim): %d %s", a.status, a.raw)
	}
	if a, _ := e.call("GET", "/api/admin/reconcile", idpToken(t, jwt.SigningMethodRS256, "rsa-1", rsa1, 2, nil), nil); a.status != 403 {
		t.Fatalf("IdP buyer on an admin endpoint: %d %s, want 403", a.status, a.raw)
	}

	t.Run("no demo login", func(t *testing.T) {
		a, err := e.call("POST", "/api/auth/login", "", map[string]any{"userId": 1})
		if err != nil || a.status != 404 {
			t.Fatalf("POST /api/auth/login: %d %s %v, want 404", a.status, a.raw, err)
		}
	})

	t.Run("tokens", func(t *testing.T) {
		pubDER, _ := x509.MarshalPKIXPublicKey(&rsa1.PublicKey)
		hsWrong, _ := auth.Issue([]byte("another-secret-of-32-bytes-or-more-000"), 5, true, time.Hour)
		hsGood, _ := auth.Issue([]byte(prodJWTSecret), 5, false, time.Hour)
		expired, _ := auth.Issue([]byte(prodJWTSecret), 5, false, -time.Hour)
		none := func() string {
			tok := jwt.NewWithClaims(jwt.SigningMethodNone, jwt.MapClaims{"sub": "5", "exp": time.Now().Add(time.Hour).Unix(), "role": "admin"})
			s, _ := tok.SignedString(jwt.UnsafeAllowNoneSignatureType)
			return s
		}()
		for name, c := range map[string]struct {
			token string
			want  int
		}{
			"RS256 of the IdP":                    {idpToken(t, jwt.SigningMethodRS256, "rsa-1", rsa1, 5, nil), 200},
			"ES256 of the IdP":                    {idpToken(t, jwt.SigningMethodES256, "ec-1", ec1, 5, nil), 200},
			"HS256, shared secret":                {hsGood, 200},
			"HS256, wrong key":                    {hsWrong, 401},
			"HS256 keyed with the RSA public key": {idpToken(t, jwt.SigningMethodHS256, "rsa-1", pubDER, 5, nil), 401},
			"alg none":                            {none, 401},
			"expired":                             {expired, 401},
			"wrong audience":                      {idpToken(t, jwt.SigningMethodRS256, "rsa-1", rsa1, 5, jwt.MapClaims{"aud": "other"}), 401},
			"wrong issuer":                        {idpToken(t, jwt.SigningMethodRS256, "rsa-1", rsa1, 5, jwt.MapClaims{"iss": "https://evil.example/"}), 401},
		} {
			if a, _ := e.call("GET", "/api/orders", c.token, nil); a.status != c.want {
				t.Errorf("%s: %d %s, want %d", name, a.status, a.raw, c.want)
			}
		}
		// Key rotation: the IdP replaces rsa-1 by rsa-2. A token of the new
		// key is accepted at once (its kid refetches the set), the old
		// key's tokens are refused from then on.
		time.Sleep(6 * time.Second) // the gateway refetches at most every 5s
		rsa2, _ := rsa.GenerateKey(rand.Reader, 2048)
		idp.publish(t, map[string]any{"rsa-2": &rsa2.PublicKey, "ec-1": &ec1.PublicKey})
		if a, _ := e.call("GET", "/api/orders", idpToken(t, jwt.SigningMethodRS256, "rsa-2", rsa2, 6, nil), nil); a.status != 200 {
			t.Fatalf("token of the rotated-in key: %d %s", a.status, a.raw)
		}
		if a, _ := e.call("GET", "/api/orders", idpToken(t, jwt.SigningMethodRS256, "rsa-1", rsa1, 6, nil), nil); a.status != 401 {
			t.Fatalf("token of the rotated-out key: %d %s, want 401", a.status, a.raw)
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

	// The sale: IdP buyers (RS256 tokens).
	const stock, buyers = 60, 100
	e.tokenFor = func(user int64) string { return idpToken(t, jwt.SigningMethodES256, "ec-1", ec1, user, nil) }
	pid := e.product(stock)
	intents := e.sale(pid, buyers, 2_000_000, saleOptions{workers: 8})
	saleEnd := time.Now()
	rep := e.settle(pid, saleEnd, 60*time.Second)
	if got, other := count202(intents); got != stock {
		t.Errorf("%d × 202, want %d (others %v)", got, stock, other)
	}
	e.checkIntents(pid, intents, rep)

	var paid []*intent
	for _, in := range intents {
		if in.orderNo != "" {
			paid = append(paid, in)
		}
	}
	a, b := paid[0], paid[1]

	t.Run("no demo checkout; paymentNo reuse is 409", func(t *testing.T) {
		if r, _ := e.call("POST", "/api/orders/"+a.orderNo+"/pay", a.token, nil); r.status != 404 && r.status != 405 {
			t.Fatalf("demo checkout: %d %s, want 404/405", r.status, r.raw)
		}
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

	t.Run("websocket cap, origin, other users' orders", func(t *testing.T) {
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
		// Cap 2: the first socket is closed with 4429.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
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

// orderStatus is the order's status in MySQL ("" if it is not there).
func (e *env) orderStatus(no string) order.Status {
	e.t.Helper()
	var st string
	e.store.DB.QueryRowContext(e.ctx, `SELECT status FROM order_info WHERE order_no = ?`, no).Scan(&st)
	return order.Status(st)
}
