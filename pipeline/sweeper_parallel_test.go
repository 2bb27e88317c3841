package pipeline_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/stampede-sh/stampede/order"
	"github.com/stampede-sh/stampede/persistence"
	"github.com/stampede-sh/stampede/persistence/persistencetest"
	"github.com/stampede-sh/stampede/pipeline"
	"github.com/stampede-sh/stampede/pipeline/pipelinetest"
)

// lockedOrders creates a product of total units and n WAITING_PAY orders of
// one unit (users 1…n) locked with payTimeout, as the batch order-lock
// consumer stores them; it returns the product and the orderNos.
func lockedOrders(t *testing.T, store *persistence.Store, gen *order.NoGenerator, total int64, n int, payTimeout time.Duration) (persistence.Product, []string) {
	t.Helper()
	ctx := context.Background()
	now := time.Now()
	p, err := store.CreateProduct(ctx, persistence.Product{Name: fmt.Sprintf("close-%d", now.UnixNano()), Price: 700, Total: total,
		MaxPerOrder: 5, SaleStart: now.Add(-time.Hour), SaleEnd: now.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	nos := make([]string, 0, n)
	for lo := 0; lo < n; lo += 500 {
		var batch []order.Reservation
		var events []persistence.LockEvent
		for i := lo; i < min(n, lo+500); i++ {
			r := order.Reservation{OrderNo: gen.Next(p.ID, 0), UserID: int64(i + 1), RequestID: fmt.Sprintf("r%d", i),
				ProductID: p.ID, Quantity: 1, UnitPrice: p.Price, AcceptedAt: now.UTC()}
			batch = append(batch, r)
			events = append(events, persistence.LockEvent{EventID: order.CreatedEventID(r.OrderNo), OrderNo: r.OrderNo})
			nos = append(nos, r.OrderNo)
		}
		if _, err := store.InsertReservations(ctx, batch, map[int64]string{p.ID: p.Name}); err != nil {
			t.Fatal(err)
		}
		res, err := store.LockStockBatch(ctx, pipeline.ConsumerOrderLock, events, payTimeout)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range res {
			if r.Outcome != persistence.LockLocked {
				t.Fatalf("lock %s: outcome %v err %v", r.Order.OrderNo, r.Outcome, r.Err)
			}
		}
	}
	return p, nos
}

// countQ runs a COUNT(*)-like query on store.
func countQ(t *testing.T, store *persistence.Store, query string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := store.DB.QueryRow(query, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

// TestParallelCloseWorkersDisjoint: 1,500 due orders, two sweepers of four
// close workers each (eight passes at once over four disjoint parts), small
// batches. Every order is closed exactly once: one RELEASE flow, version
// 3 (stored, locked, cancelled), one CANCELLED event in the status batches,
// the closed counters add up to the orders, no close attempt is lost to
// another pass, and no pass failed.
func TestParallelCloseWorkersDisjoint(t *testing.T) {
	store := persistencetest.New(t, "sweepparts")
	gen, err := order.NewNoGenerator(11)
	if err != nil {
		t.Fatal(err)
	}
	const n = 1500
	p, _ := lockedOrders(t, store, gen, n, n, time.Millisecond)
	time.Sleep(20 * time.Millisecond) // all due

	runCtx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var regs []*prometheus.Registry
	for range 2 {
		reg := prometheus.NewRegistry()
		s, err := pipeline.NewSweeper(store, pipeline.SweeperConfig{Interval: 2 * time.Millisecond, ErrorBackoff: time.Second, BatchSize: 40,
			Workers: 4, Metrics: pipeline.NewMetrics(reg)})
		if err != nil {
			t.Fatal(err)
		}
		regs = append(regs, reg)
		wg.Go(func() { s.Run(runCtx) })
	}
	deadline := time.Now().Add(60 * time.Second)
	for countQ(t, store, `SELECT COUNT(*) FROM order_info WHERE product_id = ? AND status = 'WAITING_PAY'`, p.ID) > 0 {
		if time.Now().After(deadline) {
			cancel()
			wg.Wait()
			t.Fatal("orders still WAITING_PAY after 60s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond) // more passes: nothing else may change
	cancel()
	wg.Wait()

	var closed, lost, errs, passes int64
	for i, reg := range regs {
		st := sweeperStatsOf(t, reg)
		t.Logf("sweeper %d: closed %d, lost %d, passes %d, skipped %d, errors %d", i, st.Closed, st.Lost, st.Passes, st.Skipped, st.Errors)
		closed, lost, errs, passes = closed+st.Closed, lost+st.Lost, errs+st.Errors, passes+st.Passes
	}
	if closed != n || lost != 0 || errs != 0 {
		t.Errorf("closed %d (want %d), lost %d, errors %d (want 0)", closed, n, lost, errs)
	}
	if passes < n/40 {
		t.Errorf("%d passes for %d orders in batches of 40", passes, n)
	}
	if c := countQ(t, store, `SELECT COUNT(*) FROM order_info WHERE product_id = ? AND status = 'CANCELLED' AND version = 3 AND close_reason = ?`,
		p.ID, string(order.ReasonTimeout)); c != n {
		t.Errorf("%d orders CANCELLED at version 3, want %d", c, n)
	}
	if f := countQ(t, store, `SELECT COUNT(*) FROM stock_flow WHERE product_id = ? AND biz_type = 'RELEASE' AND quantity = 1`, p.ID); f != n {
		t.Errorf("%d RELEASE flows, want %d", f, n)
	}
	if st, _ := store.GetStock(context.Background(), p.ID); st.Available != n || st.Locked != 0 {
		t.Errorf("mysql stock %+v, want all %d available again", st, n)
	}
	assertOneEventPerOrder(t, store, p.ID, n)
}

// assertOneEventPerOrder checks that the CANCELLED status batches of
// product pid carry n distinct orders, each once.
func assertOneEventPerOrder(t *testing.T, store *persistence.Store, pid int64, n int) {
	t.Helper()
	rows, err := store.DB.Query(`SELECT payload FROM mq_outbox WHERE event_type = ? AND routing_key = ?`,
		string(order.EventStatusBatch), order.RouteStatus(order.Cancelled))
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	seen := map[string]int{}
	for rows.Next() {
		var payload []byte
		if err := rows.Scan(&payload); err != nil {
			t.Fatal(err)
		}
		var b order.Event
		if err := json.Unmarshal(payload, &b); err != nil {
			t.Fatalf("status batch %s: %v", payload, err)
		}
		for _, e := range b.Events {
			if e.ProductID == pid {
				seen[e.OrderNo]++
			}
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(seen) != n {
		t.Errorf("status batches carry %d orders, want %d", len(seen), n)
	}
	for no, c := range seen {
		if c != 1 {
			t.Errorf("order %s in %d CANCELLED events, want 1", no, c)
		}
	}
}

// TestClosePathRacesPaymentsAndCancels: 900 orders fall due while two
// sweepers of three close workers each close them, payers pay a third of
// them and buyers cancel another third, all at once. Every order ends in one
// state (PAID or CANCELLED), has exactly the flows of that state (one
// CONFIRM, or one RELEASE), a payment that lost its race is recorded for
// refund and never sells, and MySQL stock adds up: nothing locked, sold =
// paid, the rest available.
func TestClosePathRacesPaymentsAndCancels(t *testing.T) {
	store := persistencetest.New(t, "sweepparts")
	gen, err := order.NewNoGenerator(12)
	if err != nil {
		t.Fatal(err)
	}
	const n = 900
	ctx := context.Background()
	p, nos := lockedOrders(t, store, gen, n, n, time.Hour)
	// Deadlines spread over the next 0.3–4.2 s, interleaved over the
	// orders, so that the racers below meet orders before, at and after
	// their deadline.
	if _, err := store.DB.Exec(`UPDATE order_info SET pay_deadline = NOW(3) + INTERVAL (300 + (id MOD 40) * 100) * 1000 MICROSECOND
		WHERE product_id = ?`, p.ID); err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	for range 2 {
		s, err := pipeline.NewSweeper(store, pipeline.SweeperConfig{Interval: 5 * time.Millisecond, ErrorBackoff: time.Second, BatchSize: 50,
			Workers: 3, Metrics: pipeline.NewMetrics(prometheus.NewRegistry())})
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() { s.Run(runCtx) })
	}
	r := raceCloses(t, store, p, nos)
	deadline := time.Now().Add(60 * time.Second)
	for countQ(t, store, `SELECT COUNT(*) FROM order_info WHERE product_id = ? AND status = 'WAITING_PAY'`, p.ID) > 0 {
		if time.Now().After(deadline) {
			t.Fatal("orders still WAITING_PAY after 60s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
	cancel()
	wg.Wait()

	paid, refund, userCancelled, lostCancel := &r.paid, &r.refund, &r.userCancelled, &r.lostCancel
	t.Logf("paid %d, payments refunded %d, user cancels %d, lost to the sweeper %d",
		mapLen(paid), mapLen(refund), mapLen(userCancelled), mapLen(lostCancel))
	if mapLen(paid) == 0 || mapLen(userCancelled) == 0 {
		t.Error("no payment or no user cancel won: the race did not happen, the test proves nothing")
	}
	checkOrderEnds(t, store, p.ID, nos, paid)
	if c := countQ(t, store, `SELECT COUNT(*) FROM payment WHERE order_no IN (SELECT order_no FROM order_info WHERE product_id = ?) AND status = 'REFUND_PENDING'`, p.ID); c != mapLen(refund) {
		t.Errorf("%d REFUND_PENDING payments, want %d", c, mapLen(refund))
	}
	st, _ := store.GetStock(ctx, p.ID)
	if sold := mapLen(paid); st.Locked != 0 || st.Sold != sold || st.Available != n-sold {
		t.Errorf("mysql stock %+v, want locked 0, sold %d, available %d", st, sold, n-sold)
	}
}

// raceResult is what the racers of raceCloses won and lost (orderNo → true).
type raceResult struct {
	paid, refund, userCancelled, lostCancel sync.Map
}

func mapLen(m *sync.Map) (c int64) {
	m.Range(func(any, any) bool { c++; return true })
	return c
}

// raceCloses pays the orders nos[i] with i % 3 = 0 and cancels (as their
// buyer) those with i % 3 = 1, from 16 goroutines, while the sweepers close
// what falls due; it returns who won each.
func raceCloses(t *testing.T, store *persistence.Store, p persistence.Product, nos []string) *raceResult {
	t.Helper()
	ctx := context.Background()
	n := len(nos)
	r := &raceResult{}
	var racers sync.WaitGroup
	const racerCount = 16
	for w := range racerCount {
		racers.Go(func() {
			for i := w; i < n; i += racerCount {
				no := nos[i]
				switch i % 3 {
				case 0:
					out, _, err := store.Pay(ctx, persistence.Payment{PaymentNo: "pay-" + no, OrderNo: no, Amount: p.Price, PaidAt: time.Now()})
					switch {
					case err != nil:
						t.Errorf("pay %s: %v", no, err)
					case out == persistence.PayPaid:
						r.paid.Store(no, true)
					case out == persistence.PayRefundPending:
						r.refund.Store(no, true)
					}
				case 1:
					_, err := store.CloseOrder(ctx, persistence.CloseRequest{OrderNo: no, UserID: int64(i + 1), Reason: order.ReasonUser,
						From: []order.Status{order.WaitingPay}})
					switch {
					case err == nil:
						r.userCancelled.Store(no, true)
					case errors.Is(err, persistence.ErrInvalidState):
						r.lostCancel.Store(no, true)
					default:
						t.Errorf("cancel %s: %v", no, err)
					}
				}
			}
		})
	}
	racers.Wait()
	return r
}

// checkOrderEnds checks that each of nos is PAID (exactly those in paid,
// with one CONFIRM flow and no RELEASE) or CANCELLED (one RELEASE flow of
// its unit, no CONFIRM).
func checkOrderEnds(t *testing.T, store *persistence.Store, pid int64, nos []string, paid *sync.Map) {
	t.Helper()
	rows, err := store.DB.Query(`SELECT o.order_no, o.status,
		(SELECT COUNT(*) FROM stock_flow f WHERE f.biz_type = 'RELEASE' AND f.biz_no = o.order_no AND f.quantity = 1),
		(SELECT COUNT(*) FROM stock_flow f WHERE f.biz_type = 'CONFIRM' AND f.biz_no = o.order_no)
		FROM order_info o WHERE o.product_id = ?`, pid)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	seen := 0
	for rows.Next() {
		var no, status string
		var releases, confirms int
		if err := rows.Scan(&no, &status, &releases, &confirms); err != nil {
			t.Fatal(err)
		}
		seen++
		_, wasPaid := paid.Load(no)
		switch {
		case status == string(order.Paid) && wasPaid && confirms == 1 && releases == 0:
		case status == string(order.Cancelled) && !wasPaid && releases == 1 && confirms == 0:
		default:
			t.Errorf("order %s: %s (paid by the test: %v), %d RELEASE and %d CONFIRM flows", no, status, wasPaid, releases, confirms)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if seen != len(nos) {
		t.Errorf("%d orders, want %d", seen, len(nos))
	}
}

// TestReconcileDeferredWhileHot: a reconciliation round that falls due
// while a product has more than 1,000 intake entries not yet written waits
// (counted as deferred, no round done) and runs once the backlog is gone.
func TestReconcileDeferredWhileHot(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	_, k := e.product(10, 10)
	for i := range 1001 {
		if err := e.rdb.XAdd(ctx, &redis.XAddArgs{Stream: k.Intake(), Values: []any{"n", i}}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	m, reg := e.metrics()
	s, err := pipeline.NewSweeper(e.store, pipeline.SweeperConfig{Interval: 20 * time.Millisecond, Redis: e.rdb, Metrics: m,
		ReconcileInterval: 50 * time.Millisecond, ReconcileDeferMax: time.Minute, LostGrace: -1})
	if err != nil {
		t.Fatal(err)
	}
	run(t, "sweeper", s.Run)
	passes := func(result string) int64 {
		return int64(pipelinetest.Metric(t, reg, "stampede_sweeper_passes_total", "pass", "reconcile", "result", result))
	}
	pipelinetest.WaitFor(t, 10*time.Second, "reconcile rounds deferred", func() (bool, string) {
		return passes("deferred") >= 5, fmt.Sprintf("deferred %d", passes("deferred"))
	})
	if n := passes("done") + passes("skipped"); n != 0 {
		t.Fatalf("%d reconcile rounds ran or were skipped during the hot period, want 0", n)
	}
	if err := e.rdb.Del(ctx, k.Intake()).Err(); err != nil {
		t.Fatal(err)
	}
	pipelinetest.WaitFor(t, 10*time.Second, "a reconcile round after the hot period", func() (bool, string) {
		return passes("done")+passes("skipped") > 0, fmt.Sprintf("done %d, skipped %d", passes("done"), passes("skipped"))
	})
}

// TestReconcileDeferredWhileClosesOverdue: a reconciliation round also waits
// while orders wait for their close more than a second past their pay
// deadline — close passes slowed down under load close few orders per
// window, and the round's reads would slow them further (seen in the drain
// scenario: a round's repair timing out in the middle of the closes). Here
// the overdue orders are held by another transaction, so no pass closes
// them; once it lets go, they close and the round runs.
func TestReconcileDeferredWhileClosesOverdue(t *testing.T) {
	e := newEnv(t)
	p, _ := lockedOrders(t, e.store, e.gen, 10, 3, time.Hour)
	if _, err := e.store.DB.Exec(`UPDATE order_info SET pay_deadline = NOW(3) - INTERVAL 5 SECOND WHERE product_id = ?`, p.ID); err != nil {
		t.Fatal(err)
	}
	tx, err := e.store.DB.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.Exec(`SELECT id FROM order_info WHERE product_id = ? FOR UPDATE`, p.ID); err != nil {
		t.Fatal(err)
	}
	m, reg := e.metrics()
	s, err := pipeline.NewSweeper(e.store, pipeline.SweeperConfig{Interval: 20 * time.Millisecond, Redis: e.rdb, Metrics: m,
		ReconcileInterval: 50 * time.Millisecond, ReconcileDeferMax: time.Minute, LostGrace: -1})
	if err != nil {
		t.Fatal(err)
	}
	run(t, "sweeper", s.Run)
	passes := func(result string) int64 {
		return int64(pipelinetest.Metric(t, reg, "stampede_sweeper_passes_total", "pass", "reconcile", "result", result))
	}
	pipelinetest.WaitFor(t, 10*time.Second, "reconcile rounds deferred", func() (bool, string) {
		return passes("deferred") >= 5, fmt.Sprintf("deferred %d", passes("deferred"))
	})
	if n := passes("done") + passes("skipped"); n != 0 {
		t.Fatalf("%d reconcile rounds ran or were skipped while orders were overdue, want 0", n)
	}
	tx.Rollback()
	e.waitCount(10*time.Second, 3, `SELECT COUNT(*) FROM order_info WHERE product_id = ? AND status = 'CANCELLED'`, p.ID)
	pipelinetest.WaitFor(t, 10*time.Second, "a reconcile round after the closes", func() (bool, string) {
		return passes("done")+passes("skipped") > 0, fmt.Sprintf("done %d, skipped %d", passes("done"), passes("skipped"))
	})
}
