package gateway

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stampede-sh/stampede/order"
	"github.com/stampede-sh/stampede/persistence"
	"github.com/stampede-sh/stampede/pipeline"
)

var _ PulseReader = pipeline.Ops{}

// pulseOps is fakeOps that also reads a pulse, recording what it was asked.
type pulseOps struct {
	fakeOps
	ids    []int64
	window time.Duration
}

func (p *pulseOps) Pulse(_ context.Context, ids []int64, window time.Duration) (any, error) {
	p.ids, p.window = ids, window
	sales := make([]pipeline.SalePulse, len(ids))
	for i, id := range ids {
		sales[i] = pipeline.SalePulse{ProductID: id, Accepted: 2, Orders: map[order.Status]int64{order.WaitingPay: 2},
			LockedOrders: 2, Locked: 2, Available: 8, Units: 10}
	}
	return pipeline.Pulse{At: time.Now().UTC(), Sales: sales,
		Latency: pipeline.LatencySummary{WindowSeconds: window.Seconds(), Samples: 2, P50Ms: 3, P95Ms: 4, MaxMs: 4}}, nil
}

// GET /api/admin/pulse is admin only, validates its query, and by default
// reads the newest sales that have not ended or ended within the hour.
func TestAdminPulse(t *testing.T) {
	ops := &pulseOps{}
	e := newEnv(t, func(c *Config) { c.Ops = ops; c.ProductCacheTTL = time.Millisecond })
	admin := token(t, adminID)
	e.do("GET", "/api/admin/pulse", "", nil).wantError(t, 401, CodeUnauthenticated)
	e.do("GET", "/api/admin/pulse", token(t, 1), nil).wantError(t, 403, CodeForbidden)

	live := e.product(openSale(5))
	// Sales that ended (the admin API refuses an end in the past, so they
	// are stored directly).
	past := func(start, end time.Duration) int64 {
		now := time.Now()
		p, err := e.store.CreateProduct(context.Background(), persistence.Product{Name: "past", Price: 1, Total: 1, MaxPerOrder: 1,
			SaleStart: now.Add(-start), SaleEnd: now.Add(-end)})
		if err != nil {
			t.Fatal(err)
		}
		return p.ID
	}
	past(3*time.Hour, 2*time.Hour)
	ended := past(2*time.Hour, 10*time.Minute)
	time.Sleep(5 * time.Millisecond) // the product cache's TTL

	if r := e.do("GET", "/api/admin/pulse", admin, nil); r.status != 200 || r.header.Get("Cache-Control") != "no-store" {
		t.Fatalf("pulse: %s", r)
	}
	if !slices.Equal(ops.ids, []int64{ended, live}) || ops.window != 10*time.Second {
		t.Fatalf("default read %v over %v, want [%d %d] over 10s", ops.ids, ops.window, ended, live)
	}
	if r := e.do("GET", fmt.Sprintf("/api/admin/pulse?products=%d,7&window=60", live), admin, nil); r.status != 200 ||
		!slices.Equal(ops.ids, []int64{live, 7}) || ops.window != time.Minute {
		t.Fatalf("explicit read: %s %v %v", r, ops.ids, ops.window)
	}
	for _, q := range []string{"window=0", "window=301", "window=x", "products=", "products=1,,2", "products=-1", "products=a"} {
		e.do("GET", "/api/admin/pulse?"+q, admin, malformed(nil)).wantError(t, 400, CodeInvalidArgument)
	}
	many := "1"
	for i := 2; i <= 51; i++ {
		many += fmt.Sprintf(",%d", i)
	}
	e.do("GET", "/api/admin/pulse?products="+many, admin, nil).wantError(t, 400, CodeInvalidArgument)

	// Ops without a pulse: 503, like the other admin operations.
	e2 := newEnv(t, func(c *Config) { c.Ops = &fakeOps{} })
	e2.do("GET", "/api/admin/pulse", admin, nil).wantError(t, 503, CodeUnavailable)
}
