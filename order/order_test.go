package order_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stampede-sh/stampede/order"
)

func TestTransitions(t *testing.T) {
	allowed := map[[2]order.Status]bool{
		{order.Processing, order.WaitingPay}: true,
		{order.Processing, order.Failed}:     true,
		{order.Processing, order.Cancelled}:  true,
		{order.WaitingPay, order.Paid}:       true,
		{order.WaitingPay, order.Cancelled}:  true,
	}
	for _, from := range order.Statuses {
		for _, to := range order.Statuses {
			if got := order.CanTransition(from, to); got != allowed[[2]order.Status{from, to}] {
				t.Errorf("%s → %s: %v", from, to, got)
			}
		}
		if from.Terminal() && len(allowedFrom(allowed, from)) > 0 {
			t.Errorf("terminal %s has transitions", from)
		}
	}
	if _, err := order.ParseStatus("SHIPPED"); err == nil {
		t.Error("unknown status parsed")
	}
}

func allowedFrom(m map[[2]order.Status]bool, from order.Status) []order.Status {
	var out []order.Status
	for k := range m {
		if k[0] == from {
			out = append(out, k[1])
		}
	}
	return out
}

func TestOrderNoRoundTripAndUnique(t *testing.T) {
	g, err := order.NewNoGenerator(1023)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	before := time.Now().Add(-time.Millisecond)
	for i := range 20000 { // > 4096 per ms: the sequence must roll into the next ms
		no := g.Next(9223372036854775807, i%100)
		if seen[no] {
			t.Fatalf("duplicate orderNo %s", no)
		}
		seen[no] = true
		id, shard, pid, err := order.ParseNo(no)
		if err != nil || shard != i%100 || pid != 9223372036854775807 {
			t.Fatalf("parse %s: %d %d %v", no, shard, pid, err)
		}
		if at := order.NoTime(id); at.Before(before) {
			t.Fatalf("orderNo time %s before generation", at)
		}
	}
	if _, err := order.NewNoGenerator(1024); err == nil {
		t.Error("node 1024 accepted")
	}
	for _, bad := range []string{"", "123", "abc0000000000000000001", "0000000000000000001000", strings.Repeat("1", 41)} {
		if _, _, _, err := order.ParseNo(bad); err == nil {
			t.Errorf("ParseNo(%q) accepted", bad)
		}
	}
}

func TestValidRequestID(t *testing.T) {
	for _, ok := range []string{"a", "b2f1-9c:x_y.z", strings.Repeat("x", 64)} {
		if !order.ValidRequestID(ok) {
			t.Errorf("%q rejected", ok)
		}
	}
	for _, bad := range []string{"", strings.Repeat("x", 65), "a b", "a/b", "é", "a\x00"} {
		if order.ValidRequestID(bad) {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestDecodeEvent(t *testing.T) {
	g, _ := order.NewNoGenerator(1)
	no := g.Next(7, 0)
	good := `{"eventId":"created:` + no + `","type":"ORDER_CREATED","orderNo":"` + no + `","userId":1,"productId":7,"quantity":1,"occurredAt":"2026-01-01T00:00:00Z"}`
	if _, err := order.DecodeEvent([]byte(good)); err != nil {
		t.Fatal(err)
	}
	for name, bad := range map[string]string{
		"not json":     `{`,
		"unknown type": strings.Replace(good, "ORDER_CREATED", "ORDER_SHIPPED", 1),
		"bad orderNo":  strings.ReplaceAll(good, no, "x"),
		"no quantity":  strings.Replace(good, `"quantity":1`, `"quantity":0`, 1),
		"status event": strings.Replace(good, "ORDER_CREATED", "ORDER_STATUS_CHANGED", 1),
	} {
		if _, err := order.DecodeEvent([]byte(bad)); err == nil {
			t.Errorf("%s accepted", name)
		}
	}
}

func TestDecodeStatusBatch(t *testing.T) {
	no := order.FormatNo(1, 0, 7)
	item := `{"eventId":"status:` + no + `:2","type":"ORDER_STATUS_CHANGED","orderNo":"` + no + `","userId":3,"productId":7,"quantity":1,"status":"WAITING_PAY","version":2,"occurredAt":"2026-01-01T00:00:00Z"}`
	batch := func(items, status string) []byte {
		return []byte(`{"eventId":"statuses:` + no + `:WAITING_PAY","type":"ORDER_STATUS_BATCH","orderNo":"` + no + `","productId":7,"status":"` + status +
			`","occurredAt":"2026-01-01T00:00:00Z","events":[` + items + `]}`)
	}
	e, err := order.DecodeEvent(batch(item+","+item, "WAITING_PAY"))
	if err != nil || e.Type != order.EventStatusBatch || len(e.Events) != 2 || e.Events[1].UserID != 3 {
		t.Fatalf("good batch: %+v %v", e, err)
	}
	for name, body := range map[string][]byte{
		"empty":           batch("", "WAITING_PAY"),
		"other status":    batch(item, "PAID"),
		"no user":         batch(strings.Replace(item, `"userId":3`, `"userId":0`, 1), "WAITING_PAY"),
		"bad orderNo":     batch(strings.Replace(item, `"orderNo":"`+no, `"orderNo":"x`, 1), "WAITING_PAY"),
		"not a status ev": batch(strings.Replace(item, "ORDER_STATUS_CHANGED", "ORDER_CREATED", 1), "WAITING_PAY"),
	} {
		if _, err := order.DecodeEvent(body); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
