package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/valyala/fasthttp/fasthttputil"
	"go.uber.org/goleak"

	"github.com/stampede-sh/stampede/auth"
	"github.com/stampede-sh/stampede/lua"
	"github.com/stampede-sh/stampede/lua/luatest"
	"github.com/stampede-sh/stampede/order"
	"github.com/stampede-sh/stampede/persistence"
	"github.com/stampede-sh/stampede/persistence/persistencetest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// fasthttp refreshes its Date header from one process-wide goroutine
		// that it starts on first use and never stops.
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"),
		// A stopped server's worker-pool cleaner notices the stop only
		// after its idle sleep (MaxIdleWorkerDuration, 10s).
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*workerPool).Start.func2"),
	)
}

var (
	testJWTSecret = []byte("gateway-test-jwt-secret")
	testPaySecret = []byte("gateway-test-payment-secret")
)

const adminID = 9000

// env is one gateway served on an in-memory listener, with its Redis DB and
// MySQL database emptied. Tests using it must not run in parallel.
type env struct {
	t     testing.TB
	rdb   *redis.Client
	store *persistence.Store
	srv   *Server
	hc    *http.Client
	ln    *fasthttputil.InmemoryListener
}

func baseConfig() Config {
	return Config{
		JWTSecret:     testJWTSecret,
		PaymentSecret: testPaySecret,
		AdminUsers:    []int64{adminID},
		NodeID:        7,
		// Correctness tests run 500 requests at once on a loaded 2-core
		// machine: a generous Redis timeout keeps them about correctness.
		RedisTimeout: 10 * time.Second,
		// The binary's defaults (STAMPEDE_LOOKUP_PIPELINE, STAMPEDE_SOLDOUT_BUYERS).
		LookupPipeline: 64,
		SoldOutBuyers:  100_000,
	}
}

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo}))
}

func newEnv(t testing.TB, mods ...func(*Config)) *env {
	t.Helper()
	e := &env{t: t, rdb: luatest.New(t, luatest.DBGateway), store: persistencetest.New(t, "gateway")}
	cfg := baseConfig()
	for _, m := range mods {
		m(&cfg)
	}
	srv, err := New(cfg, e.rdb, e.store, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	e.srv = srv
	e.hc, e.ln = serveInMemory(t, srv)
	return e
}

// serveInMemory runs srv.Serve on an in-memory listener until the test ends
// and returns an HTTP client dialing it.
func serveInMemory(t testing.TB, srv *Server) (*http.Client, *fasthttputil.InmemoryListener) {
	ln := fasthttputil.NewInmemoryListener()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	tr := &http.Transport{
		DialContext:         func(context.Context, string, string) (net.Conn, error) { return ln.Dial() },
		MaxIdleConns:        1000,
		MaxIdleConnsPerHost: 1000,
	}
	t.Cleanup(func() {
		tr.CloseIdleConnections()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}, ln
}

// resp is one HTTP answer.
type resp struct {
	status int
	header http.Header
	body   []byte
}

func (r resp) String() string { return fmt.Sprintf("%d %s", r.status, r.body) }

func (r resp) json(t testing.TB) map[string]any {
	t.Helper()
	var m map[string]any
	d := json.NewDecoder(bytes.NewReader(r.body))
	d.UseNumber()
	if err := d.Decode(&m); err != nil {
		t.Fatalf("response %s is not a JSON object: %v", r, err)
	}
	return m
}

// errCode returns the error code and message of an error body ("" if none).
func (r resp) errCode(t testing.TB) (code, message string) {
	t.Helper()
	var b struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	if err := json.Unmarshal(r.body, &b); err != nil {
		t.Fatalf("response %s: %v", r, err)
	}
	return b.Error.Code, b.Error.Message
}

// wantError checks status and code of an error answer and returns the message.
func (r resp) wantError(t testing.TB, status int, code string) string {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d (%s)", r.status, status, r.body)
	}
	got, msg := r.errCode(t)
	if got != code || msg == "" {
		t.Fatalf("error %q %q, want code %s (%s)", got, msg, code, r.body)
	}
	if status == 503 && r.header.Get("Retry-After") == "" {
		t.Fatalf("503 without Retry-After: %s", r)
	}
	return msg
}

// do sends one request; body may be nil, a string, []byte or a value to encode.
func (e *env) do(method, path, token string, body any, header ...string) resp {
	e.t.Helper()
	return doHTTP(e.t, e.hc, method, path, token, body, header...)
}

// doHTTP sends one request and checks the exchange against the API contract
// (openapi_test.go): a request or response that does not match
// api/openapi.yaml fails the test. Wrap a deliberately bad body in
// malformed(...) to skip the request's check.
func doHTTP(t testing.TB, hc *http.Client, method, path, token string, body any, header ...string) resp {
	t.Helper()
	m, skipRequest := body.(malformedBody)
	if skipRequest {
		body = m.body
	}
	n, notAPI := body.(notAPIBody)
	if notAPI {
		body = n.body
	}
	var raw []byte
	switch b := body.(type) {
	case nil:
	case string:
		raw = []byte(b)
	case []byte:
		raw = b
	default:
		j, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		raw = j
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, "http://gateway"+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := hc.Do(req)
	if err != nil {
		t.Errorf("%s %s: %v", method, path, err)
		return resp{}
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Errorf("%s %s: read body: %v", method, path, err)
	}
	r := resp{status: res.StatusCode, header: res.Header, body: b}
	if body != nil && req.Header.Get("Content-Type") == "" {
		req.Header.Set("Content-Type", "application/json") // what a client sends; the gateway does not require it
	}
	checkContract(t, method, path, req.Header, raw, skipRequest, notAPI, r)
	return r
}

func token(t testing.TB, userID int64) string {
	t.Helper()
	tok, err := auth.Issue(testJWTSecret, userID, userID == adminID, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// productSpec is the body of POST /api/admin/products.
type productSpec struct {
	Name         string `json:"name"`
	Price        int64  `json:"price"`
	Stock        int64  `json:"stock"`
	SaleStart    string `json:"saleStart"`
	SaleEnd      string `json:"saleEnd"`
	PerUserLimit int64  `json:"perUserLimit"`
	Shards       int64  `json:"shards,omitempty"`
	MaxPerOrder  int64  `json:"maxPerOrder,omitempty"`
}

// openSale is a product on sale now.
func openSale(stock int64) productSpec {
	now := time.Now().UTC()
	return productSpec{Name: "Flash widget", Price: 1999, Stock: stock,
		SaleStart: now.Add(-time.Hour).Format(time.RFC3339), SaleEnd: now.Add(time.Hour).Format(time.RFC3339)}
}

// product creates p through the admin endpoint and returns its id.
func (e *env) product(p productSpec) int64 {
	e.t.Helper()
	r := e.do("POST", "/api/admin/products", token(e.t, adminID), p)
	if r.status != 201 {
		e.t.Fatalf("create product: %s", r)
	}
	id, err := r.json(e.t)["id"].(json.Number).Int64()
	if err != nil {
		e.t.Fatal(err)
	}
	return id
}

// available is the Redis available count of shard sh of pid.
func (e *env) available(pid int64, sh int) int64 {
	e.t.Helper()
	n, err := e.rdb.HGet(context.Background(), lua.ShardKeys(pid, sh).Stock(), "available").Int64()
	if err != nil {
		e.t.Fatalf("available of %d/%d: %v", pid, sh, err)
	}
	return n
}

// intake is the length of shard 0's intake stream of pid.
func (e *env) intake(pid int64) int64 {
	e.t.Helper()
	n, err := e.rdb.XLen(context.Background(), lua.ShardKeys(pid, 0).Intake()).Result()
	if err != nil {
		e.t.Fatal(err)
	}
	return n
}

type orderReq struct {
	ProductID int64  `json:"productId"`
	Quantity  int64  `json:"quantity"`
	RequestID string `json:"requestId"`
}

// buy posts an order and returns the answer.
func (e *env) buy(user, pid, qty int64, rid string) resp {
	e.t.Helper()
	return e.do("POST", "/api/orders", token(e.t, user), orderReq{pid, qty, rid})
}

// accepted buys and requires a 202; it returns the orderNo.
func (e *env) accepted(user, pid, qty int64, rid string) string {
	e.t.Helper()
	r := e.buy(user, pid, qty, rid)
	if r.status != 202 {
		e.t.Fatalf("buy %d×%d of %d: %s", user, qty, pid, r)
	}
	return r.json(e.t)["orderNo"].(string)
}

// record does what the writers do for orderNo: reads its reservation from
// the intake stream and stores it in MySQL (PROCESSING).
func (e *env) record(orderNo string) {
	e.t.Helper()
	ctx := context.Background()
	_, shard, pid, err := order.ParseNo(orderNo)
	if err != nil {
		e.t.Fatal(err)
	}
	entries, err := e.rdb.XRange(ctx, lua.ShardKeys(pid, shard).Intake(), "-", "+").Result()
	if err != nil {
		e.t.Fatal(err)
	}
	for _, en := range entries {
		if en.Values[lua.FieldOrderNo] != orderNo {
			continue
		}
		r, err := lua.ParseReservation(en.Values)
		if err != nil {
			e.t.Fatal(err)
		}
		if _, err := e.store.InsertReservations(ctx, []order.Reservation{r}, map[int64]string{pid: "Flash widget"}); err != nil {
			e.t.Fatal(err)
		}
		return
	}
	e.t.Fatalf("no intake entry for %s", orderNo)
}

// lock does what the consumer does: PROCESSING → WAITING_PAY, then the new
// status into the idempotency record for replays (pipeline.CacheStatus).
func (e *env) lock(orderNo string) {
	e.t.Helper()
	out, o, err := e.store.LockStock(context.Background(), order.CreatedEventID(orderNo), orderNo, "gateway-test", 15*time.Minute)
	if err != nil || out != persistence.LockLocked {
		e.t.Fatalf("lock %s: %v %v", orderNo, out, err)
	}
	_, shard, pid, _ := order.ParseNo(orderNo)
	if _, err := lua.SetStatus(context.Background(), e.rdb, lua.ShardKeys(pid, shard), o.UserID, o.RequestID, orderNo, string(o.Status)); err != nil {
		e.t.Fatal(err)
	}
}

// waitingPay buys, records and locks an order: it is WAITING_PAY in MySQL.
func (e *env) waitingPay(user, pid, qty int64, rid string) string {
	e.t.Helper()
	no := e.accepted(user, pid, qty, rid)
	e.record(no)
	e.lock(no)
	return no
}

func (e *env) orderStatus(no string) order.Status {
	e.t.Helper()
	o, err := e.store.GetOrder(context.Background(), no)
	if err != nil {
		e.t.Fatal(err)
	}
	return o.Status
}

// closedAddr is a loopback address nobody listens on.
func closedAddr(t testing.TB) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// maxStock is the largest stock of a product (the operator's bound).
const maxStock = persistence.MaxUnits

// adminBodyBytes is the operator's body limit of product creation.
const adminBodyBytes = 16 << 10
