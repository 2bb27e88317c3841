package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-sh/stampede/order"
	"github.com/stampede-sh/stampede/persistence"
	"github.com/stampede-sh/stampede/persistence/persistencetest"
)

func TestGetOrder(t *testing.T) {
	e := newEnv(t)
	pid := e.product(openSale(10))
	before := time.Now().Add(-time.Second)
	no := e.accepted(1, pid, 3, "get-me")

	// Only in Redis: PROCESSING from the pending record.
	r := e.do("GET", "/api/orders/"+no, token(t, 1), nil)
	if r.status != 200 {
		t.Fatalf("pending: %s", r)
	}
	var o struct {
		OrderNo, RequestID, Status string
		ProductID, Quantity        int64
		Amount, Version            int64
		CreatedAt, UpdatedAt       time.Time
		PayDeadline                *time.Time
	}
	if err := json.Unmarshal(r.body, &o); err != nil {
		t.Fatal(err)
	}
	if o.OrderNo != no || o.RequestID != "get-me" || o.Status != "PROCESSING" || o.ProductID != pid || o.Quantity != 3 ||
		o.Amount != 3*1999 || o.Version != 1 || o.PayDeadline != nil || o.CreatedAt.Before(before) || !o.UpdatedAt.Equal(o.CreatedAt) {
		t.Fatalf("pending order %s", r.body)
	}
	if m := r.json(t); len(m) != 10 {
		t.Fatalf("order has %d fields, want 10: %s", len(m), r.body)
	}

	// Not the owner, unknown, malformed: 404.
	e.do("GET", "/api/orders/"+no, token(t, 2), nil).wantError(t, 404, CodeNotFound)
	e.do("GET", "/api/orders/"+no[:len(no)-1]+"9", token(t, 1), nil).wantError(t, 404, CodeNotFound)
	e.do("GET", "/api/orders/not-an-order", token(t, 1), nil).wantError(t, 404, CodeNotFound)
	e.do("GET", "/api/orders/"+no, "", nil).wantError(t, 401, CodeUnauthenticated)

	// In MySQL and locked: WAITING_PAY with a pay deadline.
	e.record(no)
	e.lock(no)
	r = e.do("GET", "/api/orders/"+no, token(t, 1), nil)
	if err := json.Unmarshal(r.body, &o); err != nil || r.status != 200 {
		t.Fatalf("stored: %s %v", r, err)
	}
	if o.Status != "WAITING_PAY" || o.Version != 2 || o.PayDeadline == nil || o.PayDeadline.Before(time.Now().Add(14*time.Minute)) ||
		o.Amount != 3*1999 || o.RequestID != "get-me" {
		t.Fatalf("stored order %s", r.body)
	}
	e.do("GET", "/api/orders/"+no, token(t, 2), nil).wantError(t, 404, CodeNotFound)
}

func TestListOrders(t *testing.T) {
	e := newEnv(t)
	pid := e.product(openSale(100))
	var nos []string
	for i := range 3 {
		no := e.accepted(1, pid, 1, fmt.Sprint("list-", i))
		e.record(no)
		nos = append(nos, no)
	}
	e.record(e.accepted(2, pid, 1, "someone-else"))
	tok := token(t, 1)

	var page struct {
		Orders []struct {
			OrderNo string
			Status  string
		}
		NextCursor *string
	}
	r := e.do("GET", "/api/orders?limit=2", tok, nil)
	if err := json.Unmarshal(r.body, &page); err != nil || r.status != 200 {
		t.Fatalf("page 1: %s", r)
	}
	if len(page.Orders) != 2 || page.Orders[0].OrderNo != nos[2] || page.Orders[1].OrderNo != nos[1] || page.NextCursor == nil {
		t.Fatalf("page 1: %s", r.body)
	}
	r = e.do("GET", "/api/orders?limit=2&cursor="+*page.NextCursor, tok, nil)
	page.NextCursor = nil
	if err := json.Unmarshal(r.body, &page); err != nil || r.status != 200 {
		t.Fatalf("page 2: %s", r)
	}
	if len(page.Orders) != 1 || page.Orders[0].OrderNo != nos[0] || page.NextCursor != nil {
		t.Fatalf("page 2: %s", r.body)
	}
	// Default limit, and a user without orders gets an empty list.
	if r := e.do("GET", "/api/orders", tok, nil); r.status != 200 || len(r.json(t)["orders"].([]any)) != 3 {
		t.Fatalf("default limit: %s", r)
	}
	if r := e.do("GET", "/api/orders", token(t, 3), nil); r.status != 200 || string(r.body) != `{"orders":[],"nextCursor":null}` {
		t.Fatalf("no orders: %s", r)
	}
	for _, q := range []string{"limit=0", "limit=101", "limit=abc", "limit=", "limit=1.5", "cursor=abc", "cursor=-5"} {
		e.do("GET", "/api/orders?"+q, tok, malformed(nil)).wantError(t, 400, CodeInvalidArgument)
	}
}

// orderKeyHook counts the Redis commands a client sends on pending order
// records (Keys.Order): the order read's Redis work, not the gateways'
// background checks.
type orderKeyHook struct{ n atomic.Int64 }

func (h *orderKeyHook) count(cmds ...redis.Cmder) {
	for _, c := range cmds {
		for _, a := range c.Args() {
			if s, ok := a.(string); ok && strings.Contains(s, "}:order:") {
				h.n.Add(1)
				break
			}
		}
	}
}

func (h *orderKeyHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *orderKeyHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.count(cmd)
		return next(ctx, cmd)
	}
}
func (h *orderKeyHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.count(cmds...)
		return next(ctx, cmds)
	}
}

// GET /api/orders/{orderNo} tells nothing of another user's orders: its
// not-found paths — no such order, another user's stored order, another
// user's order still pending in Redis — read the same (the same MySQL
// queries and Redis commands), so they cost the same. Before, another
// user's stored order answered after one MySQL read (430 µs) and a missing
// one after two and a Redis read (723 µs).
func TestOrderNotFoundPathsCostTheSame(t *testing.T) {
	e := newEnv(t)
	pid := e.product(openSale(10))
	stored := e.waitingPay(1, pid, 1, "s")
	pending := e.accepted(1, pid, 1, "p")
	gen, _ := order.NewNoGenerator(900) // a well-formed orderNo nobody has
	nobody := gen.Next(pid, 0)
	// The reads are counted on a gateway whose store has one MySQL
	// connection: its session's Com_select counts that gateway's selects
	// and nothing else (other packages' tests share the server).
	one, err := persistence.Open(context.Background(), persistencetest.DSN(persistencetest.Name(e.store)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { one.Close() })
	one.DB.SetMaxOpenConns(1)
	one.DB.SetMaxIdleConns(1)
	one.DB.SetConnMaxLifetime(0)
	one.DB.SetConnMaxIdleTime(0)
	srv, err := New(baseConfig(), e.rdb, one, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	g := &env{t: t, rdb: e.rdb, store: one, srv: srv}
	g.hc, g.ln = serveInMemory(t, srv)
	selects := func() int64 {
		var name string
		var n int64
		if err := one.DB.QueryRow(`SHOW SESSION STATUS LIKE 'Com_select'`).Scan(&name, &n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	hook := &orderKeyHook{}
	e.rdb.AddHook(hook)
	const reads = 10
	cost := map[string][2]int64{}
	for name, no := range map[string]string{"no such order": nobody, "another's stored": stored, "another's pending": pending} {
		s0, r0 := selects(), hook.n.Load()
		for range reads {
			g.do("GET", "/api/orders/"+no, token(t, 2), nil).wantError(t, 404, CodeNotFound)
		}
		cost[name] = [2]int64{selects() - s0, hook.n.Load() - r0}
	}
	want := cost["no such order"]
	for name, c := range cost {
		if c != want {
			t.Errorf("%s: %d MySQL selects and %d Redis commands for %d reads; no such order: %d and %d", name, c[0], c[1], reads, want[0], want[1])
		}
	}
	if r := g.do("GET", "/api/orders/"+stored, token(t, 1), nil); r.status != 200 {
		t.Fatalf("the owner's read: %s", r)
	}
}

// Order reads have a per-user token bucket of their own (Config.RateUserRead):
// past it 429 RATE_LIMITED with Retry-After, for that user only.
func TestOrderReadsRateLimitedPerUser(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.RateUserRead, c.RateUserReadBurst = 0.5, 3 })
	pid := e.product(openSale(10))
	no := e.accepted(1, pid, 1, "r")
	for i := range 3 {
		if r := e.do("GET", "/api/orders/"+no, token(t, 1), nil); r.status != 200 {
			t.Fatalf("read %d: %s", i, r)
		}
	}
	r := e.do("GET", "/api/orders/"+no, token(t, 1), nil)
	r.wantError(t, 429, CodeRateLimited)
	if r.header.Get("Retry-After") == "" {
		t.Fatal("429 without Retry-After")
	}
	e.do("GET", "/api/orders", token(t, 1), nil).wantError(t, 429, CodeRateLimited)
	if r := e.do("GET", "/api/orders", token(t, 2), nil); r.status != 200 {
		t.Fatalf("another user's read: %s", r)
	}
}
