package pipeline_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stampede-sh/stampede/order"
	"github.com/stampede-sh/stampede/persistence"
	"github.com/stampede-sh/stampede/pipeline"
)

func TestSweepersCloseDueOrdersOnce(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	p, _ := e.product(100, 100)
	var batch []order.Reservation
	for i := range 22 {
		batch = append(batch, order.Reservation{OrderNo: e.gen.Next(p.ID, 0), UserID: int64(i + 1), RequestID: fmt.Sprintf("r%d", i),
			ProductID: p.ID, Quantity: 2, UnitPrice: p.Price, AcceptedAt: time.Now().UTC()})
	}
	if _, err := e.store.InsertReservations(ctx, batch, map[int64]string{p.ID: p.Name}); err != nil {
		t.Fatal(err)
	}
	for i, r := range batch {
		timeout := time.Millisecond // due almost at once
		if i == 0 {
			timeout = time.Hour // not due
		}
		if out, _, err := e.store.LockStock(ctx, order.CreatedEventID(r.OrderNo), r.OrderNo, pipeline.ConsumerOrderLock, timeout); err != nil || out != persistence.LockLocked {
			t.Fatalf("lock: %v %v", out, err)
		}
	}
	time.Sleep(20 * time.Millisecond)
	// Paid after its deadline but before any sweep: must stay PAID.
	if out, _, err := e.store.Pay(ctx, persistence.Payment{PaymentNo: "p1", OrderNo: batch[1].OrderNo, Amount: 2 * p.Price, PaidAt: time.Now()}); err != nil || out != persistence.PayPaid {
		t.Fatalf("pay: %v %v", out, err)
	}

	var regs []*prometheus.Registry // one per sweeper
	for i := range 3 {
		m, reg := e.metrics()
		s, err := pipeline.NewSweeper(e.store, pipeline.SweeperConfig{Interval: 20 * time.Millisecond, BatchSize: 5, Workers: 1, Metrics: m})
		if err != nil {
			t.Fatal(err)
		}
		regs = append(regs, reg)
		run(t, fmt.Sprintf("sweeper %d", i), s.Run)
	}
	e.waitCount(10*time.Second, 20, `SELECT COUNT(*) FROM order_info WHERE status = 'CANCELLED' AND close_reason = ?`, string(order.ReasonTimeout))
	time.Sleep(100 * time.Millisecond) // a few more sweeps: nothing else may change
	var closed int64
	for _, reg := range regs {
		closed += sweeperStatsOf(t, reg).Closed
	}
	if closed != 20 {
		t.Errorf("sweepers closed %d orders, want 20", closed)
	}
	if o, _ := e.store.GetOrder(ctx, batch[0].OrderNo); o.Status != order.WaitingPay {
		t.Errorf("order not due is %s", o.Status)
	}
	if o, _ := e.store.GetOrder(ctx, batch[1].OrderNo); o.Status != order.Paid {
		t.Errorf("paid order is %s", o.Status)
	}
	if n := e.count(`SELECT COUNT(*) FROM stock_flow WHERE biz_type = 'RELEASE' AND quantity = 2`); n != 20 {
		t.Errorf("%d RELEASE flows, want 20", n)
	}
	if st := e.stock(p.ID); st.Available != 96 || st.Locked != 2 || st.Sold != 2 {
		t.Errorf("mysql stock %+v, want 96/2/2", st)
	}
	// Each close pass (5 orders of one product) appended one CANCELLED status
	// batch for push and the Redis release: 20 orders, 4 passes (one close
	// worker per sweeper here: with several, each worker's part of the due
	// orders fills its own passes; TestParallelCloseWorkersDisjoint).
	if n := e.count(`SELECT COUNT(*) FROM mq_outbox WHERE routing_key = ? AND event_type = ?`, order.RouteStatus(order.Cancelled), string(order.EventStatusBatch)); n != 4 {
		t.Errorf("%d CANCELLED status batches, want 4", n)
	}
}

func TestConfigValidation(t *testing.T) {
	errs := map[string]error{}
	_, errs["writer batch size -1"] = pipeline.NewWriter(nil, nil, pipeline.WriterConfig{BatchSize: -1})
	_, errs["relay lease below twice the confirm timeout"] = pipeline.NewRelay(nil, nil, pipeline.RelayConfig{Lease: time.Second, ConfirmTimeout: time.Second})
	_, errs["consumer -2 workers"] = pipeline.NewConsumer(nil, nil, nil, pipeline.ConsumerConfig{Workers: -2})
	_, errs["sweeper batch size 100000"] = pipeline.NewSweeper(nil, pipeline.SweeperConfig{BatchSize: 100000})
	_, errs["conn with an http url"] = pipeline.NewConn(pipeline.ConnConfig{URL: "http://nope"})
	for what, err := range errs {
		if err == nil || !strings.HasPrefix(err.Error(), "invalid config: ") {
			t.Errorf("%s: got %v, want an invalid config error", what, err)
		}
	}
	if _, err := pipeline.NewWriter(nil, nil, pipeline.WriterConfig{}); err != nil {
		t.Errorf("defaults rejected: %v", err)
	}
}
