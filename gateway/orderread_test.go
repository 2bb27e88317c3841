package gateway

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"
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
