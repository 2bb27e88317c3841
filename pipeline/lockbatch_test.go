package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/stampede-sh/stampede/lua"
	"github.com/stampede-sh/stampede/order"
	"github.com/stampede-sh/stampede/persistence"
	"github.com/stampede-sh/stampede/pipeline"
	"github.com/stampede-sh/stampede/pipeline/pipelinetest"
)

// stagedOrder is an order the writer stored (PROCESSING) whose ORDER_CREATED
// event the test publishes itself, in an order of its choosing.
type stagedOrder struct {
	no   string
	pid  int64
	qty  int64
	body []byte
}

// stage reserves n orders of quantity q for product p (users firstUser…),
// lets a writer store them, takes their ORDER_CREATED outbox rows out of the
// relay's way (marked SENT) and returns them in orderNo order.
func (e *env) stage(p persistence.Product, k lua.Keys, firstUser int64, n int, q int64) []stagedOrder {
	e.t.Helper()
	nos := e.reserve(p, k, firstUser, n, q)
	stop := run(e.t, "writer", e.writer(pipeline.WriterConfig{BatchWait: 5 * time.Millisecond}).Run)
	args := make([]any, len(nos))
	for i, no := range nos {
		args[i] = no
	}
	e.waitCount(20*time.Second, int64(n), `SELECT COUNT(*) FROM order_info WHERE status = 'PROCESSING' AND order_no IN (?`+strings.Repeat(",?", n-1)+`)`, args...)
	stop()
	out := make([]stagedOrder, 0, n)
	for _, no := range nos {
		var body []byte
		if err := e.store.DB.QueryRow(`SELECT payload FROM mq_outbox WHERE event_id = ?`, order.CreatedEventID(no)).Scan(&body); err != nil {
			e.t.Fatalf("outbox row of %s: %v", no, err)
		}
		out = append(out, stagedOrder{no: no, pid: p.ID, qty: q, body: body})
	}
	if _, err := e.store.DB.Exec(`UPDATE mq_outbox SET status = 'SENT' WHERE event_type = ?`, string(order.EventCreated)); err != nil {
		e.t.Fatal(err)
	}
	return out
}

// publishCreated publishes bodies to the order.created queue, in order, with
// publisher confirms, after declaring the topology.
func (e *env) publishCreated(bodies ...[]byte) {
	e.t.Helper()
	ch := pipelinetest.Channel(e.t, e.amqpURL)
	if err := e.topology().Declare(ch); err != nil {
		e.t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		e.t.Fatal(err)
	}
	for _, b := range bodies {
		dc, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), "", pipeline.QueueOrderCreated, true, false,
			amqp.Publishing{Body: b, DeliveryMode: amqp.Persistent})
		if err != nil {
			e.t.Fatal(err)
		}
		if ok, err := dc.WaitContext(context.Background()); !ok || err != nil {
			e.t.Fatalf("publish not confirmed: %v %v", ok, err)
		}
	}
}

// oneBatch is a consumer configuration that applies up to 256 messages
// published together as one batch.
func oneBatch(reg prometheus.Registerer) pipeline.ConsumerConfig {
	return pipeline.ConsumerConfig{LockChannels: 1, LockBatch: 256, LockBatchWait: 500 * time.Millisecond, Metrics: pipeline.NewMetrics(reg)}
}

// metric returns the value of the series name{labels} in reg (0 if absent).
func metric(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if v, ok := labels[lp.GetName()]; ok && v != lp.GetValue() {
					continue next
				}
			}
			switch {
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue()
			case m.GetHistogram() != nil:
				return float64(m.GetHistogram().GetSampleCount())
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue()
			}
		}
	}
	return 0
}

// waitingEvents counts, per orderNo, the WAITING_PAY status changes in the
// outbox: single events and those inside ORDER_STATUS_BATCH rows.
func (e *env) waitingEvents() map[string]int {
	e.t.Helper()
	rows, err := e.store.DB.Query(`SELECT payload FROM mq_outbox WHERE event_type IN (?, ?)`, string(order.EventStatusChanged), string(order.EventStatusBatch))
	if err != nil {
		e.t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var body []byte
		if err := rows.Scan(&body); err != nil {
			e.t.Fatal(err)
		}
		ev, err := order.DecodeEvent(body)
		if err != nil {
			e.t.Fatalf("outbox payload %s: %v", body, err)
		}
		evs := []order.Event{ev}
		if ev.Type == order.EventStatusBatch {
			evs = ev.Events
		}
		for _, x := range evs {
			if x.Status == order.WaitingPay {
				out[x.OrderNo]++
			}
		}
	}
	if err := rows.Err(); err != nil {
		e.t.Fatal(err)
	}
	return out
}

// checkAppliedOnce checks that each of nos was locked exactly once: one
// consume-log row, one LOCK flow, one WAITING_PAY status event, version 2.
func (e *env) checkAppliedOnce(nos []string) {
	e.t.Helper()
	waiting := e.waitingEvents()
	for _, no := range nos {
		if n := e.count(`SELECT COUNT(*) FROM mq_consume_log WHERE event_id = ? AND consumer_name = ?`, order.CreatedEventID(no), pipeline.ConsumerOrderLock); n != 1 {
			e.t.Errorf("%s: %d consume log rows, want 1", no, n)
		}
		if n := e.count(`SELECT COUNT(*) FROM stock_flow WHERE biz_type = 'LOCK' AND biz_no = ?`, no); n != 1 {
			e.t.Errorf("%s: %d LOCK flows, want 1", no, n)
		}
		if n := waiting[no]; n != 1 {
			e.t.Errorf("%s: %d WAITING_PAY status events, want 1", no, n)
		}
		if n := e.count(`SELECT COUNT(*) FROM order_info WHERE order_no = ? AND status = 'WAITING_PAY' AND version = 2 AND pay_deadline IS NOT NULL`, no); n != 1 {
			e.t.Errorf("%s: not WAITING_PAY at version 2 with a deadline", no)
		}
	}
}

// A batch of 100 with one poison message: the poison's transaction fails
// (its LOCK flow already exists: corrupt data that only MySQL detects), the
// batch is split until the poison stands alone, the 99 others are applied in
// the halves and acknowledged, and the poison goes to the dead-letter queue.
func TestLockBatchIsolatesPoison(t *testing.T) { forEachQueueType(t, testLockBatchIsolatesPoison) }

func testLockBatchIsolatesPoison(t *testing.T, qt pipeline.QueueType) {
	e := newEnvType(t, qt)
	p, k := e.product(1000, 1000)
	staged := e.stage(p, k, 1, 100, 1)
	poison := staged[37]
	if _, err := e.store.DB.Exec(`INSERT INTO stock_flow (biz_type, biz_no, product_id, quantity, reason) VALUES ('LOCK', ?, ?, 1, 'corrupt')`, poison.no, p.ID); err != nil {
		t.Fatal(err)
	}
	bodies := make([][]byte, 0, len(staged))
	var good []string
	for _, s := range staged {
		bodies = append(bodies, s.body)
		if s.no != poison.no {
			good = append(good, s.no)
		}
	}
	e.publishCreated(bodies...)
	reg := prometheus.NewRegistry()
	c := e.consumer(oneBatch(reg))
	e.own(c, reg)
	run(t, "consumer", c.Run)

	pipelinetest.WaitFor(t, 20*time.Second, "99 acked, 1 dead-lettered", func() (bool, string) {
		st := e.consumerStats(c)
		return st.Acked == 99 && st.Rejected == 1, fmt.Sprintf("%+v", st)
	})
	e.checkAppliedOnce(good)
	if n := e.count(`SELECT COUNT(*) FROM order_info WHERE order_no = ? AND status = 'PROCESSING'`, poison.no); n != 1 {
		t.Errorf("poison order changed")
	}
	if n := e.count(`SELECT COUNT(*) FROM mq_consume_log WHERE event_id = ?`, order.CreatedEventID(poison.no)); n != 0 {
		t.Errorf("poison recorded as consumed")
	}
	if st := e.stock(p.ID); st.Locked != 99 || st.Available != 901 {
		t.Errorf("mysql stock %+v, want 99 locked", st)
	}
	pipelinetest.WaitFor(t, 5*time.Second, "poison in the dead-letter queue", func() (bool, string) {
		n := pipelinetest.QueueDepth(t, e.amqpURL, pipeline.QueueDLQ)
		return n == 1, fmt.Sprintf("%d dead letters", n)
	})
	if n := metric(t, reg, "stampede_consumer_lock_batch_splits_total", nil); n < 1 {
		t.Errorf("%v batch splits, want the batch split", n)
	}
	// Applied in a few transactions, not 99, each announcing its WAITING_PAY
	// changes in one batch message.
	txs := metric(t, reg, "stampede_consumer_lock_batch_messages", nil)
	if txs < 2 || txs > 16 {
		t.Errorf("%v committed lock transactions for 99 orders", txs)
	}
	if n := e.count(`SELECT COUNT(*) FROM mq_outbox WHERE event_type = ?`, string(order.EventStatusBatch)); float64(n) != txs {
		t.Errorf("%d status batch rows for %v lock transactions of one product", n, txs)
	}
}

// Duplicated events inside one batch and across batches are applied once.
func TestLockBatchDuplicates(t *testing.T) { forEachQueueType(t, testLockBatchDuplicates) }

func testLockBatchDuplicates(t *testing.T, qt pipeline.QueueType) {
	e := newEnvType(t, qt)
	p, k := e.product(100, 100)
	staged := e.stage(p, k, 1, 40, 2)
	var bodies [][]byte
	var nos []string
	for _, s := range staged {
		bodies = append(bodies, s.body, s.body) // twice in the same batch
		nos = append(nos, s.no)
	}
	e.publishCreated(bodies...)
	reg := prometheus.NewRegistry()
	c := e.consumer(oneBatch(reg))
	e.own(c, reg)
	run(t, "consumer", c.Run)
	pipelinetest.WaitFor(t, 20*time.Second, "80 acked", func() (bool, string) {
		st := e.consumerStats(c)
		return st.Acked == 80, fmt.Sprintf("%+v", st)
	})
	// A third copy of each, in a later batch.
	var third [][]byte
	for i := 0; i < len(bodies); i += 2 {
		third = append(third, bodies[i])
	}
	e.publishCreated(third...)
	pipelinetest.WaitFor(t, 20*time.Second, "120 acked", func() (bool, string) {
		st := e.consumerStats(c)
		return st.Acked == 120, fmt.Sprintf("%+v", st)
	})
	e.checkAppliedOnce(nos)
	if st := e.stock(p.ID); st.Locked != 80 || st.Available != 20 {
		t.Errorf("mysql stock %+v, want 80 locked", st)
	}
	lock := map[string]string{"handler": pipeline.ConsumerOrderLock}
	if n := metric(t, reg, "stampede_consumer_messages_total", merge(lock, "outcome", pipeline.OutcomeDuplicate)); n != 80 {
		t.Errorf("%v duplicates, want 80", n)
	}
	if n := metric(t, reg, "stampede_consumer_messages_total", merge(lock, "outcome", pipeline.OutcomeOK)); n != 40 {
		t.Errorf("%v applied, want 40", n)
	}
}

func merge(m map[string]string, k, v string) map[string]string {
	out := map[string]string{k: v}
	for a, b := range m {
		out[a] = b
	}
	return out
}

// Stock short in the middle of a batch over several products: in batch
// order, exactly the orders that no longer fit their product's MySQL stock
// become FAILED (0-unit RELEASE flow), the rest are locked, and the FAILED
// orders' Redis reservations are released once, even when their status
// events are delivered again.
func TestLockBatchStockShortOverProducts(t *testing.T) {
	forEachQueueType(t, testLockBatchStockShortOverProducts)
}

func testLockBatchStockShortOverProducts(t *testing.T, qt pipeline.QueueType) {
	e := newEnvType(t, qt)
	// Redis holds more than MySQL for a and b: some of their orders cannot
	// lock. c has plenty.
	type prod struct {
		p     persistence.Product
		k     lua.Keys
		mysql int64
	}
	var prods []prod
	for _, total := range []struct{ mysql, redis int64 }{{7, 40}, {4, 40}, {100, 100}} {
		p, k := e.product(total.mysql, total.redis)
		prods = append(prods, prod{p, k, total.mysql})
	}
	var perProduct [][]stagedOrder
	user := int64(1)
	for _, pr := range prods {
		var s []stagedOrder
		for _, q := range []int64{1, 2, 3} { // 4 orders of each quantity
			s = append(s, e.stage(pr.p, pr.k, user, 4, q)...)
			user += 4
		}
		perProduct = append(perProduct, s)
	}
	// Interleave: a1 b1 c1 a2 b2 c2 … with quantities mixed within products.
	var batch []stagedOrder
	for j := range perProduct[0] {
		for i := range perProduct {
			s := perProduct[i]
			batch = append(batch, s[(j*5)%len(s)])
		}
	}
	// The expected outcome, by the rule: in batch order, while it fits.
	left := map[int64]int64{}
	for _, pr := range prods {
		left[pr.p.ID] = pr.mysql
	}
	want := map[string]order.Status{}
	wantLocked := map[int64]int64{}
	wantReleased := map[int64]int64{} // Redis units given back
	var bodies [][]byte
	for _, s := range batch {
		bodies = append(bodies, s.body)
		if _, dup := want[s.no]; dup {
			t.Fatalf("batch lists %s twice", s.no)
		}
		if s.qty <= left[s.pid] {
			left[s.pid] -= s.qty
			wantLocked[s.pid] += s.qty
			want[s.no] = order.WaitingPay
		} else {
			want[s.no] = order.Failed
			wantReleased[s.pid] += s.qty
		}
	}
	if len(batch) != 36 || wantReleased[prods[0].p.ID] == 0 || wantReleased[prods[1].p.ID] == 0 || wantReleased[prods[2].p.ID] != 0 {
		t.Fatalf("bad test setup: %d orders, released %v", len(batch), wantReleased)
	}
	redisBefore := map[int64]int64{}
	for _, pr := range prods {
		redisBefore[pr.p.ID] = e.redisAvailable(pr.k)
	}
	e.publishCreated(bodies...)
	reg := prometheus.NewRegistry()
	c := e.consumer(oneBatch(reg))
	e.own(c, reg)
	run(t, "consumer", c.Run)
	run(t, "relay", e.relay(pipeline.RelayConfig{}).Run) // carries the FAILED events to the release consumer
	e.waitCount(20*time.Second, 0, `SELECT COUNT(*) FROM order_info WHERE status = 'PROCESSING'`)
	for no, st := range want {
		var got string
		if err := e.store.DB.QueryRow(`SELECT status FROM order_info WHERE order_no = ?`, no).Scan(&got); err != nil || got != string(st) {
			t.Errorf("%s is %s, want %s (%v)", no, got, st, err)
		}
	}
	if n := metric(t, reg, "stampede_consumer_lock_batch_messages", nil); n != 1 {
		t.Errorf("%v lock transactions, want the 36 orders in one", n)
	}
	waitReleased := func() {
		for _, pr := range prods {
			pid := pr.p.ID
			pipelinetest.WaitFor(t, 10*time.Second, "redis release of the failed orders", func() (bool, string) {
				a := e.redisAvailable(pr.k)
				return a == redisBefore[pid]+wantReleased[pid], fmt.Sprintf("product %d: redis available %d, want %d", pid, a, redisBefore[pid]+wantReleased[pid])
			})
		}
		e.waitCount(10*time.Second, 0, `SELECT COUNT(*) FROM mq_outbox WHERE status <> 'SENT'`)
	}
	waitReleased()
	for _, pr := range prods {
		pid := pr.p.ID
		if st := e.stock(pid); st.Locked != wantLocked[pid] || st.Available != pr.mysql-wantLocked[pid] {
			t.Errorf("product %d: mysql stock %+v, want locked %d", pid, st, wantLocked[pid])
		}
	}
	var failed int64
	for _, st := range want {
		if st == order.Failed {
			failed++
		}
	}
	if n := e.count(`SELECT COUNT(*) FROM stock_flow WHERE biz_type = 'RELEASE' AND quantity = 0 AND reason = 'mysql stock short'`); n != failed {
		t.Errorf("%d RELEASE flows, want %d", n, failed)
	}
	// The FAILED events again (a relay that died before marking them SENT):
	// nothing is released twice.
	acked := e.consumerStats(c).Acked
	if _, err := e.store.DB.Exec(`UPDATE mq_outbox SET status = 'NEW', next_retry_at = NOW(3) WHERE routing_key = ?`, order.RouteStatus(order.Failed)); err != nil {
		t.Fatal(err)
	}
	pipelinetest.WaitFor(t, 10*time.Second, "redelivered releases handled", func() (bool, string) {
		n := e.consumerStats(c).Acked - acked
		return n >= failed, fmt.Sprintf("%d acked since", n)
	})
	waitReleased()
}

// childEnv names the environment variable that makes
// TestLockBatchChildProcess run a consumer that dies by SIGKILL after its
// first commit.
const childEnv = "STAMPEDE_TEST_LOCK_CHILD"

// TestLockBatchChildProcess is not a test on its own: run by
// TestLockBatchKilledAfterCommit in a child process, it consumes order.created
// and kills its own process with SIGKILL after the first batch committed,
// before any ack.
func TestLockBatchChildProcess(t *testing.T) {
	url := os.Getenv(childEnv)
	if url == "" {
		t.Skip("run by TestLockBatchKilledAfterCommit")
	}
	store, err := persistence.Open(context.Background(), os.Getenv(childMySQLEnv))
	if err != nil {
		t.Fatal(err)
	}
	rdb := childRedis(t)
	conn, err := pipeline.NewConn(pipeline.ConnConfig{URL: url, Topology: pipeline.TopologyConfig{QueueType: pipeline.QueueType(os.Getenv(childEnv + "_TYPE"))}})
	if err != nil {
		t.Fatal(err)
	}
	c, err := pipeline.NewConsumer(store, rdb, conn, pipeline.ConsumerConfig{LockChannels: 1, LockBatch: 256, LockBatchWait: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	c.TestSignals.AfterLockCommit = func(int) { syscall.Kill(os.Getpid(), syscall.SIGKILL) }
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c.Run(ctx)
	t.Fatal("the consumer was not killed")
}

// A consumer process killed with SIGKILL after its batch committed and
// before the ack: the broker redelivers the whole batch, and the next
// consumer applies none of it again.
func TestLockBatchKilledAfterCommit(t *testing.T) {
	forEachQueueType(t, testLockBatchKilledAfterCommit)
}

func testLockBatchKilledAfterCommit(t *testing.T, qt pipeline.QueueType) {
	e := newEnvType(t, qt)
	p, k := e.product(100, 100)
	staged := e.stage(p, k, 1, 50, 1)
	var bodies [][]byte
	var nos []string
	for _, s := range staged {
		bodies = append(bodies, s.body)
		nos = append(nos, s.no)
	}
	e.publishCreated(bodies...)

	cmd := exec.Command(os.Args[0], "-test.run=^TestLockBatchChildProcess$", "-test.count=1")
	cmd.Env = append(e.childEnviron(), childEnv+"="+e.amqpURL, childEnv+"_TYPE="+string(qt))
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || !strings.Contains(ee.String(), "killed") {
		t.Fatalf("child consumer did not die by SIGKILL: %v\n%s", err, out)
	}
	// The batch is in MySQL, its messages back in the queue.
	if n := e.count(`SELECT COUNT(*) FROM order_info WHERE product_id = ? AND status = 'WAITING_PAY'`, p.ID); n != 50 {
		t.Fatalf("%d orders locked by the killed consumer, want its batch of 50", n)
	}
	pipelinetest.WaitFor(t, 10*time.Second, "the unacked batch back in its queue", func() (bool, string) {
		n := pipelinetest.QueueDepth(t, e.amqpURL, pipeline.QueueOrderCreated)
		return n == 50, fmt.Sprintf("%d ready", n)
	})
	reg := prometheus.NewRegistry()
	c := e.consumer(oneBatch(reg))
	e.own(c, reg)
	run(t, "consumer", c.Run)
	pipelinetest.WaitFor(t, 20*time.Second, "redelivered batch acked", func() (bool, string) {
		st := e.consumerStats(c)
		return st.Acked == 50, fmt.Sprintf("%+v", st)
	})
	e.checkAppliedOnce(nos)
	if st := e.stock(p.ID); st.Locked != 50 || st.Available != 50 {
		t.Errorf("mysql stock %+v, want 50 locked once", st)
	}
	if n := metric(t, reg, "stampede_consumer_messages_total", map[string]string{"handler": pipeline.ConsumerOrderLock, "outcome": pipeline.OutcomeDuplicate}); n != 50 {
		t.Errorf("%v duplicates on redelivery, want 50", n)
	}
}
