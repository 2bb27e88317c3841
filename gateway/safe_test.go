package gateway

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/stampede-sh/stampede/auth"
	"github.com/stampede-sh/stampede/order"
)

// Production mode's gateway: no demo login, no demo checkout (both 404 like
// unknown paths); the order the buyer tried to pay for free stays unpaid.
func TestDemoRoutesOff(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.DisableDemoLogin, c.DisableDemoCheckout = true, true })
	pid := e.product(openSale(10))
	no := e.waitingPay(1, pid, 1, "free")
	e.do("POST", "/api/auth/login", "", `{"userId":42}`).wantError(t, 404, CodeNotFound)
	e.do("POST", "/api/orders/"+no+"/pay", token(t, 1), nil).wantError(t, 404, CodeNotFound)
	if st := e.orderStatus(no); st != order.WaitingPay {
		t.Fatalf("order %s after the refused demo checkout, want WAITING_PAY", st)
	}
	// The provider's signed callback still pays it.
	if r := e.callback(no, "prov-1", 1999, nil); r.status != 200 {
		t.Fatalf("callback: %s", r)
	}
	if st := e.orderStatus(no); st != order.Paid {
		t.Fatalf("order %s after the callback, want PAID", st)
	}
}

// A paymentNo that paid one order answers 409 PAYMENT_NO_REUSED for another
// order, which stays WAITING_PAY; the replay for the first order is still a
// SUCCESS.
func TestPaymentNoReused(t *testing.T) {
	e := newEnv(t)
	pid := e.product(openSale(10))
	a := e.waitingPay(1, pid, 1, "a")
	b := e.waitingPay(2, pid, 1, "b")
	if r := e.callback(a, "pay-shared", 1999, nil); r.status != 200 {
		t.Fatalf("first callback: %s", r)
	}
	e.callback(b, "pay-shared", 1999, nil).wantError(t, 409, CodePaymentNoReused)
	if st := e.orderStatus(b); st != order.WaitingPay {
		t.Fatalf("order b %s, want WAITING_PAY", st)
	}
	if r := e.callback(a, "pay-shared", 1999, nil); r.status != 200 || string(r.body) != `{"result":"SUCCESS"}` {
		t.Fatalf("replay: %s", r)
	}
}

// getWithHost is GET path with the Host header set to host.
func getWithHost(t *testing.T, hc *http.Client, path, host string) resp {
	t.Helper()
	req, err := http.NewRequest("GET", "http://gateway"+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	res, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return resp{status: res.StatusCode, header: res.Header, body: b}
}

func TestClientConfigPushURL(t *testing.T) {
	for _, c := range []struct {
		name string
		mod  func(*Config)
		host string
		want string // body
	}{
		{"configured URL wins over Host", func(c *Config) { c.PushURL = "wss://push.shop.test/ws"; c.PushURLFromHost = true },
			"evil.test", `{"pushUrl":"wss://push.shop.test/ws","currency":"USD"}`},
		{"from Host in development", func(c *Config) { c.PushAddr = "127.0.0.1:9181"; c.PushURLFromHost = true },
			"shop.test:8080", `{"pushUrl":"ws://shop.test:9181/ws","currency":"USD"}`},
		{"IPv6 Host", func(c *Config) { c.PushAddr = "127.0.0.1:9181"; c.PushURLFromHost = true },
			"[::1]:8080", `{"pushUrl":"ws://[::1]:9181/ws","currency":"USD"}`},
		{"Host not a host name", func(c *Config) { c.PushAddr = "127.0.0.1:9181"; c.PushURLFromHost = true },
			"bad_host!x", `{"currency":"USD"}`},
		{"production: Host never echoed; a configured currency", func(c *Config) { c.PushAddr = "127.0.0.1:9181"; c.Currency = "EUR" },
			"evil.test", `{"currency":"EUR"}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, c.mod)
			r := getWithHost(t, e.hc, "/api/config", c.host)
			if r.status != 200 || string(r.body) != c.want {
				t.Fatalf("GET /api/config with Host %q: %s, want %s", c.host, r, c.want)
			}
		})
	}
}

// The client's files carry the security headers; the CSP's connect-src
// names the push WebSocket and nothing a Host header could inject.
func TestStaticSecurityHeaders(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "index.html"), []byte("<!doctype html><div id=app></div>"), 0o644)
	os.MkdirAll(filepath.Join(dir, "assets"), 0o755)
	os.WriteFile(filepath.Join(dir, "assets", "app.js"), []byte("console.log(1)"), 0o644)

	check := func(t *testing.T, r resp, connect string) {
		t.Helper()
		h := r.header
		csp := h.Get("Content-Security-Policy")
		for _, d := range []string{"default-src 'self'", "script-src 'self'", "style-src 'self'", "object-src 'none'",
			"frame-ancestors 'none'", "base-uri 'none'", connect} {
			if !strings.Contains(csp, d) {
				t.Errorf("CSP %q lacks %q", csp, d)
			}
		}
		if strings.Contains(csp, "unsafe-inline") || strings.Contains(csp, "unsafe-eval") || strings.Contains(csp, "evil") {
			t.Errorf("CSP %q", csp)
		}
		if h.Get("X-Content-Type-Options") != "nosniff" || h.Get("Referrer-Policy") != "no-referrer" || h.Get("X-Frame-Options") != "DENY" {
			t.Errorf("headers %v", h)
		}
	}
	t.Run("push port from the request host", func(t *testing.T) {
		e := newEnv(t, func(c *Config) { c.StaticDir = dir; c.PushAddr = "127.0.0.1:9181" })
		for _, path := range []string{"/", "/orders/123", "/assets/app.js"} {
			r := getWithHost(t, e.hc, path, "shop.test:8080")
			if r.status != 200 {
				t.Fatalf("GET %s: %s", path, r)
			}
			check(t, r, "connect-src 'self' ws://shop.test:9181 wss://shop.test:9181")
		}
		r := getWithHost(t, e.hc, "/", "evil.test;script-src")
		if r.status != 200 {
			t.Fatalf("GET / with a Host holding a ';': %s", r)
		}
		check(t, r, "connect-src 'self'")
		if csp := r.header.Get("Content-Security-Policy"); strings.Contains(csp, "evil") {
			t.Fatalf("Host injected into the CSP: %q", csp)
		}
		// Still no way out of the client folder.
		if r := e.do("GET", "/../../etc/passwd", "", notAPI(nil)); strings.Contains(string(r.body), "root:") {
			t.Fatal("path traversal")
		}
		// API answers are not sniffed either.
		if r := e.do("GET", "/api/products", "", nil); r.header.Get("X-Content-Type-Options") != "nosniff" {
			t.Fatalf("API headers %v", r.header)
		}
	})
	t.Run("configured push URL", func(t *testing.T) {
		e := newEnv(t, func(c *Config) { c.StaticDir = dir; c.PushURL = "wss://push.shop.test/ws" })
		check(t, getWithHost(t, e.hc, "/", "shop.test"), "connect-src 'self' wss://push.shop.test")
	})
}

// The CSP fits the built client: client/dist/index.html loads its script and
// stylesheet from this origin, has no inline script, style or handler, and
// its only other source is the data: favicon (img-src data:).
func TestCSPFitsBuiltClient(t *testing.T) {
	html, err := os.ReadFile("../client/dist/index.html")
	if err != nil {
		t.Skipf("no built client: %v", err)
	}
	s := string(html)
	if regexp.MustCompile(`<script(?:\s[^>]*)?>\s*[^<\s]`).MatchString(s) {
		t.Error("index.html has an inline script")
	}
	if strings.Contains(s, "<style") || regexp.MustCompile(`\sstyle=`).MatchString(s) || regexp.MustCompile(`\son[a-z]+=`).MatchString(s) {
		t.Error("index.html has inline style or event handlers")
	}
	for _, m := range regexp.MustCompile(`(?:src|href)="([^"]*)"`).FindAllStringSubmatch(s, -1) {
		u := m[1]
		if !strings.HasPrefix(u, "/") && !strings.HasPrefix(u, "./") && !strings.HasPrefix(u, "data:image/") {
			t.Errorf("index.html loads %q, outside the CSP", u)
		}
	}
	dir := filepath.Join("..", "client", "dist", "assets")
	js, _ := filepath.Glob(filepath.Join(dir, "*.js"))
	for _, f := range js {
		b, _ := os.ReadFile(f)
		if bytes.Contains(b, []byte("new Function(")) || regexp.MustCompile(`[^.\w]eval\(`).Match(b) {
			t.Errorf("%s uses eval, which the CSP refuses", f)
		}
	}
	e := newEnv(t, func(c *Config) { c.StaticDir = "../client/dist" })
	r := e.do("GET", "/", "", notAPI(nil))
	if r.status != 200 || !strings.Contains(r.header.Get("Content-Security-Policy"), "script-src 'self'") {
		t.Fatalf("GET / of the built client: %d %v", r.status, r.header)
	}
}

// logBuffer collects log output.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// fasthttp's messages about malformed requests quote the request's first
// and last 200 bytes; at debug level none of those bytes reaches the log
// (issue 26): before, a pattern-based redaction cut whole JWTs and header
// values, but a token split across the 200-byte tail kept its signature in
// the log, enough with the head to rebuild it.
func TestMalformedRequestLogHasNoToken(t *testing.T) {
	// A token long enough (a big claim) that the 200-byte head holds its
	// start and the tail its end, away from the Authorization name.
	long, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "1", "iss": auth.DefaultHS256Issuer,
		"aud": auth.DefaultHS256Audience, "exp": time.Now().Add(time.Hour).Unix(), "pad": strings.Repeat("p", 600)}).SignedString(testJWTSecret)
	if err != nil {
		t.Fatal(err)
	}
	tok := token(t, 1)
	logs := &logBuffer{}
	e := newEnv(t)
	srv, err := New(baseConfig(), e.rdb, e.store, slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	if err != nil {
		t.Fatal(err)
	}
	_, ln := serveInMemory(t, srv)
	for _, raw := range []string{
		"GET /api/orders HTTP/1.1\r\nHost: gateway\r\nAuthorization: Bearer " + tok + "\r\nBroken header line\r\n\r\n",
		"GARBAGE\x01 /api HTTP/1.1\r\nAuthorization: Bearer " + tok + "\r\n\r\n",
		"GET /api/orders HTTP/1.1\r\nHost: gateway\r\nAuthorization: Bearer " + tok + "\r\nX: " + strings.Repeat("a", 9000) + "\r\n\r\n",
		// The split: the head ends inside the token, the tail starts inside it.
		"GET /api/orders HTTP/1.1\r\nHost: gateway\r\nAuthorization: Bearer " + long + "\r\nBroken\r\n\r\n",
	} {
		c, err := ln.Dial()
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprint(c, raw)
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err == nil {
			res.Body.Close()
		}
		c.Close()
	}
	var sawDebug bool
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) && !sawDebug {
		sawDebug = strings.Contains(logs.String(), `"fasthttp: `)
		time.Sleep(20 * time.Millisecond)
	}
	out := logs.String()
	for _, tk := range []string{tok, long} {
		// No 12-byte piece of either token (beyond the "eyJhbGciOiJI"
		// that every HS256 header starts with) is in the log.
		for i := 12; i+12 <= len(tk); i++ {
			if piece := tk[i : i+12]; strings.Contains(out, piece) {
				t.Fatalf("a piece of a token (%q at %d) reached the log:\n%s", piece, i, out)
			}
		}
	}
	if !strings.Contains(out, "malformed request headers") {
		t.Errorf("the log does not say what was wrong:\n%s", out)
	}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var m map[string]any
		if line != "" && json.Unmarshal([]byte(line), &m) != nil {
			t.Errorf("log line is not JSON: %q", line)
		}
	}
	t.Logf("fasthttp debug lines seen: %v", sawDebug)
}
