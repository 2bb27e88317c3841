package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-sh/stampede/lua"
	"github.com/stampede-sh/stampede/order"
	"github.com/stampede-sh/stampede/persistence"
	"github.com/stampede-sh/stampede/pipeline"
)

// fakeOps records the admin operations it was asked for. It answers with
// the pipeline's own report types (what pipeline.Ops answers), so the
// contract check of doHTTP holds them to api/openapi.yaml.
type fakeOps struct {
	replayed []string
	all      bool
	limit    int
}

func (f *fakeOps) Reconcile(context.Context) (any, bool, error) {
	check := pipeline.Check{Name: "1 stock never negative", OK: true, Detail: "redis 3, mysql 3"}
	return pipeline.Report{
		At: time.Now().UTC(), Outbox: map[string]int64{"SENT": 4}, OutboxOldest: 0, OutboxPending: 0,
		Products: []pipeline.ProductAudit{{ProductID: 1, Name: "Flash widget", Total: 5, RedisAvailable: 3,
			RedisShards: []int64{3}, MySQL: persistence.Stock{ProductID: 1, Available: 3, Locked: 1, Sold: 1, Version: 3},
			Orders: map[order.Status][2]int64{order.WaitingPay: {1, 1}, order.Paid: {1, 1}},
			Checks: []pipeline.Check{check}}},
		Checks: []pipeline.Check{check}, OK: true,
	}, true, nil
}

func (f *fakeOps) DLQ(_ context.Context, limit int) (any, error) {
	f.limit = limit
	return pipeline.DLQReport{Depth: 1, Messages: []pipeline.DLQMessage{{EventID: "e-1", Type: "ORDER_CREATED",
		Queue: "order.created", Reason: "rejected", Attempts: 3, Body: "{}", Published: time.Now().UTC(), OutboxStatus: "SENT"}},
		DeadOutbox: []persistence.DeadOutboxRow{}}, nil
}

func (f *fakeOps) ReplayDLQ(_ context.Context, ids []string, all, _ bool) (any, error) {
	f.replayed, f.all = ids, all
	return pipeline.ReplayResult{Replayed: ids, Acked: len(ids), Dropped: []string{}, Kept: []string{}, NotFound: []string{}}, nil
}

func TestAdminOpsEndpoints(t *testing.T) {
	ops := &fakeOps{}
	e := newEnv(t, func(c *Config) { c.Ops = ops })
	user, admin := token(t, 1), token(t, adminID)
	for _, tc := range []struct{ method, path string }{
		{"GET", "/api/admin/reconcile"}, {"GET", "/api/admin/dlq"}, {"POST", "/api/admin/dlq/replay"},
		{"POST", "/api/admin/products/1/stock"},
	} {
		e.do(tc.method, tc.path, "", malformed(`{}`)).wantError(t, 401, CodeUnauthenticated)
		e.do(tc.method, tc.path, user, malformed(`{}`)).wantError(t, 403, CodeForbidden)
	}
	if r := e.do("GET", "/api/admin/reconcile", admin, nil); r.status != 200 || r.json(t)["ok"] != true {
		t.Errorf("reconcile: %s", r)
	}
	if r := e.do("GET", "/api/admin/dlq?limit=7", admin, nil); r.status != 200 || ops.limit != 7 || !strings.Contains(string(r.body), `"depth":1`) {
		t.Errorf("dlq: %s (limit %d)", r, ops.limit)
	}
	e.do("GET", "/api/admin/dlq?limit=0", admin, malformed(nil)).wantError(t, 400, CodeInvalidArgument)
	if r := e.do("POST", "/api/admin/dlq/replay", admin, `{"eventIds":["a","b"]}`); r.status != 200 || len(ops.replayed) != 2 {
		t.Errorf("replay: %s %v", r, ops.replayed)
	}
	if r := e.do("POST", "/api/admin/dlq/replay", admin, `{"all":true}`); r.status != 200 || !ops.all {
		t.Errorf("replay all: %s", r)
	}
	for _, body := range []string{`{}`, `{"all":true,"eventIds":["a"]}`, `{"all":false}`, `{"eventIds":[]}`, `{"x":1}`, `[`} {
		e.do("POST", "/api/admin/dlq/replay", admin, malformed(body)).wantError(t, 400, CodeInvalidArgument)
	}
}

func TestAdminOpsUnconfigured(t *testing.T) {
	e := newEnv(t)
	e.do("GET", "/api/admin/dlq", token(t, adminID), nil).wantError(t, 503, CodeUnavailable)
}

func TestAdminAdjustStockOncePerRepairNo(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	pid := e.product(openSale(10))
	admin := token(t, adminID)
	path := fmt.Sprintf("/api/admin/products/%d/stock", pid)

	for i := range 3 { // the first applies, the replays change nothing
		r := e.do("POST", path, admin, `{"delta":5,"repairNo":"R-1","reason":"found a pallet"}`)
		m := r.json(t)
		if r.status != 200 || m["applied"] != (i == 0) || fmt.Sprint(m["mysqlAvailable"]) != "15" || fmt.Sprint(m["redisAvailable"]) != "15" {
			t.Fatalf("adjust %d: %s", i, r)
		}
	}
	e.do("POST", path, admin, `{"delta":6,"repairNo":"R-1"}`).wantError(t, 409, CodeConflict)
	e.do("POST", path, admin, `{"delta":-100,"repairNo":"R-2"}`).wantError(t, 409, CodeInsufficientStock)
	e.do("POST", path, admin, malformed(`{"delta":0,"repairNo":"R-3"}`)).wantError(t, 400, CodeInvalidArgument)
	e.do("POST", path, admin, malformed(`{"delta":1,"repairNo":"bad repair no"}`)).wantError(t, 400, CodeInvalidArgument)
	e.do("POST", "/api/admin/products/999999/stock", admin, `{"delta":1,"repairNo":"R-4"}`).wantError(t, 404, CodeProductNotFound)
	if r := e.do("POST", path, admin, `{"delta":-3,"repairNo":"R-5"}`); r.status != 200 {
		t.Fatalf("negative adjust: %s", r)
	}

	var flows int64
	if err := e.store.DB.QueryRow(`SELECT COUNT(*) FROM stock_flow WHERE biz_type = 'ADJUST' AND product_id = ?`, pid).Scan(&flows); err != nil || flows != 2 {
		t.Fatalf("%d ADJUST flows, %v", flows, err)
	}
	if a := e.available(pid, 0); a != 12 {
		t.Fatalf("redis available %d, want 12", a)
	}
	st, err := e.store.GetStock(ctx, pid)
	if err != nil || st.Available != 12 {
		t.Fatalf("mysql stock %+v %v", st, err)
	}
	rep, err := pipeline.Reconcile(ctx, e.rdb, e.store, []int64{pid})
	if err != nil || !rep.OK {
		t.Fatalf("reconcile: %v %v", rep.Failed(), err)
	}
}

// freePort returns a loopback port nothing listens on.
func freePort(t *testing.T) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// privateRedis starts redis-server on a free loopback port with args, and
// kills it at cleanup.
func privateRedis(t *testing.T, args ...string) *redis.Client {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip("redis-server not on PATH")
	}
	port := freePort(t)
	cmd := exec.Command(bin, append([]string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "",
		"--appendonly", "no", "--dir", t.TempDir()}, args...)...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + strconv.Itoa(port)})
	t.Cleanup(func() { rdb.Close() })
	deadline := time.Now().Add(10 * time.Second)
	for rdb.Ping(context.Background()).Err() != nil {
		if time.Now().After(deadline) {
			t.Fatal("private redis did not start")
		}
		time.Sleep(20 * time.Millisecond)
	}
	return rdb
}

func TestCheckRedisRefusesEviction(t *testing.T) {
	ctx := context.Background()
	lru := privateRedis(t, "--maxmemory-policy", "allkeys-lru")
	err := CheckRedis(ctx, lru, testLogger(t))
	if !errors.Is(err, ErrRedisEviction) || !strings.Contains(err.Error(), "allkeys-lru") || !strings.Contains(err.Error(), "oversold") {
		t.Fatalf("allkeys-lru: %v", err)
	}
	ok := privateRedis(t, "--maxmemory-policy", "noeviction")
	if err := CheckRedis(ctx, ok, testLogger(t)); err != nil {
		t.Fatalf("noeviction: %v", err)
	}
	// CONFIG renamed away: a warning, not a refusal.
	noConfig := privateRedis(t, "--maxmemory-policy", "allkeys-lru", "--rename-command", "CONFIG", "")
	if err := CheckRedis(ctx, noConfig, testLogger(t)); err != nil {
		t.Fatalf("no CONFIG: %v", err)
	}
	if err := lua.LoadAll(ctx, ok); err != nil {
		t.Fatal(err)
	}
}

// Every log line of an admin's action names the admin (adminId, and the
// provider's issuer and subject for a mapped user), as the audit rows do:
// product creation, a sale change, a stock repair, the waiting room.
// Before, "stock repaired" named nobody.
func TestAdminLogLinesNameTheAdmin(t *testing.T) {
	e := newEnv(t)
	var buf logBuffer
	srv, err := New(baseConfig(), e.rdb, e.store, slog.New(slog.NewTextHandler(&buf, nil)))
	if err != nil {
		t.Fatal(err)
	}
	a := &env{t: t, rdb: e.rdb, store: e.store, srv: srv}
	a.hc, a.ln = serveInMemory(t, srv)
	admin := token(t, adminID)
	pid := a.product(openSale(10))
	if r := a.do("PATCH", fmt.Sprintf("/api/admin/products/%d", pid), admin, map[string]any{"name": "Renamed"}); r.status != 200 {
		t.Fatalf("PATCH: %s", r)
	}
	if r := a.do("POST", fmt.Sprintf("/api/admin/products/%d/stock", pid), admin, `{"delta":2,"repairNo":"R-9","reason":"recount"}`); r.status != 200 {
		t.Fatalf("stock repair: %s", r)
	}
	if r := a.do("POST", fmt.Sprintf("/api/admin/products/%d/waiting-room", pid), admin, map[string]any{"on": true}); r.status != 200 {
		t.Fatalf("room: %s", r)
	}
	seen := 0
	for _, line := range strings.Split(buf.String(), "\n") {
		for _, msg := range []string{`msg="product created"`, `msg="sale changed"`, `msg="stock repaired"`, `msg="waiting room set"`} {
			if strings.Contains(line, msg) {
				seen++
				if !strings.Contains(line, "adminId="+strconv.Itoa(adminID)) {
					t.Errorf("an admin's log line names no admin: %s", line)
				}
			}
		}
	}
	if seen != 4 {
		t.Fatalf("%d of the 4 admin lines logged:\n%s", seen, buf.String())
	}
}
