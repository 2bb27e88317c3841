package gateway

import (
	"context"
	"testing"

	"github.com/stampede-sh/stampede/lua"
	"github.com/stampede-sh/stampede/order"
)

// TestSyncIntake: with synchronous intake the 202 comes after the order,
// item and outbox row are committed, and nothing goes to the intake stream.
func TestSyncIntake(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.SyncIntake = true })
	spec := openSale(2)
	spec.PerUserLimit = 2
	pid := e.product(spec)
	no := e.accepted(61, pid, 2, "sync-1")
	o, err := e.store.GetOrder(context.Background(), no)
	if err != nil || o.Status != order.Processing || o.Quantity != 2 || o.Amount != 2*1999 {
		t.Fatalf("order after the 202: %+v, %v", o, err)
	}
	if n := e.intake(pid); n != 0 {
		t.Fatalf("%d intake entries in sync mode", n)
	}
	r := e.buy(61, pid, 2, "sync-1")
	if r.status != 200 || r.json(t)["orderNo"] != no {
		t.Fatalf("replay: %s", r)
	}
	e.buy(62, pid, 1, "sync-2").wantError(t, 409, CodeSoldOut)
	if a := e.available(pid, 0); a != 0 {
		t.Fatalf("available %d", a)
	}
}

// TestSyncIntakeMySQLDown: when the transaction fails the request answers
// 503 and the reservation goes to the intake stream, for the writers.
func TestSyncIntakeMySQLDown(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.SyncIntake = true })
	pid := e.product(openSale(1))
	e.store.DB.Close()
	r := e.buy(71, pid, 1, "down-1")
	r.wantError(t, 503, CodeUnavailable)
	if n := e.intake(pid); n != 1 {
		t.Fatalf("%d intake entries; want the reservation queued", n)
	}
	if a := e.available(pid, 0); a != 0 {
		t.Fatalf("available %d; want 0 (queued reservation keeps its unit)", a)
	}
	// A replay finds the reservation: the same orderNo, still PROCESSING.
	var no string
	if entries, _ := e.rdb.XRange(context.Background(), lua.ShardKeys(pid, 0).Intake(), "-", "+").Result(); len(entries) == 1 {
		no, _ = entries[0].Values[lua.FieldOrderNo].(string)
	}
	r = e.buy(71, pid, 1, "down-1")
	if r.status != 503 && (r.status != 200 || r.json(t)["orderNo"] != no) { // 503: the status lookup needs MySQL
		t.Fatalf("replay: %s; want the queued %s", r, no)
	}
}
