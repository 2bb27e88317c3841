package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/stampede-sh/stampede/lua"
	"github.com/stampede-sh/stampede/order"
)

// Every malformed order request answers 400 INVALID_ARGUMENT naming the
// field (or the body, for errors of the body as a whole) and reserves nothing.
func TestCreateOrderValidation(t *testing.T) {
	e := newEnv(t)
	pid := e.product(openSale(10))
	tok := token(t, 1)
	p := fmt.Sprint(pid)
	for _, tc := range []struct {
		name, body, field string
	}{
		{"unknown field", `{"productId":` + p + `,"quantity":1,"requestId":"r1","coupon":"x"}`, "coupon"},
		{"duplicate key", `{"productId":` + p + `,"quantity":1,"quantity":2,"requestId":"r1"}`, "quantity"},
		{"case duplicate key", `{"productId":` + p + `,"quantity":1,"Quantity":2,"requestId":"r1"}`, "Quantity"},
		{"fraction", `{"productId":` + p + `,"quantity":1.5,"requestId":"r1"}`, "quantity"},
		{"whole fraction", `{"productId":` + p + `,"quantity":1.0,"requestId":"r1"}`, "quantity"},
		{"exponent", `{"productId":` + p + `,"quantity":1e2,"requestId":"r1"}`, "quantity"},
		{"string number", `{"productId":` + p + `,"quantity":"7","requestId":"r1"}`, "quantity"},
		{"above int64", `{"productId":9223372036854775808,"quantity":1,"requestId":"r1"}`, "productId"},
		{"negative quantity", `{"productId":` + p + `,"quantity":-1,"requestId":"r1"}`, "quantity"},
		{"zero quantity", `{"productId":` + p + `,"quantity":0,"requestId":"r1"}`, "quantity"},
		{"negative product", `{"productId":-` + p + `,"quantity":1,"requestId":"r1"}`, "productId"},
		{"missing requestId", `{"productId":` + p + `,"quantity":1}`, "requestId"},
		{"bad requestId chars", `{"productId":` + p + `,"quantity":1,"requestId":"r 1/ä"}`, "requestId"},
		{"65-char requestId", `{"productId":` + p + `,"quantity":1,"requestId":"` + strings.Repeat("a", 65) + `"}`, "requestId"},
		{"empty requestId", `{"productId":` + p + `,"quantity":1,"requestId":""}`, "requestId"},
		{"null requestId", `{"productId":` + p + `,"quantity":1,"requestId":null}`, "requestId"},
		{"trailing garbage", `{"productId":` + p + `,"quantity":1,"requestId":"r1"} trailing`, "body"},
		{"two objects", `{"productId":` + p + `,"quantity":1,"requestId":"r1"}{"productId":1}`, "body"},
		{"empty body", ``, "body"},
		{"array body", `[{"productId":` + p + `}]`, "body"},
		{"quantity above max per order", `{"productId":` + p + `,"quantity":11,"requestId":"r1"}`, "quantity"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := e.do("POST", "/api/orders", tok, malformed(tc.body), "Content-Type", "application/json")
			msg := r.wantError(t, 400, CodeInvalidArgument)
			if !strings.Contains(msg, tc.field) {
				t.Fatalf("message %q does not name %q", msg, tc.field)
			}
			if a, n := e.available(pid, 0), e.intake(pid); a != 10 || n != 0 {
				t.Fatalf("something was reserved: available %d, intake %d", a, n)
			}
		})
	}
	// An oversized body is 413 (read and refused by the decoder; TestRoutes
	// has one fasthttp refuses while reading).
	for _, pad := range []int{5000} {
		body := `{"productId":` + p + `,"quantity":1,"requestId":"r1","pad":"` + strings.Repeat(" ", pad) + `"}`
		msg := e.do("POST", "/api/orders", tok, malformed(body)).wantError(t, 413, CodePayloadTooLarge)
		if !strings.Contains(msg, "body") {
			t.Fatalf("413 message %q", msg)
		}
	}
	if a, n := e.available(pid, 0), e.intake(pid); a != 10 || n != 0 {
		t.Fatalf("something was reserved: available %d, intake %d", a, n)
	}
	// The same requestId still works afterwards: nothing was recorded for it.
	r := e.buy(1, pid, 1, "r1")
	if r.status != 202 {
		t.Fatalf("valid request after the rejected ones: %s", r)
	}
	if loc, no := r.header.Get("Location"), r.json(t)["orderNo"]; loc != "/api/orders/"+no.(string) {
		t.Fatalf("202 Location %q for order %v", loc, no)
	}
}

func TestCreateOrderOutcomes(t *testing.T) {
	e := newEnv(t)
	spec := openSale(5)
	spec.PerUserLimit, spec.MaxPerOrder = 3, 2
	pid := e.product(spec)

	r := e.buy(1, pid, 2, "first")
	if r.status != 202 {
		t.Fatalf("first: %s", r)
	}
	body := r.json(t)
	no := body["orderNo"].(string)
	if body["requestId"] != "first" || body["status"] != "PROCESSING" || len(body) != 3 {
		t.Fatalf("202 body %s", r.body)
	}
	if _, shard, p, err := order.ParseNo(no); err != nil || p != pid || shard != 0 {
		t.Fatalf("orderNo %s: %v", no, err)
	}

	// Replay: 200, same orderNo, current status (PROCESSING, then from MySQL).
	r = e.buy(1, pid, 2, "first")
	if r.status != 200 || r.json(t)["orderNo"] != no || r.json(t)["status"] != "PROCESSING" {
		t.Fatalf("replay: %s", r)
	}
	e.record(no)
	e.lock(no)
	r = e.buy(1, pid, 2, "first")
	if r.status != 200 || r.json(t)["orderNo"] != no || r.json(t)["status"] != "WAITING_PAY" {
		t.Fatalf("replay after lock: %s", r)
	}

	e.buy(1, pid, 1, "first").wantError(t, 422, CodeIdempotencyKeyReused)
	e.buy(1, pid, 2, "second").wantError(t, 409, CodePurchaseLimitExceeded) // holds 2 of 3
	msg := e.buy(2, pid, 3, "big").wantError(t, 400, CodeInvalidArgument)   // max 2 per order
	if !strings.Contains(msg, "quantity") {
		t.Fatalf("max per order message %q", msg)
	}
	e.buy(1, 999999, 1, "nope").wantError(t, 404, CodeProductNotFound)

	future := openSale(5)
	future.SaleStart = time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	future.SaleEnd = time.Now().Add(2 * time.Hour).UTC().Format(time.RFC3339)
	fid := e.product(future)
	e.buy(1, fid, 1, "early").wantError(t, 409, CodeSaleNotActive)

	if a := e.available(pid, 0); a != 3 {
		t.Fatalf("available %d, want 3", a)
	}
	if n := e.intake(pid); n != 1 {
		t.Fatalf("intake %d, want 1", n)
	}
}

// Stock 10: 3+3+3 accepted, 2 of the last 1 refused whole, then the last 1
// accepted and anything more refused as sold out.
func TestCreateOrderInsufficientStock(t *testing.T) {
	e := newEnv(t)
	pid := e.product(openSale(10))
	for i := range 3 {
		e.accepted(int64(10+i), pid, 3, "r")
	}
	e.buy(20, pid, 2, "r").wantError(t, 409, CodeInsufficientStock)
	if a, n := e.available(pid, 0), e.intake(pid); a != 1 || n != 3 {
		t.Fatalf("after refused 2: available %d, intake %d (partly reserved?)", a, n)
	}
	e.accepted(21, pid, 1, "r")
	e.buy(22, pid, 2, "r").wantError(t, 409, CodeSoldOut)
	e.buy(23, pid, 1, "r").wantError(t, 409, CodeSoldOut)
	if a, n := e.available(pid, 0), e.intake(pid); a != 0 || n != 4 {
		t.Fatalf("sold out: available %d, intake %d", a, n)
	}
}

// Stock 100, 2,000 buyers, 500 at a time: exactly 100 accepted, never oversold.
func TestCreateOrderSoldOutStampede(t *testing.T) {
	if testing.Short() {
		t.Skip("stampede test")
	}
	e := newEnv(t)
	pid := e.product(openSale(100))
	const buyers, concurrency = 2000, 500
	tokens := make([]string, buyers)
	for i := range tokens {
		tokens[i] = token(t, int64(1000+i))
	}

	// Watch the Redis count while the stampede runs.
	stop := make(chan struct{})
	var minSeen atomic.Int64
	minSeen.Store(100)
	var watch sync.WaitGroup
	watch.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			if n, err := e.rdb.HGet(context.Background(), lua.ShardKeys(pid, 0).Stock(), "available").Int64(); err == nil && n < minSeen.Load() {
				minSeen.Store(n)
			}
			time.Sleep(time.Millisecond)
		}
	})

	var accepted, soldOut, other atomic.Int64
	var mu sync.Mutex
	seen := map[string]bool{}
	sem := make(chan struct{}, concurrency)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range buyers {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			body := fmt.Sprintf(`{"productId":%d,"quantity":1,"requestId":"buy-%d"}`, pid, i)
			r := doHTTP(t, e.hc, "POST", "/api/orders", tokens[i], body)
			switch {
			case r.status == 202:
				accepted.Add(1)
				var b struct{ OrderNo string }
				if err := json.Unmarshal(r.body, &b); err != nil {
					t.Error(err)
				}
				mu.Lock()
				if seen[b.OrderNo] {
					t.Errorf("orderNo %s given twice", b.OrderNo)
				}
				seen[b.OrderNo] = true
				mu.Unlock()
			case r.status == 409 && strings.Contains(string(r.body), `"SOLD_OUT"`):
				soldOut.Add(1)
			default:
				other.Add(1)
				t.Errorf("unexpected answer %s", r)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(stop)
	watch.Wait()

	if accepted.Load() != 100 || soldOut.Load() != buyers-100 || other.Load() != 0 {
		t.Fatalf("accepted %d, sold out %d, other %d", accepted.Load(), soldOut.Load(), other.Load())
	}
	if a := e.available(pid, 0); a != 0 {
		t.Fatalf("available %d after the sale, want 0", a)
	}
	if m := minSeen.Load(); m < 0 {
		t.Fatalf("available went to %d", m)
	}
	if n := e.intake(pid); n != 100 {
		t.Fatalf("intake has %d reservations, want 100", n)
	}
	t.Logf("%d requests in %v", buyers, elapsed)
}

// One buyer sends the same request 50 times at once: one order, one answer.
func TestCreateOrderSameRequestConcurrent(t *testing.T) {
	e := newEnv(t)
	pid := e.product(openSale(100))
	tok := token(t, 77)
	body := fmt.Sprintf(`{"productId":%d,"quantity":2,"requestId":"double-click"}`, pid)
	var mu sync.Mutex
	statuses := map[int]int{}
	nos := map[string]int{}
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() {
			r := doHTTP(t, e.hc, "POST", "/api/orders", tok, body)
			var b struct{ OrderNo, RequestID, Status string }
			if err := json.Unmarshal(r.body, &b); err != nil {
				t.Error(r, err)
				return
			}
			if b.RequestID != "double-click" || b.Status != "PROCESSING" {
				t.Errorf("answer %s", r)
			}
			mu.Lock()
			statuses[r.status]++
			nos[b.OrderNo]++
			mu.Unlock()
		})
	}
	wg.Wait()
	if statuses[202] != 1 || statuses[200] != 49 || len(nos) != 1 {
		t.Fatalf("statuses %v, orderNos %v", statuses, nos)
	}
	if n := e.intake(pid); n != 1 {
		t.Fatalf("intake %d, want 1", n)
	}
	if a := e.available(pid, 0); a != 98 {
		t.Fatalf("available %d, want 98", a)
	}
}

func TestAuthentication(t *testing.T) {
	e := newEnv(t)
	pid := e.product(openSale(10))
	body := fmt.Sprintf(`{"productId":%d,"quantity":1,"requestId":"a"}`, pid)
	other, _ := issueWith([]byte("another secret"), 1)
	for name, auth := range map[string]string{
		"missing":      "",
		"not bearer":   "Basic dXNlcjpwYXNz",
		"empty bearer": "Bearer ",
		"garbage":      "Bearer not.a.jwt",
		"wrong secret": "Bearer " + other,
	} {
		t.Run(name, func(t *testing.T) {
			var r resp
			if auth == "" {
				r = e.do("POST", "/api/orders", "", body)
			} else {
				r = e.do("POST", "/api/orders", "", body, "Authorization", auth)
			}
			r.wantError(t, 401, CodeUnauthenticated)
			if r.header.Get("WWW-Authenticate") != "Bearer" {
				t.Fatalf("no WWW-Authenticate: %v", r.header)
			}
		})
	}
	// The scheme is case-insensitive.
	if r := e.do("POST", "/api/orders", "", body, "Authorization", "bearer "+token(t, 1)); r.status != 202 {
		t.Fatalf("lower-case bearer: %s", r)
	}
	if a := e.available(pid, 0); a != 9 {
		t.Fatalf("available %d", a)
	}
}

// BenchmarkCreateOrder measures the POST /api/orders handler, Redis round
// trip included, without the network:
//
//	go test -run '^$' -bench CreateOrder -benchmem ./gateway/
func BenchmarkCreateOrder(b *testing.B) {
	e := newEnv(b)
	spec := openSale(maxStock) // never sold out
	pid := e.product(spec)
	tok := token(b, 5)
	handler := e.srv.Handler()
	var req fasthttp.Request
	var ctx fasthttp.RequestCtx
	var body []byte
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		req.Reset()
		req.Header.SetMethod(fasthttp.MethodPost)
		req.SetRequestURI("/api/orders")
		req.Header.Set(fasthttp.HeaderAuthorization, "Bearer "+tok)
		body = fmt.Appendf(body[:0], `{"productId":%d,"quantity":1,"requestId":"bench-%d"}`, pid, i)
		req.SetBodyRaw(body)
		ctx.Init(&req, nil, nil)
		handler(&ctx)
		if ctx.Response.StatusCode() != 202 {
			b.Fatalf("%d %s", ctx.Response.StatusCode(), ctx.Response.Body())
		}
	}
}
