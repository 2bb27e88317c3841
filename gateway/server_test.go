package gateway

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

func TestRoutes(t *testing.T) {
	e := newEnv(t)
	e.srv.Handle("GET", "/boom", func(*fasthttp.RequestCtx) { panic("test panic") })

	e.do("GET", "/api/nope", "", malformed(nil)).wantError(t, 404, CodeNotFound)
	e.do("GET", "/", "", malformed(nil)).wantError(t, 404, CodeNotFound) // no StaticDir
	r := e.do("DELETE", "/api/orders", token(t, 1), malformed(nil))
	r.wantError(t, 405, CodeMethodNotAllowed)
	if allow := r.header.Get("Allow"); !strings.Contains(allow, "GET") || !strings.Contains(allow, "POST") {
		t.Fatalf("Allow %q", allow)
	}
	e.do("GET", "/api/payments/callback", "", malformed(nil)).wantError(t, 405, CodeMethodNotAllowed)
	e.do("GET", "/boom", "", notAPI(nil)).wantError(t, 500, CodeInternal)
	if r := e.do("GET", "/healthz", "", nil); r.status != 200 || r.header.Get("Content-Type") != "application/json" {
		t.Fatalf("server still serves after a panic: %s %v", r, r.header)
	}
	// fasthttp refuses a body far over the limit while reading (413); the
	// answer is JSON too.
	c, err := e.ln.Dial()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST /api/orders HTTP/1.1\r\nHost: gateway\r\nContent-Length: %d\r\n\r\n", 1<<20)
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode != 413 || !strings.Contains(string(b), `"PAYLOAD_TOO_LARGE"`) || !strings.Contains(string(b), "4096 bytes") {
		t.Fatalf("1 MiB body: %d %s", res.StatusCode, b)
	}
}

func TestStaticClient(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "index.html"), []byte("<!doctype html><div id=app></div>"), 0o644)
	os.MkdirAll(filepath.Join(dir, "assets"), 0o755)
	os.WriteFile(filepath.Join(dir, "assets", "app.js"), []byte("console.log(1)"), 0o644)
	e := newEnv(t, func(c *Config) { c.StaticDir = dir })

	for _, path := range []string{"/", "/orders/123", "/products"} {
		if r := e.do("GET", path, "", notAPI(nil)); r.status != 200 || !strings.Contains(string(r.body), "id=app") {
			t.Fatalf("GET %s: %s", path, r)
		}
	}
	if r := e.do("GET", "/assets/app.js", "", notAPI(nil)); r.status != 200 || string(r.body) != "console.log(1)" {
		t.Fatalf("asset: %s", r)
	}
	e.do("GET", "/assets/missing.js", "", malformed(nil)).wantError(t, 404, CodeNotFound)
	e.do("GET", "/api/unknown", "", malformed(nil)).wantError(t, 404, CodeNotFound)
	e.do("POST", "/somewhere", "", malformed(nil)).wantError(t, 404, CodeNotFound)
	if r := e.do("GET", "/../../etc/passwd", "", notAPI(nil)); strings.Contains(string(r.body), "root:") {
		t.Fatal("path traversal")
	}
	if r := e.do("GET", "/healthz", "", nil); r.status != 200 {
		t.Fatalf("API with static: %s", r)
	}

	if _, err := New(Config{JWTSecret: testJWTSecret, PaymentSecret: testPaySecret, StaticDir: t.TempDir()}, e.rdb, e.store, nil); err == nil {
		t.Fatal("StaticDir without index.html accepted")
	}
}

// Run serves on Config.Addr and returns nil after a graceful shutdown.
func TestRun(t *testing.T) {
	e := newEnv(t)
	addr := closedAddr(t)
	cfg := baseConfig()
	cfg.Addr = addr
	srv, err := New(cfg, e.rdb, e.store, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()

	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	deadline := time.Now().Add(5 * time.Second)
	for {
		res, err := hc.Get("http://" + addr + "/healthz")
		if err == nil {
			res.Body.Close()
			if res.StatusCode != 200 {
				t.Fatalf("healthz %d", res.StatusCode)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("server did not come up: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// A second Run on the same address fails to listen.
	if err := srv.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "listen") {
		t.Fatalf("second Run: %v", err)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		t.Fatal("still listening after shutdown")
	}
}

// Serve with a context cancelled before it starts still returns.
func TestServeCancelledAtOnce(t *testing.T) {
	e := newEnv(t)
	for range 20 {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- e.srv.Serve(ctx, ln) }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("Serve did not return")
		}
	}
}
