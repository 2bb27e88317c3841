package pipeline_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stampede-sh/stampede/order"
	"github.com/stampede-sh/stampede/persistence"
	"github.com/stampede-sh/stampede/pipeline"
)

// series returns the values of family name in reg keyed by its labels
// ("product=7,state=sold"); a missing family is an empty map.
func series(t *testing.T, reg prometheus.Gatherer, name string) map[string]float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			key := ""
			for i, l := range m.GetLabel() {
				if i > 0 {
					key += ","
				}
				key += l.GetName() + "=" + l.GetValue()
			}
			out[key] = m.GetGauge().GetValue()
		}
	}
	return out
}

// TestSweeperSaleAndRefundGauges: the reconciliation round exports the units
// and orders of the active sales only (started, not ended over an hour ago,
// at most 50), deletes the series of a sale that leaves the set, and exports
// the refund queue; a sweeper that skips a round drops all of them.
func TestSweeperSaleAndRefundGauges(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	live, k := e.product(10, 10)
	ended, _ := e.product(10, 10)
	upcoming, _ := e.product(10, 10)
	now := time.Now().UTC()
	e.store.DB.Exec(`UPDATE product SET sale_end = ? WHERE id = ?`, now.Add(-2*time.Hour), ended.ID)
	e.store.DB.Exec(`UPDATE product SET sale_start = ?, sale_end = ? WHERE id = ?`, now.Add(time.Hour), now.Add(2*time.Hour), upcoming.ID)

	// Four orders of the live sale: one PROCESSING, one WAITING_PAY, one
	// PAID, one CANCELLED that a late payment leaves REFUND_PENDING.
	nos := e.reserve(live, k, 1, 4, 1)
	var batch []order.Reservation
	for i, no := range nos {
		batch = append(batch, order.Reservation{OrderNo: no, UserID: int64(1 + i), RequestID: fmt.Sprintf("req-%d", 1+i),
			ProductID: live.ID, Quantity: 1, UnitPrice: live.Price, AcceptedAt: now})
	}
	if _, err := e.store.InsertReservations(ctx, batch, map[int64]string{live.ID: live.Name}); err != nil {
		t.Fatal(err)
	}
	for _, no := range nos[1:] {
		if out, _, err := e.store.LockStock(ctx, order.CreatedEventID(no), no, pipeline.ConsumerOrderLock, time.Hour); err != nil || out != persistence.LockLocked {
			t.Fatalf("lock: %v %v", out, err)
		}
	}
	if out, _, err := e.store.Pay(ctx, persistence.Payment{PaymentNo: "pay-2", OrderNo: nos[2], Amount: live.Price, PaidAt: now}); err != nil || out != persistence.PayPaid {
		t.Fatalf("pay: %v %v", out, err)
	}
	if _, err := e.store.CloseOrder(ctx, persistence.CloseRequest{OrderNo: nos[3], Reason: order.ReasonUser, From: []order.Status{order.WaitingPay}}); err != nil {
		t.Fatal(err)
	}
	if out, _, err := e.store.Pay(ctx, persistence.Payment{PaymentNo: "late-3", OrderNo: nos[3], Amount: live.Price, PaidAt: now}); err != nil || out != persistence.PayRefundPending {
		t.Fatalf("late pay: %v %v", out, err)
	}
	e.store.DB.Exec(`UPDATE payment SET created_at = NOW(3) - INTERVAL 2 HOUR WHERE payment_no = 'late-3'`)

	m, reg := e.metrics()
	s, err := pipeline.NewSweeper(e.store, pipeline.SweeperConfig{Redis: e.rdb, Metrics: m, ReconcileInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.ReconcileOnce(ctx); err != nil {
		t.Fatal(err)
	}
	st := e.stock(live.ID)
	lp := strconv.FormatInt(live.ID, 10)
	units := series(t, reg, "stampede_sale_units")
	wantUnits := map[string]float64{
		"product=" + lp + ",state=available": float64(e.redisAvailable(k)),
		"product=" + lp + ",state=locked":    float64(st.Locked),
		"product=" + lp + ",state=sold":      float64(st.Sold),
	}
	if fmt.Sprint(units) != fmt.Sprint(wantUnits) || st.Locked != 1 || st.Sold != 1 || e.redisAvailable(k) != 6 {
		t.Fatalf("sale_units %v, want %v (only the live sale)", units, wantUnits)
	}
	orders := series(t, reg, "stampede_sale_orders")
	if len(orders) != len(order.Statuses) {
		t.Fatalf("sale_orders %v: want one series per status of the live sale only", orders)
	}
	for _, status := range order.Statuses {
		want := e.count(`SELECT COUNT(*) FROM order_info WHERE product_id = ? AND status = ?`, live.ID, string(status))
		if got := orders["product="+lp+",status="+string(status)]; got != float64(want) {
			t.Errorf("sale_orders %s = %v, want %d", status, got, want)
		}
		if status != order.Failed && want != 1 {
			t.Errorf("%d orders %s, the fixture wants 1", want, status)
		}
	}
	if p := series(t, reg, "stampede_refunds_pending")[""]; p != 1 {
		t.Errorf("refunds_pending %v, want 1", p)
	}
	if age := series(t, reg, "stampede_refund_oldest_pending_seconds")[""]; age < 7200 || age > 7300 {
		t.Errorf("refund_oldest_pending_seconds %v, want about 7200", age)
	}

	// The refund empties the queue: the gauges follow at the next round.
	if _, err := e.store.Refund(ctx, 1, "late-3", "RF-late-3"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ReconcileOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if p, age := series(t, reg, "stampede_refunds_pending")[""], series(t, reg, "stampede_refund_oldest_pending_seconds")[""]; p != 0 || age != 0 {
		t.Errorf("after the refund: pending %v, oldest %v", p, age)
	}

	// 50 newer live sales push the first one out of the set: its series go.
	var newest []int64
	for range pipeline.MaxSaleSeries {
		p, _ := e.product(5, 5)
		newest = append(newest, p.ID)
	}
	if _, err := s.ReconcileOnce(ctx); err != nil {
		t.Fatal(err)
	}
	units = series(t, reg, "stampede_sale_units")
	if len(units) != 3*pipeline.MaxSaleSeries {
		t.Fatalf("%d sale_units series, want %d", len(units), 3*pipeline.MaxSaleSeries)
	}
	if _, ok := units["product="+lp+",state=sold"]; ok {
		t.Fatal("the oldest sale kept its series past the cap")
	}
	if got := units[fmt.Sprintf("product=%d,state=available", newest[0])]; got != 5 {
		t.Fatalf("newest sale available %v, want 5", got)
	}
	if n := len(series(t, reg, "stampede_sale_orders")); n != len(order.Statuses)*pipeline.MaxSaleSeries {
		t.Fatalf("%d sale_orders series", n)
	}
	// A sale that ended over an hour ago leaves too.
	e.store.DB.Exec(`UPDATE product SET sale_end = ? WHERE id = ?`, now.Add(-61*time.Minute), newest[0])
	if _, err := s.ReconcileOnce(ctx); err != nil {
		t.Fatal(err)
	}
	units = series(t, reg, "stampede_sale_units")
	if _, ok := units[fmt.Sprintf("product=%d,state=available", newest[0])]; ok {
		t.Fatal("an ended sale kept its series")
	}
	if _, ok := units["product="+lp+",state=sold"]; !ok || len(units) != 3*pipeline.MaxSaleSeries {
		t.Fatalf("the first sale did not come back in its place: %d series", len(units))
	}

	// A second sweeper that skips the round (the first ran it) drops its
	// copies of every round series.
	m2, reg2 := e.metrics()
	s2, err := pipeline.NewSweeper(e.store, pipeline.SweeperConfig{Redis: e.rdb, Metrics: m2, ReconcileInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s2.ReconcileOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if len(series(t, reg2, "stampede_sale_units")) == 0 || len(series(t, reg2, "stampede_refunds_pending")) != 1 {
		t.Fatal("second sweeper exported nothing")
	}
	if !s.ReconcileRound(ctx) {
		t.Fatal("first round did not run")
	}
	if s2.ReconcileRound(ctx) {
		t.Fatal("second round ran within the interval")
	}
	for _, name := range []string{"stampede_sale_units", "stampede_sale_orders", "stampede_refunds_pending", "stampede_refund_oldest_pending_seconds"} {
		if n := len(series(t, reg2, name)); n != 0 {
			t.Errorf("skipping sweeper still exports %d %s series", n, name)
		}
		if n := len(series(t, reg, name)); n == 0 {
			t.Errorf("the sweeper that ran the round exports no %s", name)
		}
	}
}
