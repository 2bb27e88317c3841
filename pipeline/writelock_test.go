package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/stampede-sh/stampede/lua"
	"github.com/stampede-sh/stampede/order"
	"github.com/stampede-sh/stampede/persistence"
	"github.com/stampede-sh/stampede/pipeline"
	"github.com/stampede-sh/stampede/pipeline/pipelinetest"
)

// lockingWriter is a writer of the "writer" order-lock design.
func (e *env) lockingWriter(cfg pipeline.WriterConfig) *pipeline.Writer {
	e.t.Helper()
	cfg.LockOrders = true
	cfg.PayTimeout = time.Hour
	return e.writer(cfg)
}

// checkLockedOnce checks that each of nos was stored locked exactly once by
// the writer: WAITING_PAY at version 2 with a pay deadline, one item, one
// LOCK flow, one WAITING_PAY status event (inside an ORDER_STATUS_BATCH row),
// and neither an ORDER_CREATED row nor a consume-log row.
func (e *env) checkLockedOnce(nos []string) {
	e.t.Helper()
	waiting := e.waitingEvents()
	for _, no := range nos {
		if n := e.count(`SELECT COUNT(*) FROM order_info WHERE order_no = ? AND status = 'WAITING_PAY' AND version = 2 AND pay_deadline IS NOT NULL`, no); n != 1 {
			e.t.Errorf("%s: not WAITING_PAY at version 2 with a deadline", no)
		}
		if n := e.count(`SELECT COUNT(*) FROM order_item WHERE order_no = ?`, no); n != 1 {
			e.t.Errorf("%s: %d items, want 1", no, n)
		}
		if n := e.count(`SELECT COUNT(*) FROM stock_flow WHERE biz_type = 'LOCK' AND biz_no = ?`, no); n != 1 {
			e.t.Errorf("%s: %d LOCK flows, want 1", no, n)
		}
		if n := waiting[no]; n != 1 {
			e.t.Errorf("%s: %d WAITING_PAY status events, want 1", no, n)
		}
	}
	if n := e.count(`SELECT COUNT(*) FROM mq_outbox WHERE event_type = ?`, string(order.EventCreated)); n != 0 {
		e.t.Errorf("%d ORDER_CREATED outbox rows, want none", n)
	}
	if n := e.count(`SELECT COUNT(*) FROM mq_consume_log`); n != 0 {
		e.t.Errorf("%d consume-log rows, want none", n)
	}
}

// The writer design: one writer transaction per batch stores the orders
// WAITING_PAY with their items, LOCK flows, one conditional stock UPDATE per
// product and one ORDER_STATUS_BATCH outbox row per product — no
// ORDER_CREATED, no consume log, no order UPDATE.
func TestWriterLocksOrdersInItsBatch(t *testing.T) {
	e := newEnv(t)
	p, k := e.product(300, 300)
	q, kq := e.product(300, 300)
	nos := append(e.reserve(p, k, 1, 200, 1), e.reserve(q, kq, 1001, 100, 2)...)
	before := e.count(`SELECT COUNT(*) FROM mq_outbox`)
	w := e.lockingWriter(pipeline.WriterConfig{BatchSize: 500, BatchWait: 200 * time.Millisecond})
	run(t, "writer", w.Run)
	e.waitCount(20*time.Second, 300, `SELECT COUNT(*) FROM order_info WHERE status = 'WAITING_PAY'`)
	waitNoPending(t, e, k.Intake())
	waitNoPending(t, e, kq.Intake())
	e.checkLockedOnce(nos)
	if st := e.stock(p.ID); st.Locked != 200 || st.Available != 100 {
		t.Errorf("product %d stock %+v, want 200 locked", p.ID, st)
	}
	if st := e.stock(q.ID); st.Locked != 200 || st.Available != 100 {
		t.Errorf("product %d stock %+v, want 200 locked", q.ID, st)
	}
	batches := e.metric(w, "stampede_writer_batch_entries")
	if n := e.count(`SELECT COUNT(*) FROM mq_outbox`) - before; n < 2 || n > 2*batches {
		t.Errorf("%d outbox rows for %d batches over 2 products, want one per product and batch", n, batches)
	}
	if st := e.writerStats(w); st.Written != 300 || st.Duplicates != 0 {
		t.Errorf("writer stats %+v", st)
	}
	// Replays answer the new status from Redis.
	if st, err := e.rdb.HGet(context.Background(), k.Request(1, "req-1"), "status").Result(); err == nil && st != string(order.WaitingPay) {
		t.Errorf("status cache of req-1: %q", st)
	}
}

// writerChildEnv names the environment variable that makes
// TestWriterLockChildProcess run a locking writer that dies by SIGKILL after
// its first commit.
const writerChildEnv = "STAMPEDE_TEST_WRITER_CHILD"

// TestWriterLockChildProcess is not a test on its own: run by
// TestWriterLockKilledAfterCommit in a child process, it writes the intake
// as a locking writer named "doomed" and kills its own process with SIGKILL
// after the first batch committed, before its XACK.
func TestWriterLockChildProcess(t *testing.T) {
	if os.Getenv(writerChildEnv) == "" {
		t.Skip("run by TestWriterLockKilledAfterCommit")
	}
	store, err := persistence.Open(context.Background(), os.Getenv(childMySQLEnv))
	if err != nil {
		t.Fatal(err)
	}
	rdb := childRedis(t)
	w, err := pipeline.NewWriter(store, rdb, pipeline.WriterConfig{Consumer: "doomed", BatchSize: 500, BatchWait: 300 * time.Millisecond,
		LockOrders: true, PayTimeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	w.TestSignals.AfterCommit = func(int) { syscall.Kill(os.Getpid(), syscall.SIGKILL) }
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w.Run(ctx)
	t.Fatal("the writer was not killed")
}

// A locking writer process killed with SIGKILL after its commit and before
// its XACK: its entries stay pending, another writer claims them again, finds
// every order stored and just acknowledges them — no order, item or flow
// twice, MySQL stock locked once.
func TestWriterLockKilledAfterCommit(t *testing.T) {
	e := newEnv(t)
	p, k := e.product(100, 100)
	nos := e.reserve(p, k, 1, 50, 1)
	cmd := exec.Command(os.Args[0], "-test.run=^TestWriterLockChildProcess$", "-test.count=1")
	cmd.Env = append(e.childEnviron(), writerChildEnv+"=1")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || !strings.Contains(ee.String(), "killed") {
		t.Fatalf("child writer did not die by SIGKILL: %v\n%s", err, out)
	}
	if n := e.count(`SELECT COUNT(*) FROM order_info WHERE product_id = ? AND status = 'WAITING_PAY'`, p.ID); n != 50 {
		t.Fatalf("%d orders locked by the killed writer, want its batch of 50", n)
	}
	if pend, err := e.rdb.XPending(context.Background(), k.Intake(), "writers").Result(); err != nil || pend.Count != 50 || pend.Consumers["doomed"] != 50 {
		t.Fatalf("pending after the kill: %+v %v, want 50 of doomed", pend, err)
	}
	// ClaimIdle well above a batch's write on a loaded machine: with 200 ms
	// the writer's careful attempt outlasted it once and the writer claimed
	// its own entries in flight a second time (Claimed 100).
	w := e.lockingWriter(pipeline.WriterConfig{ClaimIdle: 2 * time.Second, ClaimInterval: 50 * time.Millisecond})
	run(t, "writer", w.Run)
	waitNoPending(t, e, k.Intake())
	if st := e.writerStats(w); st.Claimed != 50 || st.Duplicates != 50 || st.Written != 0 {
		t.Errorf("writer stats %+v, want 50 claimed duplicates", st)
	}
	e.checkLockedOnce(nos)
	if n := e.count(`SELECT COUNT(*) FROM order_info`); n != 50 {
		t.Errorf("%d orders, want 50", n)
	}
	if st := e.stock(p.ID); st.Locked != 50 || st.Available != 50 {
		t.Errorf("mysql stock %+v, want 50 locked once", st)
	}
}

// holdStock locks the stock row of pid in a transaction of its own until
// the returned release is called, so writers stall before their commit.
func (e *env) holdStock(pid int64) (release func()) {
	e.t.Helper()
	tx, err := e.store.DB.Begin()
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := tx.Exec(`SELECT available FROM stock WHERE product_id = ? FOR UPDATE`, pid); err != nil {
		e.t.Fatal(err)
	}
	var once sync.Once
	release = func() { once.Do(func() { tx.Rollback() }) }
	e.t.Cleanup(release)
	return release
}

// Two writers given the same pending entries, both past their read of what
// is stored before either commits (the stock row is held meanwhile): one
// wins; the other's insert meets the winner's keys, its transaction is rolled
// back, it finds the rows stored and just acknowledges.
func TestWriterLockRacingWriters(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	p, k := e.product(100, 100)
	nos := e.reserve(p, k, 1, 60, 1)
	// A "dead" writer read every entry: both writers claim them.
	if err := e.rdb.XGroupCreateMkStream(ctx, k.Intake(), "writers", "0").Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := e.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "writers", Consumer: "dead", Streams: []string{k.Intake(), ">"}, Count: 100, Block: -1}).Result(); err != nil {
		t.Fatal(err)
	}
	release := e.holdStock(p.ID)
	cfg := pipeline.WriterConfig{BatchSize: 500, BatchWait: 20 * time.Millisecond, ClaimIdle: 100 * time.Millisecond, ClaimInterval: 30 * time.Millisecond}
	var ws []*pipeline.Writer
	for _, name := range []string{"a", "b"} {
		c := cfg
		c.Consumer = name
		w := e.lockingWriter(c)
		ws = append(ws, w)
		run(t, "writer "+name, w.Run)
	}
	pipelinetest.WaitFor(t, 10*time.Second, "both writers hold the entries", func() (bool, string) {
		a, b := e.writerStats(ws[0]).Claimed, e.writerStats(ws[1]).Claimed
		return a >= 60 && b >= 60, fmt.Sprintf("claimed %d and %d", a, b)
	})
	time.Sleep(200 * time.Millisecond) // both are in their transaction: one waits for the stock row, the other for its rows
	release()
	waitNoPending(t, e, k.Intake())
	pipelinetest.WaitFor(t, 20*time.Second, "the loser recognises the stored rows", func() (bool, string) {
		a, b := e.writerStats(ws[0]), e.writerStats(ws[1])
		return a.Duplicates+b.Duplicates >= 60 && a.Batches > 0 && b.Batches > 0, fmt.Sprintf("%+v and %+v", a, b)
	})
	a, b := e.writerStats(ws[0]), e.writerStats(ws[1])
	if a.Written+b.Written != 60 || a.Duplicates+b.Duplicates < 60 || a.Batches == 0 || b.Batches == 0 {
		t.Errorf("writer stats %+v and %+v: want 60 written once, then recognised as stored", a, b)
	}
	e.checkLockedOnce(nos)
	if n := e.count(`SELECT COUNT(*) FROM order_info`); n != 60 {
		t.Errorf("%d orders, want 60", n)
	}
	if st := e.stock(p.ID); st.Locked != 60 || st.Available != 40 {
		t.Errorf("mysql stock %+v, want 60 locked once", st)
	}
}

// The race on the store alone: two InsertLockedReservations of the same
// batch, both past their read of what is stored, one stalled on the held
// stock row, the other on the first one's new rows: one stores the batch,
// the other finds it stored (Duplicates) and takes no stock.
func TestInsertLockedReservationsRace(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	p, k := e.product(100, 100)
	e.reserve(p, k, 1, 40, 1)
	msgs, err := e.rdb.XRange(ctx, k.Intake(), "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	var batch []order.Reservation
	for _, m := range msgs {
		r, err := lua.ParseReservation(m.Values)
		if err != nil {
			t.Fatal(err)
		}
		batch = append(batch, r)
	}
	release := e.holdStock(p.ID)
	results := make([]persistence.LockedInsertResult, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Go(func() {
			results[i], errs[i] = e.store.InsertLockedReservations(ctx, batch, map[int64]string{p.ID: p.Name}, order.DefaultRequestTTL, time.Hour)
		})
	}
	pipelinetest.WaitFor(t, 10*time.Second, "both inserts wait (one for the stock row, the other for the first's rows)", func() (bool, string) {
		n := e.count(`SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE DB = DATABASE() AND COMMAND = 'Query'
			AND (INFO LIKE 'UPDATE stock %' OR INFO LIKE 'INSERT INTO order_info %')`)
		return n >= 2, fmt.Sprintf("%d waiting", n)
	})
	release()
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("insert %d: %v", i, err)
		}
	}
	a, b := results[0], results[1]
	if a.Inserted+b.Inserted != 40 || a.Duplicates+b.Duplicates != 40 || a.Locked+b.Locked != 40 {
		t.Errorf("results %+v and %+v: want one to store 40, the other to find 40 stored", a.InsertResult, b.InsertResult)
	}
	if st := e.stock(p.ID); st.Locked != 40 || st.Available != 60 {
		t.Errorf("mysql stock %+v, want 40 locked once", st)
	}
	if n := e.count(`SELECT COUNT(*) FROM stock_flow WHERE biz_type = 'LOCK'`); n != 40 {
		t.Errorf("%d LOCK flows, want 40", n)
	}
}

// Stock short in the middle of a writer batch over several products, with
// two orders of one user on a short product: in stream order, exactly the
// orders that do not fit their product's MySQL stock are stored FAILED
// (NO_STOCK, 0-unit RELEASE flow), the rest WAITING_PAY, and each FAILED
// order's Redis reservation is released once, also when its status event is
// delivered again.
func TestWriterLockStockShortOverProducts(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
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
	type placed struct {
		no       string
		pid, qty int64
	}
	var orders []placed
	user := int64(1)
	for _, pr := range prods {
		for i, q := range []int64{2, 1, 3, 2, 1, 3, 2, 1, 3} {
			u := user + int64(i)
			if i == 4 {
				u = user // user's second order on this product
			}
			res, err := lua.Reserve(ctx, e.rdb, pr.k, lua.ReserveArgs{OrderNo: e.gen.Next(pr.p.ID, 0), UserID: u,
				RequestID: fmt.Sprintf("req-%d-%d", pr.p.ID, i), Quantity: q, TTL: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			orders = append(orders, placed{res.OrderNo, pr.p.ID, q})
		}
		user += 100
	}
	left := map[int64]int64{}
	for _, pr := range prods {
		left[pr.p.ID] = pr.mysql
	}
	want := map[string]order.Status{}
	wantLocked, wantReleased := map[int64]int64{}, map[int64]int64{}
	var failed int64
	for _, o := range orders { // stream order within each product
		if o.qty <= left[o.pid] {
			left[o.pid] -= o.qty
			wantLocked[o.pid] += o.qty
			want[o.no] = order.WaitingPay
		} else {
			want[o.no] = order.Failed
			wantReleased[o.pid] += o.qty
			failed++
		}
	}
	if wantReleased[prods[0].p.ID] == 0 || wantReleased[prods[1].p.ID] == 0 || wantReleased[prods[2].p.ID] != 0 {
		t.Fatalf("bad test setup: released %v", wantReleased)
	}
	redisBefore := map[int64]int64{}
	for _, pr := range prods {
		redisBefore[pr.p.ID] = e.redisAvailable(pr.k)
	}
	w := e.lockingWriter(pipeline.WriterConfig{BatchSize: 500, BatchWait: 300 * time.Millisecond})
	run(t, "writer", w.Run)
	reg := prometheus.NewRegistry()
	c := e.consumer(pipeline.ConsumerConfig{Metrics: pipeline.NewMetrics(reg)})
	e.own(c, reg)
	run(t, "consumer", c.Run)
	run(t, "relay", e.relay(pipeline.RelayConfig{}).Run) // carries the FAILED events to the release consumer
	e.waitCount(20*time.Second, int64(len(orders)), `SELECT COUNT(*) FROM order_info WHERE status IN ('WAITING_PAY', 'FAILED')`)
	for no, st := range want {
		var got, reason string
		if err := e.store.DB.QueryRow(`SELECT status, COALESCE(close_reason, '') FROM order_info WHERE order_no = ?`, no).Scan(&got, &reason); err != nil || got != string(st) {
			t.Errorf("%s is %s, want %s (%v)", no, got, st, err)
		}
		if st == order.Failed && reason != string(order.ReasonNoStock) {
			t.Errorf("%s FAILED for %q", no, reason)
		}
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
	if n := e.metric(w, "stampede_writer_batch_entries"); n != 1 {
		t.Errorf("%d writer transactions, want the %d orders in one", n, len(orders))
	}
	for _, pr := range prods {
		if st := e.stock(pr.p.ID); st.Locked != wantLocked[pr.p.ID] || st.Available != pr.mysql-wantLocked[pr.p.ID] {
			t.Errorf("product %d: mysql stock %+v, want locked %d", pr.p.ID, st, wantLocked[pr.p.ID])
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
