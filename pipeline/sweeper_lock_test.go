package pipeline_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stampede-sh/stampede/order"
	"github.com/stampede-sh/stampede/persistence"
	"github.com/stampede-sh/stampede/persistence/persistencetest"
	"github.com/stampede-sh/stampede/pipeline"
)

// TestSweepersShareWithoutWaste: three sweepers over one database and 300
// due orders in batches of 10. Every order is closed exactly once, by one
// of them, and no sweeper ever tries an order another one closed (Lost = 0):
// the close lock makes passes serial. Without the lock the three read the
// same oldest-first batches and most attempts are wasted.
func TestSweepersShareWithoutWaste(t *testing.T) {
	// Its own database: the lock is per database, and other tests may use
	// the package's shared one meanwhile.
	store := persistencetest.New(t, "sweeplock")
	ctx := context.Background()
	gen, err := order.NewNoGenerator(9)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	p, err := store.CreateProduct(ctx, persistence.Product{Name: "sweeplock", Price: 500, Total: 1000, MaxPerOrder: 5,
		SaleStart: now.Add(-time.Hour), SaleEnd: now.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	const n = 300
	var batch []order.Reservation
	for i := range n {
		batch = append(batch, order.Reservation{OrderNo: gen.Next(p.ID, 0), UserID: int64(i + 1), RequestID: fmt.Sprintf("r%d", i),
			ProductID: p.ID, Quantity: 1, UnitPrice: p.Price, AcceptedAt: now.UTC()})
	}
	if _, err := store.InsertReservations(ctx, batch, map[int64]string{p.ID: p.Name}); err != nil {
		t.Fatal(err)
	}
	for _, r := range batch {
		if out, _, err := store.LockStock(ctx, order.CreatedEventID(r.OrderNo), r.OrderNo, pipeline.ConsumerOrderLock, time.Millisecond); err != nil || out != persistence.LockLocked {
			t.Fatalf("lock: %v %v", out, err)
		}
	}
	time.Sleep(20 * time.Millisecond) // all due

	runCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var regs []*prometheus.Registry // one per sweeper
	for range 3 {
		reg := prometheus.NewRegistry()
		s, err := pipeline.NewSweeper(store, pipeline.SweeperConfig{Interval: 2 * time.Millisecond, ErrorBackoff: time.Second, BatchSize: 10,
			Metrics: pipeline.NewMetrics(reg)})
		if err != nil {
			t.Fatal(err)
		}
		regs = append(regs, reg)
		wg.Go(func() { s.Run(runCtx) })
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		var left int
		if err := store.DB.QueryRow(`SELECT COUNT(*) FROM order_info WHERE status = 'WAITING_PAY'`).Scan(&left); err != nil {
			t.Fatal(err)
		}
		if left == 0 {
			break
		}
		if time.Now().After(deadline) {
			cancel()
			wg.Wait()
			t.Fatalf("%d orders still WAITING_PAY after 30s", left)
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond) // more passes: nothing else may change
	cancel()
	wg.Wait()

	var closed, lost, skipped, errs int64
	for i, reg := range regs {
		st := sweeperStatsOf(t, reg)
		t.Logf("sweeper %d: closed %d, lost %d, passes %d, skipped %d, errors %d", i, st.Closed, st.Lost, st.Passes, st.Skipped, st.Errors)
		closed += st.Closed
		lost += st.Lost
		skipped += st.Skipped
		errs += st.Errors
	}
	if closed != n {
		t.Errorf("sweepers closed %d orders, want %d", closed, n)
	}
	if lost != 0 {
		t.Errorf("%d wasted close attempts (orders another sweeper had closed), want 0", lost)
	}
	if errs != 0 {
		t.Errorf("%d sweeper errors", errs)
	}
	if skipped == 0 {
		t.Errorf("no pass was skipped: the sweepers never contended, the test proves nothing")
	}
	var flows, cancelled int
	store.DB.QueryRow(`SELECT COUNT(*) FROM stock_flow WHERE biz_type = 'RELEASE'`).Scan(&flows)
	store.DB.QueryRow(`SELECT COUNT(*) FROM order_info WHERE status = 'CANCELLED' AND close_reason = ?`, string(order.ReasonTimeout)).Scan(&cancelled)
	if flows != n || cancelled != n {
		t.Errorf("%d RELEASE flows and %d timeout-cancelled orders, want %d each", flows, cancelled, n)
	}
	if st, _ := store.GetStock(ctx, p.ID); st.Available != 1000 || st.Locked != 0 {
		t.Errorf("mysql stock %+v, want all 1000 available again", st)
	}
}

// TestSweeperLockDiesWithItsHolder: a lock taken on a connection that then
// dies (as when its sweeper process is killed mid-pass) is free at once for
// the next sweeper; a released lock is free too, and a held one is not.
func TestSweeperLockDiesWithItsHolder(t *testing.T) {
	store := persistencetest.New(t, "sweeplock")
	other, err := persistence.Open(context.Background(), persistencetest.DSNFor(t, "sweeplock"))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	ctx := context.Background()
	l, ok, err := store.TryLock(ctx, "sweeper.close")
	if err != nil || !ok {
		t.Fatalf("first TryLock: %v %v", ok, err)
	}
	if _, ok, err := other.TryLock(ctx, "sweeper.close"); err != nil || ok {
		t.Fatalf("TryLock while held: ok %v err %v, want not ok", ok, err)
	}
	l.Release()
	l2, ok, err := other.TryLock(ctx, "sweeper.close")
	if err != nil || !ok {
		t.Fatalf("TryLock after Release: %v %v", ok, err)
	}
	// Kill the holder's session from outside, as a dead process's socket
	// would end it.
	var id int64
	if err := other.DB.QueryRow(`SELECT IS_USED_LOCK(CONCAT('stampede.sweeper.close.', DATABASE()))`).Scan(&id); err != nil || id == 0 {
		t.Fatalf("IS_USED_LOCK: %d %v", id, err)
	}
	if _, err := store.DB.Exec(fmt.Sprintf(`KILL CONNECTION %d`, id)); err != nil {
		t.Fatal(err)
	}
	var l3 *persistence.AdvisoryLock
	for range 100 {
		if l3, ok, err = store.TryLock(ctx, "sweeper.close"); err == nil && ok {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !ok {
		t.Fatalf("lock still held after its session was killed: %v", err)
	}
	l3.Release()
	l2.Release() // its connection is dead: discarded, no panic, no error
	// Another database's lock of the same name is independent.
	st2 := persistencetest.New(t, "sweeplock2")
	l4, ok, err := store.TryLock(ctx, "sweeper.close")
	if err != nil || !ok {
		t.Fatalf("relock: %v %v", ok, err)
	}
	defer l4.Release()
	l5, ok, err := st2.TryLock(ctx, "sweeper.close")
	if err != nil || !ok {
		t.Fatalf("same name in another database: %v %v, want its own lock", ok, err)
	}
	l5.Release()
}
