package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stampede-sh/stampede/order"
	"github.com/stampede-sh/stampede/persistence"
)

// adminListPage decodes a page of GET /api/admin/orders.
type adminListPage struct {
	Orders []struct {
		OrderNo   string       `json:"orderNo"`
		UserID    int64        `json:"userId"`
		ProductID int64        `json:"productId"`
		Status    order.Status `json:"status"`
		CreatedAt time.Time    `json:"createdAt"`
	} `json:"orders"`
	NextCursor string `json:"nextCursor"`
}

func (e *env) adminOrders(query url.Values) (adminListPage, resp) {
	e.t.Helper()
	r := e.do("GET", "/api/admin/orders?"+query.Encode(), token(e.t, adminID), nil)
	var p adminListPage
	if r.status == 200 {
		if err := json.Unmarshal(r.body, &p); err != nil {
			e.t.Fatalf("page %s: %v", r, err)
		}
	}
	return p, r
}

// allPages walks every page of the search with limit and returns the
// orderNos in the order received; it fails on a repeated orderNo.
func (e *env) allPages(q url.Values, limit int) []string {
	e.t.Helper()
	q.Set("limit", fmt.Sprint(limit))
	var got []string
	seen := map[string]bool{}
	for pages := 0; ; pages++ {
		if pages > 1000 {
			e.t.Fatal("paging does not end")
		}
		p, r := e.adminOrders(q)
		if r.status != 200 {
			e.t.Fatalf("search %v: %s", q, r)
		}
		if len(p.Orders) > limit {
			e.t.Fatalf("page of %d orders with limit %d", len(p.Orders), limit)
		}
		for _, o := range p.Orders {
			if seen[o.OrderNo] {
				e.t.Fatalf("order %s on two pages", o.OrderNo)
			}
			seen[o.OrderNo] = true
			got = append(got, o.OrderNo)
		}
		if p.NextCursor == "" {
			return got
		}
		if len(p.Orders) != limit {
			e.t.Fatalf("short page (%d of %d) with a nextCursor", len(p.Orders), limit)
		}
		q.Set("cursor", p.NextCursor)
	}
}

// wantOrders reads order_info with the filter applied in SQL written here
// independently of the store, newest first: the expected search result.
func (e *env) wantOrders(where string, args ...any) []string {
	e.t.Helper()
	q := `SELECT order_no FROM order_info`
	if where != "" {
		q += ` WHERE ` + where
	}
	rows, err := e.store.DB.Query(q+` ORDER BY created_at DESC, id DESC`, args...)
	if err != nil {
		e.t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var no string
		rows.Scan(&no)
		out = append(out, no)
	}
	return out
}

func TestAdminSearchOrders(t *testing.T) {
	e := newEnv(t)
	p1, p2 := e.product(openSale(100)), e.product(openSale(100))
	var paid, cancelled []string
	for i := range 24 {
		user := int64(1 + i%4)
		pid := p1
		if i%3 == 0 {
			pid = p2
		}
		no := e.waitingPay(user, pid, 1, fmt.Sprintf("s-%d", i))
		switch i % 5 {
		case 0:
			if r := e.do("POST", "/api/orders/"+no+"/pay", token(t, user), nil); r.status != 200 {
				t.Fatalf("pay: %s", r)
			}
			paid = append(paid, no)
		case 1:
			if r := e.do("POST", "/api/orders/"+no+"/cancel", token(t, user), nil); r.status != 200 {
				t.Fatalf("cancel: %s", r)
			}
			cancelled = append(cancelled, no)
		}
	}
	// Ties on created_at are the keyset's hard case: give a run of orders
	// one timestamp (the gateway accepts many orders in one millisecond).
	tie := time.Now().UTC().Add(-time.Minute).Truncate(time.Millisecond)
	if _, err := e.store.DB.Exec(`UPDATE order_info SET created_at = ? WHERE id % 3 = 1`, tie); err != nil {
		t.Fatal(err)
	}

	all := e.wantOrders("")
	if len(all) != 24 {
		t.Fatalf("%d orders stored", len(all))
	}
	for _, limit := range []int{1, 5, 7, 24, 200} {
		if got := e.allPages(url.Values{}, limit); !slices.Equal(got, all) {
			t.Fatalf("limit %d: pages give\n%v\nwant\n%v", limit, got, all)
		}
	}
	// The default limit is 50: one page, no cursor.
	if p, r := e.adminOrders(url.Values{}); r.status != 200 || len(p.Orders) != 24 || p.NextCursor != "" {
		t.Fatalf("default page: %s", r)
	}

	from, to := tie, tie.Add(time.Millisecond)
	cases := []struct {
		q     url.Values
		where string
		args  []any
	}{
		{url.Values{"userId": {"2"}}, "user_id = 2", nil},
		{url.Values{"productId": {fmt.Sprint(p2)}}, "product_id = ?", []any{p2}},
		{url.Values{"status": {"PAID"}}, "status = 'PAID'", nil},
		{url.Values{"status": {"CANCELLED"}, "productId": {fmt.Sprint(p1)}}, "status = 'CANCELLED' AND product_id = ?", []any{p1}},
		{url.Values{"userId": {"3"}, "productId": {fmt.Sprint(p1)}, "status": {"WAITING_PAY"}},
			"user_id = 3 AND product_id = ? AND status = 'WAITING_PAY'", []any{p1}},
		{url.Values{"from": {from.Format(time.RFC3339Nano)}, "to": {to.Format(time.RFC3339Nano)}}, "created_at >= ? AND created_at < ?", []any{from, to}},
		{url.Values{"to": {from.Format(time.RFC3339Nano)}}, "created_at < ?", []any{from}},
		{url.Values{"from": {to.Format(time.RFC3339Nano)}, "userId": {"1"}}, "created_at >= ? AND user_id = 1", []any{to}},
		{url.Values{"userId": {"99"}}, "user_id = 99", nil},
	}
	for _, c := range cases {
		want := e.wantOrders(c.where, c.args...)
		if got := e.allPages(c.q, 2); !slices.Equal(got, want) {
			t.Errorf("%v: got %v, want %v", c.q, got, want)
		}
	}
	if n := len(e.wantOrders("status = 'PAID'")); n != len(paid) || n == 0 {
		t.Fatalf("%d PAID stored, %d paid", n, len(paid))
	}
	if n := len(e.wantOrders("status = 'CANCELLED'")); n != len(cancelled) || n == 0 {
		t.Fatalf("%d CANCELLED stored, %d cancelled", n, len(cancelled))
	}
	if n := len(e.wantOrders("created_at = ?", tie)); n < 5 {
		t.Fatalf("only %d orders share the tied created_at", n)
	}

	// The answer's shape: the buyer's order plus userId.
	p, r := e.adminOrders(url.Values{"userId": {"2"}, "limit": {"1"}})
	if r.status != 200 || len(p.Orders) != 1 || p.Orders[0].UserID != 2 || p.NextCursor == "" {
		t.Fatalf("user 2 page: %s", r)
	}
	m := r.json(t)["orders"].([]any)[0].(map[string]any)
	for _, k := range []string{"orderNo", "requestId", "productId", "quantity", "amount", "status", "version", "createdAt", "updatedAt", "payDeadline", "userId"} {
		if _, ok := m[k]; !ok {
			t.Errorf("order lacks %s: %v", k, m)
		}
	}

	// A new order placed while paging appears on no later page.
	q := url.Values{"limit": {"5"}}
	first, _ := e.adminOrders(q)
	e.waitingPay(1, p1, 1, "late-arrival")
	q.Set("cursor", first.NextCursor)
	rest := e.allPages(q, 5)
	got := []string{}
	for _, o := range first.Orders {
		got = append(got, o.OrderNo)
	}
	if got = append(got, rest...); !slices.Equal(got, all) {
		t.Fatalf("paging across a new order: %v, want %v", got, all)
	}

	// Bad arguments: 400, nothing read.
	for _, q := range []string{"limit=0", "limit=201", "limit=x", "cursor=abc", "cursor=MTIz", "userId=0", "userId=-1",
		"productId=x", "status=SHIPPED", "from=yesterday", "from=2026-12-01T10:00:00Z&to=2026-12-01T10:00:00Z",
		"from=2026-12-01T11:00:00Z&to=2026-12-01T10:00:00Z"} {
		e.do("GET", "/api/admin/orders?"+q, token(t, adminID), malformed(nil)).wantError(t, 400, CodeInvalidArgument)
	}
}

func TestAdminSupportAuthorization(t *testing.T) {
	e := newEnv(t)
	pid := e.product(openSale(10))
	no := e.waitingPay(1, pid, 1, "auth")
	for _, rt := range []struct{ method, path string }{
		{"GET", "/api/admin/orders"},
		{"GET", "/api/admin/orders/" + no},
		{"GET", "/api/admin/refunds"},
		{"POST", "/api/admin/payments/p-1/refund"},
	} {
		e.do(rt.method, rt.path, "", `{"refundNo":"r-1"}`).wantError(t, 401, CodeUnauthenticated)
		e.do(rt.method, rt.path, "not-a-token", `{"refundNo":"r-1"}`).wantError(t, 401, CodeUnauthenticated)
		e.do(rt.method, rt.path, token(t, 1), `{"refundNo":"r-1"}`).wantError(t, 403, CodeForbidden)
	}
	// The buyers' own read is unchanged: another buyer's order stays 404,
	// the owner reads it, and neither sees userId or a history.
	e.do("GET", "/api/orders/"+no, token(t, 2), nil).wantError(t, 404, CodeNotFound)
	r := e.do("GET", "/api/orders/"+no, token(t, 1), nil)
	if r.status != 200 {
		t.Fatalf("owner read: %s", r)
	}
	if m := r.json(t); m["userId"] != nil || m["history"] != nil {
		t.Fatalf("buyer read shows support fields: %s", r)
	}
}

type historyJSON struct {
	OrderNo string       `json:"orderNo"`
	UserID  int64        `json:"userId"`
	Status  order.Status `json:"status"`
	History []struct {
		Status order.Status    `json:"status"`
		At     time.Time       `json:"at"`
		Event  order.EventType `json:"event"`
	} `json:"history"`
}

func (e *env) adminOrder(no string) historyJSON {
	e.t.Helper()
	r := e.do("GET", "/api/admin/orders/"+no, token(e.t, adminID), nil)
	if r.status != 200 {
		e.t.Fatalf("admin read %s: %s", no, r)
	}
	var h historyJSON
	if err := json.Unmarshal(r.body, &h); err != nil {
		e.t.Fatal(err)
	}
	return h
}

func (h historyJSON) statuses() string {
	var s string
	for i, x := range h.History {
		if i > 0 {
			s += " "
		}
		s += string(x.Status) + "/" + string(x.Event)
	}
	return s
}

func TestAdminGetOrderHistory(t *testing.T) {
	e := newEnv(t)
	pid := e.product(openSale(10))

	// Accepted, not yet written: from Redis, PROCESSING, no history yet.
	pending := e.accepted(5, pid, 1, "h-pending")
	if h := e.adminOrder(pending); h.Status != order.Processing || h.UserID != 5 || h.OrderNo != pending || len(h.History) != 0 {
		t.Fatalf("pending: %+v", h)
	}
	e.record(pending)
	if h := e.adminOrder(pending); h.Status != order.Processing || h.statuses() != "PROCESSING/ORDER_CREATED" {
		t.Fatalf("recorded: %+v", h)
	}

	// One order at a time (status-changed events): created, locked, paid.
	paid := e.waitingPay(6, pid, 1, "h-paid")
	if r := e.do("POST", "/api/orders/"+paid+"/pay", token(t, 6), nil); r.status != 200 {
		t.Fatalf("pay: %s", r)
	}
	h := e.adminOrder(paid)
	if h.Status != order.Paid || h.UserID != 6 ||
		h.statuses() != "PROCESSING/ORDER_CREATED WAITING_PAY/ORDER_STATUS_CHANGED PAID/ORDER_STATUS_CHANGED" {
		t.Fatalf("paid history: %s (%+v)", h.statuses(), h)
	}
	for i := 1; i < len(h.History); i++ {
		if h.History[i].At.Before(h.History[i-1].At) || h.History[i].At.IsZero() {
			t.Fatalf("history times out of order: %+v", h.History)
		}
	}

	// The batched order lock files one ORDER_STATUS_BATCH row under its
	// first order: the others' WAITING_PAY is found in it.
	a, b := e.accepted(7, pid, 1, "h-a"), e.accepted(8, pid, 1, "h-b")
	e.record(a)
	e.record(b)
	res, err := e.store.LockStockBatch(context.Background(), "gateway-test", []persistence.LockEvent{
		{EventID: order.CreatedEventID(a), OrderNo: a}, {EventID: order.CreatedEventID(b), OrderNo: b}}, 15*time.Minute)
	if err != nil || res[0].Outcome != persistence.LockLocked || res[1].Outcome != persistence.LockLocked {
		t.Fatalf("lock batch: %+v %v", res, err)
	}
	var filed string
	e.store.DB.QueryRow(`SELECT order_no FROM mq_outbox WHERE event_type = 'ORDER_STATUS_BATCH'`).Scan(&filed)
	other := a
	if filed == a {
		other = b
	}
	if filed != a && filed != b {
		t.Fatalf("status batch filed under %q", filed)
	}
	for _, no := range []string{a, b} {
		if h := e.adminOrder(no); h.Status != order.WaitingPay || h.statuses() != "PROCESSING/ORDER_CREATED WAITING_PAY/ORDER_STATUS_BATCH" {
			t.Fatalf("batched %s (filed under %s, other %s): %s", no, filed, other, h.statuses())
		}
	}

	// The admin read serves any buyer's order; unknown ones are 404 with
	// the buyers' code.
	e.do("GET", "/api/admin/orders/"+paid[:len(paid)-1]+"9", token(t, adminID), nil).wantError(t, 404, CodeNotFound)
	e.do("GET", "/api/admin/orders/not-an-order", token(t, adminID), nil).wantError(t, 404, CodeNotFound)
}

// refundPending makes a REFUND_PENDING payment: an order cancelled, then
// paid by the provider anyway.
func (e *env) refundPending(user, pid int64, paymentNo string) string {
	e.t.Helper()
	no := e.waitingPay(user, pid, 1, "rp-"+paymentNo)
	if r := e.do("POST", "/api/orders/"+no+"/cancel", token(e.t, user), nil); r.status != 200 {
		e.t.Fatalf("cancel: %s", r)
	}
	if r := e.callback(no, paymentNo, 1999, nil); r.status != 200 {
		e.t.Fatalf("late callback: %s", r)
	}
	return no
}

func (e *env) refund(paymentNo, refundNo string) resp {
	e.t.Helper()
	return e.do("POST", "/api/admin/payments/"+paymentNo+"/refund", token(e.t, adminID), map[string]string{"refundNo": refundNo})
}

func TestAdminRefunds(t *testing.T) {
	e := newEnv(t)
	pid := e.product(openSale(50))
	var nos []string
	for i := range 5 {
		nos = append(nos, e.refundPending(int64(10+i), pid, fmt.Sprintf("late-%d", i)))
	}
	// Payments recorded in one millisecond tie on created_at.
	if _, err := e.store.DB.Exec(`UPDATE payment SET created_at = (SELECT MIN(created_at) FROM (SELECT created_at FROM payment) p) WHERE payment_no IN ('late-2', 'late-3')`); err != nil {
		t.Fatal(err)
	}
	paidNo := e.waitingPay(20, pid, 1, "paid-normally")
	if r := e.callback(paidNo, "normal-pay", 1999, nil); r.status != 200 {
		t.Fatalf("pay: %s", r)
	}

	type refundsPage struct {
		Refunds []struct {
			PaymentNo      string    `json:"paymentNo"`
			OrderNo        string    `json:"orderNo"`
			UserID         int64     `json:"userId"`
			Amount         int64     `json:"amount"`
			Status         string    `json:"status"`
			CreatedAt      time.Time `json:"createdAt"`
			WaitingSeconds *int64    `json:"waitingSeconds"`
		} `json:"refunds"`
		NextCursor string `json:"nextCursor"`
	}
	queue := func(limit int) []string {
		var out []string
		cursor := ""
		for range 100 {
			r := e.do("GET", fmt.Sprintf("/api/admin/refunds?limit=%d&cursor=%s", limit, url.QueryEscape(cursor)), token(t, adminID), nil)
			var p refundsPage
			if r.status != 200 || json.Unmarshal(r.body, &p) != nil {
				t.Fatalf("refunds: %s", r)
			}
			for _, x := range p.Refunds {
				if x.Status != persistence.PaymentRefundPending || x.Amount != 1999 || x.UserID < 10 || x.WaitingSeconds == nil ||
					*x.WaitingSeconds < 0 || x.CreatedAt.IsZero() || !slices.Contains(nos, x.OrderNo) {
					t.Fatalf("refund entry %+v", x)
				}
				if slices.Contains(out, x.PaymentNo) {
					t.Fatalf("%s on two pages", x.PaymentNo)
				}
				out = append(out, x.PaymentNo)
			}
			if p.NextCursor == "" {
				return out
			}
			cursor = p.NextCursor
		}
		t.Fatal("paging does not end")
		return nil
	}
	var want []string
	rows, _ := e.store.DB.Query(`SELECT payment_no FROM payment WHERE status = 'REFUND_PENDING' ORDER BY created_at, id`)
	for rows.Next() {
		var p string
		rows.Scan(&p)
		want = append(want, p)
	}
	rows.Close()
	if len(want) != 5 {
		t.Fatalf("%d pending payments", len(want))
	}
	for _, limit := range []int{1, 2, 50} {
		if got := queue(limit); !slices.Equal(got, want) {
			t.Fatalf("limit %d: queue %v, want %v (oldest first)", limit, got, want)
		}
	}

	// Refund late-0; the same refundNo again is the same answer.
	r1 := e.refund("late-0", "RF-late-0")
	if r1.status != 200 {
		t.Fatalf("refund: %s", r1)
	}
	m := r1.json(t)
	if m["paymentNo"] != "late-0" || m["orderNo"] != nos[0] || m["status"] != "REFUNDED" || m["refundNo"] != "RF-late-0" || m["refundedAt"] == "" {
		t.Fatalf("refund answer %s", r1)
	}
	if r2 := e.refund("late-0", "RF-late-0"); r2.status != 200 || string(r2.body) != string(r1.body) {
		t.Fatalf("replay: %s, first %s", r2, r1)
	}
	e.refund("late-0", "RF-other").wantError(t, 409, CodeAlreadyRefunded)
	e.refund("normal-pay", "RF-normal").wantError(t, 409, CodeNotRefundable)
	e.refund("no-such-payment", "RF-x").wantError(t, 404, CodeNotFound)
	e.refund("late-1", "RF-late-0").wantError(t, 409, CodeConflict) // refundNo of another payment
	for _, body := range []string{`{}`, `{"refundNo":""}`, `{"refundNo":"has space"}`, `{"refundNo":1}`, `{"refundNo":"a","x":1}`, `nope`} {
		e.do("POST", "/api/admin/payments/late-1/refund", token(t, adminID), malformed(body)).wantError(t, 400, CodeInvalidArgument)
	}
	if got := queue(50); !slices.Equal(got, slices.DeleteFunc(slices.Clone(want), func(p string) bool { return p == "late-0" })) {
		t.Fatalf("queue after refund %v", got)
	}
	var status, rno string
	e.store.DB.QueryRow(`SELECT status, refund_no FROM payment WHERE payment_no = 'late-1'`).Scan(&status, &rno)
	if status != persistence.PaymentRefundPending || rno != "" {
		t.Fatalf("late-1 changed by refused refunds: %s %q", status, rno)
	}

	// Two operators refund late-1 at once, with the same and with different
	// refundNos: exactly one REFUNDED row.
	var wg sync.WaitGroup
	var mu sync.Mutex
	codes := map[string]int{}
	for i := range 8 {
		wg.Go(func() {
			rn := "RF-late-1"
			if i%2 == 1 {
				rn = fmt.Sprintf("RF-late-1-op%d", i)
			}
			r := e.refund("late-1", rn)
			code := fmt.Sprint(r.status)
			if r.status != 200 {
				code, _ = r.errCode(t)
			}
			mu.Lock()
			codes[code]++
			mu.Unlock()
		})
	}
	wg.Wait()
	var refunded int
	e.store.DB.QueryRow(`SELECT COUNT(*) FROM payment WHERE payment_no = 'late-1' AND status = 'REFUNDED'`).Scan(&refunded)
	e.store.DB.QueryRow(`SELECT refund_no FROM payment WHERE payment_no = 'late-1'`).Scan(&rno)
	if refunded != 1 {
		t.Fatalf("%d REFUNDED rows", refunded)
	}
	// The winner's refundNo answers 200 to all who sent it, everyone else 409.
	winners := 4
	if rno != "RF-late-1" {
		winners = 1
	}
	if codes["200"] != winners || codes[CodeAlreadyRefunded] != 8-winners {
		t.Fatalf("concurrent refunds: %v (winner %s)", codes, rno)
	}
	if _, err := e.store.DB.Exec(`UPDATE payment SET refund_no = 'RF-late-0', status = 'REFUNDED', refunded_at = NOW(3) WHERE payment_no = 'late-2'`); !persistence.IsDuplicate(err) {
		t.Fatalf("second payment with one refund_no: %v, want a duplicate key", err)
	}
}
