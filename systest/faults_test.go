package systest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/stampede-sh/stampede/lua"
	"github.com/stampede-sh/stampede/order"
	"github.com/stampede-sh/stampede/pipeline"
	"github.com/stampede-sh/stampede/pipeline/pipelinetest"
)

const allButPush = "gateway,writer,relay,consumer,sweeper"

// waitAccepted waits until n 202s were counted.
func waitAccepted(t *testing.T, accepted *atomic.Int64, n int64, limit time.Duration) {
	t.Helper()
	pipelinetest.WaitFor(t, limit, fmt.Sprintf("%d orders accepted", n), func() (bool, string) {
		return accepted.Load() >= n, fmt.Sprint(accepted.Load())
	})
}

func count202(intents []*intent) (accepted int, other map[int]int) {
	other = map[int]int{}
	for _, in := range intents {
		if in.status == http.StatusAccepted {
			accepted++
		} else {
			other[in.status]++
		}
	}
	return accepted, other
}

// 1. RabbitMQ stopped for 10 s in the middle of 2,000 orders: outbox rows
// wait (NEW/RETRY); after it returns every row ends SENT, consumers see
// 2,000 distinct events, 2,000 orders WAITING_PAY.
func TestFault01RabbitMQStoppedMidSale(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.lockDesign = "batch" // the order-lock consumer's ORDER_CREATED path
	broker := e.amqpProxy()
	e.serve("app", allButPush)
	e.waitReady(30 * time.Second)
	const n = 2000
	pid := e.product(n)

	var accepted atomic.Int64
	var intents []*intent
	saleDone := make(chan struct{})
	go func() {
		defer close(saleDone)
		// ~130 orders/s: the sale spans the outage.
		intents = e.sale(pid, n, 1_000_000, saleOptions{workers: 8, pace: 60 * time.Millisecond, accepted: &accepted})
	}()
	waitAccepted(t, &accepted, 400, 60*time.Second)
	broker.Down()
	downAt := time.Now()
	var maxPending, maxRetry int64
	for time.Since(downAt) < 10*time.Second {
		c := e.outboxCounts()
		maxPending = max(maxPending, c["NEW"]+c["RETRY"]+c["SENDING"])
		maxRetry = max(maxRetry, c["RETRY"])
		time.Sleep(200 * time.Millisecond)
	}
	acceptedWhileDown := accepted.Load()
	broker.Up()
	upAt := time.Now()
	<-saleDone
	t.Logf("broker down 10s after 400 accepted; %d accepted when it returned; outbox while down: up to %d rows undelivered, up to %d RETRY; %d connections refused",
		acceptedWhileDown, maxPending, maxRetry, broker.Refused())
	if maxPending == 0 {
		t.Errorf("no outbox row waited (NEW/RETRY/SENDING) while the broker was down")
	}
	if acceptedWhileDown >= n {
		t.Errorf("the sale ended before the broker returned: not mid-sale")
	}

	rep := e.settle(pid, upAt, 90*time.Second)
	got, other := count202(intents)
	if got != n {
		t.Errorf("%d × 202 of %d (other answers %v)", got, n, other)
	}
	e.checkIntents(pid, intents, rep)
	if rep.Outbox["SENT"] == 0 || rep.Outbox["DEAD"] != 0 || rep.Outbox["SENT"] != sum(rep.Outbox) {
		t.Errorf("outbox not all SENT: %v", rep.Outbox)
	}
	if c := e.consumedCreated(pid); c != n {
		t.Errorf("consume log has %d distinct ORDER_CREATED events, want %d", c, n)
	}
}

func sum(m map[string]int64) int64 {
	var s int64
	for _, v := range m {
		s += v
	}
	return s
}

// 2. RabbitMQ connections force-closed mid-run (every connection reset, new
// ones accepted at once), twice: relay and consumers reconnect, nothing lost.
func TestFault02RabbitMQConnectionsForceClosed(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.lockDesign = "batch" // the order-lock consumer's ORDER_CREATED path
	broker := e.amqpProxy()
	e.serve("app", allButPush)
	e.waitReady(30 * time.Second)
	const n = 1000
	pid := e.product(n)

	var accepted atomic.Int64
	var intents []*intent
	saleDone := make(chan struct{})
	go func() {
		defer close(saleDone)
		intents = e.sale(pid, n, 2_000_000, saleOptions{workers: 8, pace: 40 * time.Millisecond, accepted: &accepted})
	}()
	var lastCut time.Time
	for i, at := range []int64{300, 650} {
		waitAccepted(t, &accepted, at, 60*time.Second)
		before := broker.Accepted()
		cut := broker.Cut()
		lastCut = time.Now()
		t.Logf("cut %d: %d connection ends reset after %d accepted", i+1, cut, accepted.Load())
		pipelinetest.WaitFor(t, 30*time.Second, "processes reconnecting to the broker", func() (bool, string) {
			return broker.Accepted() >= before+2, fmt.Sprintf("%d new connections", broker.Accepted()-before)
		})
	}
	<-saleDone
	rep := e.settle(pid, lastCut, 90*time.Second)
	got, other := count202(intents)
	if got != n {
		t.Errorf("%d × 202 of %d (other answers %v)", got, n, other)
	}
	e.checkIntents(pid, intents, rep)
	if c := e.consumedCreated(pid); c != n {
		t.Errorf("consume log has %d distinct ORDER_CREATED events, want %d", c, n)
	}
}

// 3. MySQL unavailable for 10 s during a sale: writers, relay and consumers
// back off and finish; every 202 ends WAITING_PAY exactly once.
func TestFault03MySQLUnavailable(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.lockDesign = "batch" // the order-lock consumer's ORDER_CREATED path
	db := e.mysqlProxy()
	e.serve("app", allButPush)
	e.waitReady(30 * time.Second)
	const n = 1000
	pid := e.product(n)

	var accepted atomic.Int64
	var intents []*intent
	saleDone := make(chan struct{})
	go func() {
		defer close(saleDone)
		intents = e.sale(pid, n, 3_000_000, saleOptions{workers: 8, pace: 40 * time.Millisecond, accepted: &accepted})
	}()
	waitAccepted(t, &accepted, 300, 60*time.Second)
	db.Down()
	downAt := time.Now()
	// A batch whose COMMIT had passed the proxy before the cut may still
	// land (a loaded server took its time: 0 → 74 seen with 38 runnable
	// processes on 2 cores); after inFlight nothing may.
	const inFlight = 2 * time.Second
	time.Sleep(inFlight)
	storedAtDown := e.count(`SELECT COUNT(*) FROM order_info WHERE product_id = ?`, pid)
	time.Sleep(10*time.Second - inFlight)
	storedBeforeUp := e.count(`SELECT COUNT(*) FROM order_info WHERE product_id = ?`, pid)
	db.Up()
	upAt := time.Now()
	<-saleDone
	t.Logf("MySQL down %s after 300 accepted: %d accepted by its return; orders stored %d → %d while down (from %v after the cut); %d connections refused",
		upAt.Sub(downAt).Round(time.Millisecond), accepted.Load(), storedAtDown, storedBeforeUp, inFlight, db.Refused())
	if storedBeforeUp != storedAtDown {
		t.Errorf("orders were stored while the proxy refused MySQL (%d → %d): the fault was not injected", storedAtDown, storedBeforeUp)
	}
	rep := e.settle(pid, upAt, 90*time.Second)
	got, other := count202(intents)
	if got != n {
		t.Errorf("%d × 202 of %d (other answers %v); the order path must not need MySQL", got, n, other)
	}
	e.checkIntents(pid, intents, rep)
	if c := e.consumedCreated(pid); c != n {
		t.Errorf("consume log has %d distinct ORDER_CREATED events, want %d", c, n)
	}
}

// 3b. MySQL unreachable from the consumers for 30 s (a partition: the
// writer and relay still reach it, so ORDER_CREATED events keep arriving):
// once it is back, every 202 must still end WAITING_PAY without
// intervention (docs/spec.md §5.5). An outage is not a poison message: it must not
// use up the messages' retry budget and dead-letter them.
func TestFault03bMySQLUnreachableFromConsumers30s(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.lockDesign = "batch"                         // the order-lock consumer's ORDER_CREATED path
	e.serve("app", "gateway,writer,relay,sweeper") // direct to MySQL
	db := e.mysqlProxy()
	consumer := e.serve("consumer", "consumer") // through the proxy
	e.waitReady(30 * time.Second)
	pid := e.product(100)
	intents := e.sale(pid, 20, 3_500_000, saleOptions{workers: 4})
	pipelinetest.WaitFor(t, 30*time.Second, "the first orders locked", func() (bool, string) {
		w := e.count(`SELECT COUNT(*) FROM order_info WHERE product_id = ? AND status = 'WAITING_PAY'`, pid)
		return w == 20, fmt.Sprint(w)
	})
	db.Down()
	downAt := time.Now()
	intents = append(intents, e.sale(pid, 3, 3_600_000, saleOptions{workers: 3})...)
	time.Sleep(time.Until(downAt.Add(30 * time.Second)))
	db.Up()
	upAt := time.Now()
	dead := pipelinetest.QueueDepth(t, e.directAMQ, pipeline.QueueDLQ)
	retries := consumer.metric(t, "stampede_consumer_messages_total", `handler="order-lock"`, `outcome="retry"`)
	t.Logf("consumers cut from MySQL for 30s while 3 more orders were accepted: %v order-lock retries, %d messages in %s at its end",
		retries, dead, pipeline.QueueDLQ)
	if dead > 0 {
		t.Errorf("%d ORDER_CREATED events were dead-lettered by a 30s MySQL outage (retry budget: delays %v); their orders stay PROCESSING",
			dead, pipeline.RetryDelays())
	}
	rep := e.settle(pid, upAt, 40*time.Second)
	got, other := count202(intents)
	if got != len(intents) {
		t.Errorf("%d × 202 of %d (other answers %v)", got, len(intents), other)
	}
	e.checkIntents(pid, intents, rep)
}

// 4. A writer process killed (SIGKILL) while holding un-acknowledged intake
// entries: another writer reclaims them; exactly one order per reservation.
//
// The binary has no flag for the writer's ClaimIdle (default 30s), so the
// second writer runs in this process with ClaimIdle 2s; the killed one is a
// real `stampede serve --roles writer` process.
func TestFault04WriterKilledWithPendingEntries(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.serve("app", "gateway,relay,consumer,sweeper")
	// A batch that waits 15s to fill: the writer holds what it read.
	writerA := e.serve("writer-a", "writer", "--writer-batch", "5000", "--writer-wait", "15s")
	e.waitReady(30 * time.Second)
	const n = 300
	pid := e.product(1000)
	intake := lua.ShardKeys(pid, 0).Intake()
	pipelinetest.WaitFor(t, 30*time.Second, "writer A reading the intake stream", func() (bool, string) {
		g, err := e.rdb.XInfoGroups(e.ctx, intake).Result()
		return err == nil && len(g) > 0, fmt.Sprint(g, err)
	})
	start := time.Now()
	intents := e.sale(pid, n, 4_000_000, saleOptions{workers: 16})
	var pendingA int64
	pipelinetest.WaitFor(t, 10*time.Second, "writer A holding every entry un-acknowledged", func() (bool, string) {
		p, err := e.rdb.XPending(e.ctx, intake, "writers").Result()
		if err != nil {
			return false, err.Error()
		}
		pendingA = p.Count
		return p.Count == n, fmt.Sprintf("%+v", p)
	})
	if time.Since(start) > 12*time.Second {
		t.Fatalf("sale too slow (%s): writer A may have flushed its batch", time.Since(start))
	}
	writerA.kill()
	killedAt := time.Now()
	stored := e.count(`SELECT COUNT(*) FROM order_info WHERE product_id = ?`, pid)
	t.Logf("writer A SIGKILLed holding %d pending entries; %d orders stored at the kill", pendingA, stored)

	regB := prometheus.NewRegistry()
	writerB, err := pipeline.NewWriter(e.store, e.rdb, pipeline.WriterConfig{Consumer: "faults-writer-b", LockOrders: true,
		ClaimIdle: 2 * time.Second, ClaimInterval: 500 * time.Millisecond, Metrics: pipeline.NewMetrics(regB)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan error, 1)
	go func() { done <- writerB.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("writer B: %v", err)
		}
	}()
	rep := e.settle(pid, killedAt, 60*time.Second)
	got, other := count202(intents)
	if got != n {
		t.Errorf("%d × 202 of %d (other answers %v)", got, n, other)
	}
	e.checkIntents(pid, intents, rep)
	claimed := int64(pipelinetest.Metric(t, regB, "stampede_writer_claimed_entries_total"))
	t.Logf("writer B: claimed %d, written %.0f", claimed, pipelinetest.Metric(t, regB, "stampede_writer_entries_total", "outcome", "written"))
	if claimed < int64(n-stored) {
		t.Errorf("writer B claimed %d entries, want at least the %d not stored", claimed, n-stored)
	}
	if p, err := e.rdb.XPending(e.ctx, intake, "writers").Result(); err != nil || p.Count != 0 {
		t.Errorf("entries still pending: %+v %v", p, err)
	}
}

// 5. A consumer process killed (SIGKILL) while it works through a queue of
// ORDER_CREATED messages: the unacknowledged ones are redelivered to another
// consumer, stock is locked once per order.
func TestFault05ConsumerKilledMidTransaction(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.lockDesign = "batch" // the order-lock consumer's ORDER_CREATED path
	e.serve("app", "gateway,writer,relay,sweeper")
	e.waitReady(30 * time.Second)
	const n = 1500
	pid := e.product(n)
	intents := e.sale(pid, n, 5_000_000, saleOptions{workers: 16})
	pipelinetest.WaitFor(t, 60*time.Second, "every ORDER_CREATED queued", func() (bool, string) {
		c := e.outboxCounts()
		return c["SENT"] >= n, fmt.Sprint(c)
	})
	waiting := func() int {
		return e.count(`SELECT COUNT(*) FROM order_info WHERE product_id = ? AND status = 'WAITING_PAY'`, pid)
	}
	// Small lock batches on one channel, so the kill finds consumer A
	// mid-way: with the default 256-message batches A locked all 1,500
	// between the poll that saw 200 and the kill on a quiet machine.
	consumerA := e.serve("consumer-a", "consumer", "--consumer-workers", "8", "--consumer-prefetch", "64",
		"--consumer-batch", "16", "--consumer-lock-channels", "1")
	pipelinetest.WaitFor(t, 60*time.Second, "consumer A locking orders", func() (bool, string) {
		w := waiting()
		return w >= 100, fmt.Sprint(w)
	})
	inFlight := consumerA.metric(t, "stampede_consumer_in_flight_messages", `handler="order-lock"`)
	consumerA.kill()
	killedAt := time.Now()
	atKill := waiting()
	t.Logf("consumer A SIGKILLed with %v messages in flight; %d of %d orders WAITING_PAY at the kill", inFlight, atKill, n)
	if atKill >= n {
		t.Fatalf("consumer A finished before the kill: nothing was mid-way")
	}
	consumerB := e.serve("consumer-b", "consumer")
	rep := e.settle(pid, killedAt, 60*time.Second)
	got, other := count202(intents)
	if got != n {
		t.Errorf("%d × 202 of %d (other answers %v)", got, n, other)
	}
	e.checkIntents(pid, intents, rep)
	locks := e.count(`SELECT COUNT(*) FROM stock_flow WHERE product_id = ? AND biz_type = 'LOCK'`, pid)
	lockedUnits := e.count(`SELECT COALESCE(SUM(quantity), 0) FROM stock_flow WHERE product_id = ? AND biz_type = 'LOCK'`, pid)
	wp := rep.Products[0].Orders[order.WaitingPay]
	if locks != n || int64(lockedUnits) != wp[1] || rep.Products[0].MySQL.Locked != wp[1] {
		t.Errorf("LOCK flows %d (units %d), MySQL locked %d, WAITING_PAY %v: want %d flows and locked = Σ WAITING_PAY",
			locks, lockedUnits, rep.Products[0].MySQL.Locked, wp, n)
	}
	dup := consumerB.metric(t, "stampede_consumer_messages_total", `handler="order-lock"`, `outcome="duplicate"`)
	t.Logf("consumer B: %v redelivered messages found already applied", dup)
}

// 6. The relay dies between the broker's confirm and marking the rows SENT
// (injected with Relay.TestSignals.AfterConfirm in a relay run by this test): the
// rows are published again by a relay process once their lease ends, and
// the consumers apply each event once.
func TestFault06RelayDiesAfterConfirm(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.lockDesign = "batch" // the order-lock consumer's ORDER_CREATED path
	app := e.serve("app", "gateway,writer,consumer,sweeper")
	e.waitReady(30 * time.Second)
	const n = 300
	pid := e.product(n)
	intents := e.sale(pid, n, 6_000_000, saleOptions{workers: 16})
	pipelinetest.WaitFor(t, 30*time.Second, "every ORDER_CREATED in the outbox", func() (bool, string) {
		c := e.outboxCounts()
		return c["NEW"] == n, fmt.Sprint(c)
	})

	conn, err := pipeline.NewConn(pipeline.ConnConfig{URL: e.directAMQ, Name: "faults-relay-dying"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var confirmed []int64
	injected := errors.New("injected: relay process died after the broker confirmed")
	dying, err := pipeline.NewRelay(e.store, conn, pipeline.RelayConfig{Owner: "faults-dying", BatchSize: 1000,
		Lease: 3 * time.Second, ConfirmTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	dying.TestSignals.AfterConfirm = func(acked []int64) error { confirmed = acked; return injected }
	ctx, cancel := context.WithTimeout(e.ctx, 30*time.Second)
	err = dying.Run(ctx)
	cancel()
	diedAt := time.Now()
	conn.Close()
	if !errors.Is(err, injected) {
		t.Fatalf("dying relay returned %v, want the injected error", err)
	}
	c := e.outboxCounts()
	t.Logf("relay died after %d confirms; outbox %v", len(confirmed), c)
	if len(confirmed) != n || c["SENDING"] != n {
		t.Fatalf("want %d confirmed rows left SENDING, got %d confirmed, outbox %v", n, len(confirmed), c)
	}
	// The consumers apply the first copies.
	pipelinetest.WaitFor(t, 60*time.Second, "first copies applied", func() (bool, string) {
		w := e.count(`SELECT COUNT(*) FROM order_info WHERE product_id = ? AND status = 'WAITING_PAY'`, pid)
		return w == n, fmt.Sprint(w)
	})
	e.serve("relay", "relay")
	rep := e.settle(pid, diedAt, 60*time.Second)
	e.checkIntents(pid, intents, rep)
	if cc := e.consumedCreated(pid); cc != n {
		t.Errorf("consume log has %d distinct ORDER_CREATED events, want %d", cc, n)
	}
	// The outbox is idle once the copies are confirmed; the consumers may
	// still be working through them.
	var dup float64
	pipelinetest.WaitFor(t, 30*time.Second, "every re-published copy consumed", func() (bool, string) {
		dup = app.metric(t, "stampede_consumer_messages_total", `handler="order-lock"`, `outcome="duplicate"`)
		return dup >= n, fmt.Sprintf("%v duplicates", dup)
	})
	ok := app.metric(t, "stampede_consumer_messages_total", `handler="order-lock"`, `outcome="ok"`)
	t.Logf("order-lock consumer: %v applied, %v duplicates ignored", ok, dup)
	if ok != n || dup < n {
		t.Errorf("order-lock consumer applied %v and ignored %v duplicates, want %d applied and ≥ %d duplicates (the re-publish)", ok, dup, n, n)
	}
}

// 7. SCRIPT FLUSH and a Redis restart between orders: no client sees
// NOSCRIPT or a 5xx once the gateway is ready; stock exact.
func TestFault07ScriptFlushAndRedisRestart(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	app := e.serve("app", allButPush)
	e.waitReady(30 * time.Second)
	const total = 1000
	pid := e.product(total)
	var intents []*intent
	user := int64(7_000_000)
	phase := func(name string, n int) {
		t.Helper()
		bad := 0
		for range n {
			in := e.newIntent(user)
			user++
			intents = append(intents, in)
			a, err := e.buy(pid, in)
			if err != nil || a.status != http.StatusAccepted || strings.Contains(a.raw, "NOSCRIPT") {
				bad++
				t.Errorf("%s: order answered %d %s %v, want 202", name, a.status, a.raw, err)
				if bad > 3 {
					t.FailNow()
				}
			}
		}
	}
	phase("before", 20)
	if err := e.rdb.ScriptFlush(e.ctx).Err(); err != nil {
		t.Fatal(err)
	}
	phase("after SCRIPT FLUSH", 20)
	// SCRIPT FLUSH every 10ms during a concurrent burst.
	burstDone := make(chan []*intent)
	go func() { burstDone <- e.sale(pid, 200, 7_500_000, saleOptions{workers: 8}) }()
	var burst []*intent
	flushes := 0
	for burst == nil {
		select {
		case burst = <-burstDone:
		case <-time.After(10 * time.Millisecond):
			if err := e.rdb.ScriptFlush(e.ctx).Err(); err != nil {
				t.Fatal(err)
			}
			flushes++
		}
	}
	intents = append(intents, burst...)
	t.Logf("burst of %d orders with %d SCRIPT FLUSHes", len(burst), flushes)
	if got, other := count202(burst); got != len(burst) {
		t.Errorf("burst with SCRIPT FLUSH: %d × 202 of %d, other answers %v", got, len(burst), other)
	}
	for _, in := range burst {
		if in.status != http.StatusAccepted {
			t.Errorf("burst: user %d answered %d", in.user, in.status)
			break
		}
	}
	e.redis.stop(syscall.SIGTERM)
	e.redis.start()
	e.waitReady(30 * time.Second)
	restartedAt := time.Now()
	phase("after Redis restart", 20)
	if err := e.rdb.ScriptFlush(e.ctx).Err(); err != nil {
		t.Fatal(err)
	}
	phase("after the second SCRIPT FLUSH", 20)

	rep := e.settle(pid, restartedAt, 60*time.Second)
	e.checkIntents(pid, intents, rep)
	if want := int64(total - len(intents)); rep.Products[0].RedisAvailable != want {
		t.Errorf("Redis available %d, want %d", rep.Products[0].RedisAvailable, want)
	}
	if l := app.logLines("NOSCRIPT"); len(l) > 0 {
		t.Logf("NOSCRIPT in the app's log (%d lines), e.g. %s", len(l), l[0])
	}
}

// 8. Redis stopped: the gateway answers 503 UNAVAILABLE with Retry-After
// fast, nothing is half-reserved; after the restart orders flow again.
func TestFault08RedisStopped(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.serve("app", allButPush)
	e.waitReady(30 * time.Second)
	const total = 1000
	pid := e.product(total)
	before := e.sale(pid, 100, 8_000_000, saleOptions{workers: 8})

	e.redis.stop(syscall.SIGKILL)
	var during []*intent
	var lat []time.Duration
	for i := range 40 {
		in := e.newIntent(8_500_000 + int64(i))
		during = append(during, in)
		a, err := e.buy(pid, in)
		if err != nil {
			t.Errorf("order while Redis is down: %v", err)
			continue
		}
		lat = append(lat, a.elapsed)
		if a.status != http.StatusServiceUnavailable || a.header.Get("Retry-After") == "" || a.code() != "UNAVAILABLE" {
			t.Errorf("order while Redis is down: %d %s Retry-After %q, want 503 UNAVAILABLE with Retry-After",
				a.status, a.raw, a.header.Get("Retry-After"))
		}
		in.orderNo, in.status = "", 0 // not accepted: a replay must be new
	}
	if len(lat) > 0 {
		sorted := append([]time.Duration(nil), lat...)
		sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
		t.Logf("503 latency while Redis is down: first %s, median %s, last %s, max %s",
			lat[0], sorted[len(sorted)/2], lat[len(lat)-1], sorted[len(sorted)-1])
	}
	e.redis.start()
	upAt := time.Now()
	e.waitReady(30 * time.Second)
	t.Logf("gateway ready %s after Redis came back", time.Since(upAt).Round(time.Millisecond))
	// Buyers honour 503 + Retry-After: the breaker may still be open (or
	// half-open, one probe at a time) for up to its open interval after
	// /readyz, which bypasses it, turns 200.
	after := e.sale(pid, 100, 8_200_000, saleOptions{workers: 8, retry: true})
	firstFlow := time.Since(upAt)
	late503 := 0
	for _, in := range after {
		late503 += in.attempts - 1
	}
	t.Logf("after /readyz: %d × 503 before orders flowed; the 100 orders done %s after Redis came back", late503, firstFlow.Round(time.Millisecond))
	if firstFlow > 10*time.Second {
		t.Errorf("orders took %s to flow again after Redis came back", firstFlow)
	}
	// Nothing was reserved for the refused intents: each is new now.
	for _, in := range during {
		a, err := e.buy(pid, in)
		if err != nil || a.status != http.StatusAccepted {
			t.Errorf("intent refused while Redis was down, sent again: %d %s %v, want 202 (new)", a.status, a.raw, err)
		}
	}
	all := append(append(before, after...), during...)
	if got, other := count202(all); got != len(all) {
		t.Errorf("%d × 202 of %d outside the outage, other answers %v", got, len(all), other)
	}
	rep := e.settle(pid, upAt, 60*time.Second)
	e.checkIntents(pid, all, rep)
	if want := int64(total - len(all)); rep.Products[0].RedisAvailable != want {
		t.Errorf("Redis available %d, want %d", rep.Products[0].RedisAvailable, want)
	}
}

// 9. Poison messages among 1,000 good ones, published straight to the
// broker: an undecodable body and an ORDER_CREATED of an order that does
// not exist (dead-lettered at once), a CANCELLED status change of an order
// MySQL never stored (the release consumer gives back only what MySQL has
// released: refused and dead-lettered at once, nothing given back), and a
// copy of an ORDER_CREATED already applied (acked as a duplicate). The
// 1,000 are processed; no hot loop. (The retry budget of transient
// failures, at most N+1 deliveries, is pipeline/dlq_test.go's.)
func TestFault09PoisonMessages(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.lockDesign = "batch" // the order-lock consumer's ORDER_CREATED path
	app := e.serve("app", allButPush)
	e.waitReady(30 * time.Second)
	const n = 1000
	pid := e.product(n)
	var accepted atomic.Int64
	var intents []*intent
	saleDone := make(chan struct{})
	go func() {
		defer close(saleDone)
		intents = e.sale(pid, n, 9_000_000, saleOptions{workers: 8, pace: 10 * time.Millisecond, accepted: &accepted})
	}()
	// An ORDER_CREATED already applied, to be delivered again.
	var dupID string
	var dupBody []byte
	pipelinetest.WaitFor(t, 60*time.Second, "a consumed ORDER_CREATED", func() (bool, string) {
		err := e.store.DB.QueryRowContext(e.ctx, `SELECT o.event_id, o.payload FROM mq_outbox o
			JOIN mq_consume_log l ON l.event_id = o.event_id AND l.consumer_name = ?
			WHERE o.event_type = 'ORDER_CREATED' LIMIT 1`, pipeline.ConsumerOrderLock).Scan(&dupID, &dupBody)
		return err == nil, fmt.Sprint(err)
	})
	gen, err := order.NewNoGenerator(1023)
	if err != nil {
		t.Fatal(err)
	}
	const noStockProduct = 999_999
	now := time.Now().UTC().Format(time.RFC3339)
	type poison struct {
		key string
		msg amqp.Publishing
	}
	msgs := []poison{
		{order.RouteCreated, amqp.Publishing{MessageId: "poison:undecodable", Type: string(order.EventCreated),
			Body: []byte(`{"eventId": "poison:undecodable", "type": `)}},
		{order.RouteCreated, amqp.Publishing{MessageId: "poison:no-such-order", Type: string(order.EventCreated), Body: []byte(fmt.Sprintf(
			`{"eventId":"poison:no-such-order","type":"ORDER_CREATED","orderNo":%q,"userId":1,"productId":%d,"quantity":1,"occurredAt":%q}`,
			gen.Next(pid, 0), pid, now))}},
		{order.RouteStatus(order.Cancelled), amqp.Publishing{MessageId: "poison:release-no-stock", Type: string(order.EventStatusChanged), Body: []byte(fmt.Sprintf(
			`{"eventId":"poison:release-no-stock","type":"ORDER_STATUS_CHANGED","orderNo":%q,"userId":1,"productId":%d,"quantity":1,"from":"WAITING_PAY","status":"CANCELLED","version":2,"occurredAt":%q}`,
			gen.Next(noStockProduct, 0), noStockProduct, now))}},
		{order.RouteCreated, amqp.Publishing{MessageId: dupID, Type: string(order.EventCreated), Body: dupBody}},
	}
	ch := pipelinetest.Channel(t, e.directAMQ)
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	for _, p := range msgs {
		p.msg.DeliveryMode = amqp.Persistent
		p.msg.ContentType = "application/json"
		dc, err := ch.PublishWithDeferredConfirmWithContext(e.ctx, order.EventsExchange, p.key, true, false, p.msg)
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := dc.WaitContext(e.ctx); !ok || err != nil {
			t.Fatalf("poison publish not confirmed: %v", err)
		}
	}
	publishedAt := time.Now()
	ch.Close()
	<-saleDone

	pipelinetest.WaitFor(t, 120*time.Second, "the three bad messages dead-lettered", func() (bool, string) {
		d := pipelinetest.QueueDepth(t, e.directAMQ, pipeline.QueueDLQ)
		return d >= 3, fmt.Sprintf("%s depth %d", pipeline.QueueDLQ, d)
	})
	t.Logf("bad messages dead-lettered %s after publishing", time.Since(publishedAt).Round(time.Millisecond))
	rep := e.settle(pid, publishedAt, 90*time.Second)
	got, other := count202(intents)
	if got != n {
		t.Errorf("%d × 202 of %d (other answers %v)", got, n, other)
	}
	e.checkIntents(pid, intents, rep)
	if c := e.consumedCreated(pid); c != n {
		t.Errorf("consume log has %d distinct ORDER_CREATED events, want %d", c, n)
	}

	// Deliveries are bounded: every outcome of the two handlers counted.
	outcomes := func(handler string) (map[string]float64, float64) {
		m := map[string]float64{}
		var total float64
		for _, o := range []string{pipeline.OutcomeOK, pipeline.OutcomeDuplicate, pipeline.OutcomeRetry, pipeline.OutcomeDeadLetter, pipeline.OutcomeSkipped} {
			m[o] = app.metric(t, "stampede_consumer_messages_total", `handler="`+handler+`"`, `outcome="`+o+`"`)
			total += m[o]
		}
		return m, total
	}
	lock, lockTotal := outcomes(pipeline.ConsumerOrderLock)
	release, releaseTotal := outcomes(pipeline.ConsumerStockRelease)
	t.Logf("order-lock outcomes %v; stock-release outcomes %v", lock, release)
	if lock[pipeline.OutcomeDeadLetter] != 2 || lock[pipeline.OutcomeOK] != n || lock[pipeline.OutcomeDuplicate] < 1 {
		t.Errorf("order-lock: %v, want %d ok, ≥ 1 duplicate (the re-delivered applied event), 2 dead-lettered", lock, n)
	}
	// Transient failures of good messages (deadlocks) are retried through
	// the delay queues, each at most N times; a loop would count thousands.
	if lock[pipeline.OutcomeRetry] > 100 || lockTotal > float64(n+3)+lock[pipeline.OutcomeRetry] {
		t.Errorf("order-lock handled %v deliveries (%v retries) for %d + 3 messages", lockTotal, lock[pipeline.OutcomeRetry], n)
	}
	if releaseTotal != 1 || release[pipeline.OutcomeDeadLetter] != 1 {
		t.Errorf("stock-release handled the never-released order's message %v times (%v), want 1 delivery, dead-lettered", releaseTotal, release)
	}
	if n := app.metric(t, "stampede_consumer_releases_refused_total"); n != 1 {
		t.Errorf("releases refused %v, want 1", n)
	}
	checkDLQ(t, e.directAMQ, map[string][2]int{
		"poison:undecodable":      {1, 1},
		"poison:no-such-order":    {1, 1},
		"poison:release-no-stock": {1, 1},
	})
	if d := pipelinetest.QueueDepth(t, e.directAMQ, pipeline.QueueOrderCreated); d != 0 {
		t.Errorf("%s still holds %d messages", pipeline.QueueOrderCreated, d)
	}
	// No hot loop: the idle process uses little CPU.
	c0 := app.cpuSeconds(t)
	time.Sleep(3 * time.Second)
	if used := app.cpuSeconds(t) - c0; used > 1.5 {
		t.Errorf("idle app used %.2fs CPU in 3s: a loop is spinning", used)
	} else {
		t.Logf("idle app used %.2fs CPU in 3s", used)
	}
}

// checkDLQ reads the dead-letter queue without acknowledging (the messages
// return to it when the channel closes) and checks it holds exactly the
// given message ids, each with its attempts header within [min, max].
func checkDLQ(t *testing.T, url string, want map[string][2]int) {
	t.Helper()
	ch := pipelinetest.Channel(t, url)
	got := map[string]bool{}
	for {
		d, ok, err := ch.Get(pipeline.QueueDLQ, false)
		if err != nil {
			t.Fatalf("get from %s: %v", pipeline.QueueDLQ, err)
		}
		if !ok {
			break
		}
		got[d.MessageId] = true
		bounds, known := want[d.MessageId]
		if !known {
			t.Errorf("%s holds unexpected message %s (headers %v)", pipeline.QueueDLQ, d.MessageId, d.Headers)
			continue
		}
		attempts, _ := strconv.Atoi(fmt.Sprint(d.Headers[pipeline.HeaderAttempts]))
		t.Logf("dead-lettered %s after %d deliveries: %v", d.MessageId, attempts, d.Headers[pipeline.HeaderReason])
		if attempts < bounds[0] || attempts > bounds[1] {
			t.Errorf("%s dead-lettered after %d deliveries, want %d…%d", d.MessageId, attempts, bounds[0], bounds[1])
		}
	}
	for id := range want {
		if !got[id] {
			t.Errorf("%s lacks %s", pipeline.QueueDLQ, id)
		}
	}
}

// 10. The gateway process killed (SIGKILL) 3× during a 500-order sale and
// restarted: every 202 the buyers got ends WAITING_PAY; replays of their
// requestIds return the same orderNo.
func TestFault10GatewayKilledThreeTimes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.serve("pipeline", "writer,relay,consumer,sweeper")
	gw := e.serve("gateway-1", "gateway")
	e.waitReady(30 * time.Second)
	const n = 500
	pid := e.product(n)
	var accepted atomic.Int64
	var intents []*intent
	saleDone := make(chan struct{})
	go func() {
		defer close(saleDone)
		// Buyers resend an unanswered request with the same requestId.
		intents = e.sale(pid, n, 10_000_000, saleOptions{workers: 8, pace: 20 * time.Millisecond, retry: true, accepted: &accepted})
	}()
	var mu sync.Mutex
	var lastUp time.Time
	for k := 1; k <= 3; k++ {
		waitAccepted(t, &accepted, int64(k*110), 60*time.Second)
		gw.kill()
		down := time.Now()
		time.Sleep(300 * time.Millisecond)
		gw = e.serve(fmt.Sprintf("gateway-%d", k+1), "gateway")
		e.waitReady(30 * time.Second)
		mu.Lock()
		lastUp = time.Now()
		mu.Unlock()
		t.Logf("kill %d after %d accepted; gateway back in %s", k, accepted.Load(), lastUp.Sub(down).Round(time.Millisecond))
	}
	<-saleDone
	rep := e.settle(pid, lastUp, 60*time.Second)
	unanswered, retried := 0, 0
	for _, in := range intents {
		if in.orderNo == "" {
			unanswered++
			if unanswered < 5 {
				t.Errorf("user %d: no order after %d attempts: %d %v", in.user, in.attempts, in.status, in.lastErr)
			}
		}
		if in.attempts > 1 {
			retried++
		}
	}
	t.Logf("%d intents, %d resent after a kill, %d × 202 seen", len(intents), retried, accepted.Load())
	e.checkIntents(pid, intents, rep)
	e.replayAll(pid, intents)
}
