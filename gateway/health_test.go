package gateway

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-sh/stampede/lua"
	"github.com/stampede-sh/stampede/persistence"
	"github.com/stampede-sh/stampede/persistence/persistencetest"
)

func TestHealthAndReady(t *testing.T) {
	var rabbitDown bool
	e := newEnv(t, func(c *Config) {
		c.ReadyCheck = func(context.Context) error {
			if rabbitDown {
				return errors.New("rabbitmq: connection refused")
			}
			return nil
		}
	})
	if r := e.do("GET", "/healthz", "", nil); r.status != 200 || string(r.body) != `{"status":"ok"}` {
		t.Fatalf("healthz: %s", r)
	}
	if r := e.do("GET", "/readyz", "", nil); r.status != 200 {
		t.Fatalf("readyz: %s", r)
	}
	// Flushed script cache: the probe reloads the script and stays ready.
	if err := e.rdb.ScriptFlush(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	if r := e.do("GET", "/readyz", "", nil); r.status != 200 {
		t.Fatalf("readyz after SCRIPT FLUSH: %s", r)
	}
	// The probe wrote nothing.
	if keys, _ := e.rdb.Keys(context.Background(), lua.Prefix+"*").Result(); len(keys) != 0 {
		t.Fatalf("probe left keys %v", keys)
	}
	rabbitDown = true
	msg := e.do("GET", "/readyz", "", nil).wantError(t, 503, CodeUnavailable)
	if !strings.Contains(msg, "rabbitmq") || strings.Contains(msg, "redis") || strings.Contains(msg, "mysql") {
		t.Fatalf("message %q", msg)
	}
}

// A readiness problem marked public (the broker's health as the roles of
// the process saw it) is shown whole, next to the names of the others.
func TestReadyShowsPublicProblems(t *testing.T) {
	blocked := errors.New("rabbitmq: broker blocked publishers (low on memory); queue stampede.order.created: publishes nacked 3 times in a row")
	e := newEnv(t, func(c *Config) {
		c.ReadyCheck = func(context.Context) error { return PublicNotReady(blocked) }
	})
	msg := e.do("GET", "/readyz", "", nil).wantError(t, 503, CodeUnavailable)
	if msg != "not ready: "+blocked.Error() {
		t.Fatalf("readyz message %q", msg)
	}
}

// With Redis unreachable the gateway answers 503 UNAVAILABLE with
// Retry-After; once the breaker is open it answers without trying Redis.
func TestRedisUnavailable(t *testing.T) {
	e := newEnv(t)
	pid := e.product(openSale(10))

	dead := redis.NewClient(&redis.Options{Addr: closedAddr(t), DB: 2, MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { dead.Close() })
	srv, err := New(baseConfig(), dead, e.store, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	hc, _ := serveInMemory(t, srv)
	tok := token(t, 1)
	body := fmt.Sprintf(`{"productId":%d,"quantity":1,"requestId":"down"}`, pid)
	for i := range 20 {
		start := time.Now()
		r := doHTTP(t, hc, "POST", "/api/orders", tok, body)
		r.wantError(t, 503, CodeUnavailable)
		if r.header.Get("Retry-After") != "1" {
			t.Fatalf("Retry-After %q", r.header.Get("Retry-After"))
		}
		if i >= 5 { // assert correctness only; the time is for the log
			t.Logf("request %d with the breaker open: %v", i, time.Since(start))
		}
	}
	if st := srv.breaker.State().String(); st != "open" {
		t.Fatalf("breaker %s, want open", st)
	}
	doHTTP(t, hc, "GET", "/api/products", "", nil).wantError(t, 503, CodeUnavailable)
	msg := doHTTP(t, hc, "GET", "/readyz", "", nil).wantError(t, 503, CodeUnavailable)
	if msg != "not ready: redis" { // the dependency's name, never its address or error (those go to the log)
		t.Fatalf("readyz message %q", msg)
	}
	if err := srv.Ready(context.Background()); err == nil || !strings.HasPrefix(err.Error(), "redis: ") {
		t.Fatalf("Ready: %v", err)
	}
	// The healthy gateway on the real Redis is unaffected and nothing was reserved.
	if a, n := e.available(pid, 0), e.intake(pid); a != 10 || n != 0 {
		t.Fatalf("available %d, intake %d", a, n)
	}
	if r := e.buy(1, pid, 1, "down"); r.status != 202 {
		t.Fatalf("healthy gateway: %s", r)
	}
}

// The breaker closes again once Redis answers.
func TestBreakerRecovers(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.BreakerOpen = 100 * time.Millisecond })
	pid := e.product(openSale(10))
	// Five failed Redis calls (as a timeout or a refused dial would fail)
	// open the breaker.
	for range 5 {
		_ = e.srv.redisCall(func(context.Context) error { return errors.New("simulated network error") })
	}
	if st := e.srv.breaker.State().String(); st != "open" {
		t.Fatalf("breaker %s", st)
	}
	e.buy(1, pid, 1, "r").wantError(t, 503, CodeUnavailable)
	time.Sleep(150 * time.Millisecond)
	if r := e.buy(1, pid, 1, "r"); r.status != 202 {
		t.Fatalf("after recovery: %s", r)
	}
	// Script outcomes are successes, not failures.
	for i := range 10 {
		e.buy(int64(100+i), 999999, 1, "r").wantError(t, 404, CodeProductNotFound)
	}
	if st := e.srv.breaker.State().String(); st != "closed" {
		t.Fatalf("breaker %s after script outcomes", st)
	}
}

// The order path does not need MySQL: with the store closed, new orders are
// still accepted; only what must read MySQL answers 503.
func TestCreateOrderWithoutMySQL(t *testing.T) {
	e := newEnv(t)
	pid := e.product(openSale(10))
	down, err := persistence.Open(context.Background(), persistencetest.DSNFor(t, "gateway"))
	if err != nil {
		t.Fatal(err)
	}
	down.Close() // every query now fails
	srv, err := New(baseConfig(), e.rdb, down, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	hc, _ := serveInMemory(t, srv)
	tok := token(t, 1)
	body := fmt.Sprintf(`{"productId":%d,"quantity":1,"requestId":"no-mysql"}`, pid)
	r := doHTTP(t, hc, "POST", "/api/orders", tok, body)
	if r.status != 202 {
		t.Fatalf("order without MySQL: %s", r)
	}
	no := r.json(t)["orderNo"].(string)
	// A replay is answered from Redis alone (its last known status).
	if r := doHTTP(t, hc, "POST", "/api/orders", tok, body); r.status != 200 || r.json(t)["orderNo"] != no || r.json(t)["status"] != "PROCESSING" {
		t.Fatalf("replay without MySQL: %s", r)
	}
	doHTTP(t, hc, "GET", "/api/orders/"+no, tok, nil).wantError(t, 503, CodeUnavailable)
	doHTTP(t, hc, "GET", "/api/products", "", nil).wantError(t, 503, CodeUnavailable)
	msg := doHTTP(t, hc, "GET", "/readyz", "", nil).wantError(t, 503, CodeUnavailable)
	if msg != "not ready: mysql" {
		t.Fatalf("readyz message %q", msg)
	}
	if a := e.available(pid, 0); a != 9 {
		t.Fatalf("available %d", a)
	}
}
