package systest

import (
	"context"
	"fmt"
	"net/http"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/stampede-sh/stampede/order"
	"github.com/stampede-sh/stampede/pipeline"
)

// TestScaleManyInstances: two processes of every role against one
// redis-server, database and vhost, with classic queues.
func TestScaleManyInstances(t *testing.T) { scaleOut(t, "classic") }

// TestScaleManyInstancesQuorum: the same with quorum queues.
func TestScaleManyInstancesQuorum(t *testing.T) { scaleOut(t, "quorum") }

// hasFlag reports whether `stampede serve -h` lists flag.
func hasFlag(t *testing.T, flag string) bool {
	out, _ := exec.Command(binary(t), "serve", "-h").CombinedOutput()
	return strings.Contains(string(out), "-"+flag)
}

const (
	scaleProducts = 4
	scaleStock    = 1250 // per product: 5,000 orders
	scaleBuyers   = 1400 // per product: oversubscribed
	scalePayTime  = 30 * time.Second
)

// scaleOut runs 2 gateways, 2 writers, 2 relays, 2 consumers and 2 sweepers
// as separate `stampede serve --roles <one role>` processes during a
// 5,000-order sale over four products, then pays 40 % of the orders, lets the
// buyers cancel 20 % and the rest time out, and checks:
//
//   - docs/spec.md §5 for every product (WaitIdle + Reconcile), every outbox row SENT;
//   - every answered intent is exactly one order, and the final statuses are
//     what the test did: PAID = pays that succeeded, CANCELLED by the user =
//     cancels that succeeded, CANCELLED by timeout = the rest;
//   - every event is consumed exactly once per consumer: the consume log
//     (order-lock) holds every event routed to it once and nothing else; the
//     release and close handlers, which keep no MySQL log, handled each of
//     theirs once (process metrics);
//   - the work was shared: both gateways accepted, both writers wrote, both
//     relays published, both consumers released stock (and locked orders,
//     in the designs where consumers lock: batch, message);
//   - the sweepers closed every timed-out order exactly once between them
//     with zero wasted close attempts, and ran at most one reconciliation
//     round per interval between them.
//
// The two sweepers are the only timeout closers (the batch order-lock design
// schedules no delayed close message), so their sharing is exact. A blocker
// at the head of the delay queue (a per-message TTL expires only at the head)
// would hold back any close message until the sweepers are done.
func scaleOut(t *testing.T, queueType string) {
	t.Parallel()
	start := time.Now()
	e := newEnvFor(t, "scaleout_"+queueType)
	var extra []string
	if hasFlag(t, "amqp-queue-type") {
		extra = append(extra, "--amqp-queue-type", queueType)
	} else if queueType != "classic" {
		t.Skipf("serve has no --amqp-queue-type flag yet: cannot run with %s queues", queueType)
	}
	extra = append(extra, "--pay-timeout", scalePayTime.String(), "--sweep-interval", "200ms",
		"--reconcile-interval", "1s", "--writer-batch", "200")

	// Gateways lease their node ids from Redis (--node-id -1 wins over the
	// harness's fixed one: the last flag counts).
	gws := e.serveGateways(2, "gw", "gateway", append(slices.Clone(extra), "--node-id", "-1")...)
	procs := map[string][]*proc{"gateway": gws}
	for _, role := range []string{"writer", "relay", "consumer", "sweeper"} {
		for i := range 2 {
			procs[role] = append(procs[role], e.serve(fmt.Sprintf("%s%d", role, i), role, extra...))
		}
	}
	blocker := e.blockDelayQueue()

	var pids []int64
	for i := range scaleProducts {
		pids = append(pids, e.scaleProduct(fmt.Sprintf("scale-%d", i), scaleStock))
	}
	t.Logf("setup: %s", time.Since(start).Round(time.Millisecond))

	// The sale: every product's buyers at once, spread over both gateways.
	saleStart := time.Now()
	intents := make([][]*intent, scaleProducts)
	var wg sync.WaitGroup
	for i, pid := range pids {
		wg.Go(func() {
			intents[i] = e.sale(pid, scaleBuyers, int64(100000*(i+1)), saleOptions{workers: 6, retry: true})
		})
	}
	wg.Wait()
	var accepted []*intent
	for i := range intents {
		n := 0
		for _, in := range intents[i] {
			switch {
			case in.status == http.StatusAccepted:
				n++
				accepted = append(accepted, in)
			case in.status != http.StatusConflict:
				t.Errorf("user %d: answer %d (%v), want 202 or 409", in.user, in.status, in.lastErr)
			}
		}
		if n != scaleStock {
			t.Errorf("product %d: %d accepted, want %d", pids[i], n, scaleStock)
		}
	}
	saleTime := time.Since(saleStart)
	t.Logf("sale: %d intents, %d accepted in %s (%.0f requests/s)", scaleProducts*scaleBuyers, len(accepted),
		saleTime.Round(time.Millisecond), float64(scaleProducts*scaleBuyers)/saleTime.Seconds())
	if t.Failed() {
		t.FailNow()
	}

	// Every order reaches WAITING_PAY through writers, relays and consumers.
	e.waitCount(30*time.Second, len(accepted), `SELECT COUNT(*) FROM order_info WHERE status = 'WAITING_PAY'`)
	lockedAt := time.Now()
	t.Logf("all WAITING_PAY %s after the sale", lockedAt.Sub(saleStart.Add(saleTime)).Round(time.Millisecond))
	var firstDeadline time.Time
	if err := e.store.DB.QueryRowContext(e.ctx, `SELECT MIN(pay_deadline) FROM order_info`).Scan(&firstDeadline); err != nil {
		t.Fatal(err)
	}

	// Pays (40 %) and buyer cancels (20 %), through the buyers' gateways.
	var pays, cancels []*intent
	for i, in := range accepted {
		switch i % 5 {
		case 0, 1:
			pays = append(pays, in)
		case 2:
			cancels = append(cancels, in)
		}
	}
	paid := e.scaleAct(pays, "pay")
	cancelled := e.scaleAct(cancels, "cancel")
	actEnd := time.Now()
	t.Logf("pays %d/%d and cancels %d/%d answered 200 in %s; first pay deadline %s after they ended",
		len(paid), len(pays), len(cancelled), len(cancels), actEnd.Sub(lockedAt).Round(time.Millisecond),
		firstDeadline.Sub(actEnd.UTC()).Round(time.Millisecond))
	// The pays and cancels must end before the first deadline for the
	// exact checks below (no payment racing a timeout close). On a machine
	// too slow for that, a late pay or cancel loses to the timeout (409) and
	// a sweeper may lose an order to a pay: both are then only logged.
	raced := !actEnd.UTC().Before(firstDeadline)
	if raced {
		t.Logf("pays and cancels overlapped the first pay deadlines: races with timeouts allowed")
	} else if len(paid) != len(pays) || len(cancelled) != len(cancels) {
		t.Errorf("some pays or cancels failed before any deadline")
	}

	// The rest time out: the sweepers close them.
	timeouts := len(accepted) - len(paid) - len(cancelled)
	e.waitCount(scalePayTime+45*time.Second, 0, `SELECT COUNT(*) FROM order_info WHERE status = 'WAITING_PAY'`)
	t.Logf("timeouts closed %s after the pays", time.Since(actEnd).Round(time.Millisecond))
	sweepEnd := time.Now()

	// Neither the default (writer) nor the batch design schedules a delayed close
	// message: the sweepers were the only closers. (Any close message there
	// were would expire now that the blocker is gone, and the close
	// consumers would skip it: checkConsumedOnce counts them.)
	blocker()
	if n := e.count(`SELECT COUNT(*) FROM mq_outbox WHERE routing_key = ?`, order.PayTimeoutDelayQueue); n != 0 {
		t.Errorf("%d delayed close messages in the outbox, want none with the writer or batch design", n)
	}

	// docs/spec.md §5.
	ctx, cancel := context.WithTimeout(e.ctx, 30*time.Second)
	defer cancel()
	if _, err := pipeline.WaitIdle(ctx, e.rdb, e.store, pids, 100*time.Millisecond); err != nil {
		t.Fatalf("pipeline not idle: %v", err)
	}
	rep, err := pipeline.Reconcile(e.ctx, e.rdb, e.store, pids)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK {
		t.Errorf("docs/spec.md §5 reconcile failed: %s", strings.Join(rep.Failed(), "; "))
	}
	if oc := e.outboxCounts(); len(oc) != 1 || oc["SENT"] == 0 {
		t.Errorf("outbox rows by status %v, want all SENT", oc)
	}

	// Every answered intent is one order, in the status the test made it.
	want := map[string]string{} // orderNo → status/close reason
	for _, in := range accepted {
		want[in.orderNo] = "CANCELLED/" + string(order.ReasonTimeout)
	}
	for _, in := range paid {
		want[in.orderNo] = "PAID/"
	}
	for _, in := range cancelled {
		want[in.orderNo] = "CANCELLED/" + string(order.ReasonUser)
	}
	byReq := map[string]*intent{}
	for _, ins := range intents {
		for _, in := range ins {
			byReq[fmt.Sprintf("%d/%s", in.user, in.requestID)] = in
		}
	}
	rows, err := e.store.DB.QueryContext(e.ctx, `SELECT order_no, user_id, request_id, status, COALESCE(close_reason, '') FROM order_info`)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	bad := 0
	for rows.Next() {
		var no, req, st, reason string
		var user int64
		if err := rows.Scan(&no, &user, &req, &st, &reason); err != nil {
			t.Fatal(err)
		}
		if _, dup := got[no]; dup {
			t.Errorf("orderNo %s stored twice", no)
		}
		got[no] = st + "/" + reason
		if in := byReq[fmt.Sprintf("%d/%s", user, req)]; in == nil || in.orderNo != no {
			bad++
			if bad < 10 {
				t.Errorf("order %s (%d/%s) matches no answered intent", no, user, req)
			}
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	rows.Close()
	for no, w := range want {
		if got[no] != w {
			bad++
			if bad < 10 {
				t.Errorf("order %s is %q, want %q", no, got[no], w)
			}
		}
	}
	if len(got) != len(want) {
		t.Errorf("%d orders stored, want %d", len(got), len(want))
	}

	// Exactly once per consumer.
	e.checkConsumedOnce(procs["consumer"], timeouts)

	// The work was shared.
	share := func(role, metric string, labels ...string) []float64 {
		var out []float64
		for _, p := range procs[role] {
			v := p.metric(t, metric, labels...)
			out = append(out, v)
			if v == 0 {
				t.Errorf("%s did no work: %s%v = 0", p.name, metric, labels)
			}
		}
		return out
	}
	t.Logf("gateways accepted %v", share("gateway", "stampede_reserve_total", `result="accepted"`))
	t.Logf("writers wrote %v", share("writer", "stampede_writer_entries_total", `outcome="written"`))
	t.Logf("relays published %v", share("relay", "stampede_relay_publishes_total", `outcome="acked"`))
	if e.consumersLock() {
		t.Logf("consumers locked %v", share("consumer", "stampede_consumer_messages_total", `handler="order-lock"`, `outcome="ok"`))
	}
	t.Logf("consumers released %v", share("consumer", "stampede_consumer_messages_total", `handler="stock-release"`, `outcome="ok"`))

	// The sweepers: every timeout closed once between them, no wasted
	// attempt, reconciliation rounds not duplicated.
	var closed, lost, skipped, rounds, roundsSkipped float64
	var split []string
	for _, p := range procs["sweeper"] {
		c := p.metric(t, "stampede_sweeper_closed_orders_total")
		l := p.metric(t, "stampede_sweeper_lost_closes_total")
		sk := p.metric(t, "stampede_sweeper_passes_total", `pass="close"`, `result="skipped"`)
		done := p.metric(t, "stampede_sweeper_passes_total", `pass="close"`, `result="done"`)
		r := p.metric(t, "stampede_sweeper_passes_total", `pass="reconcile"`, `result="done"`)
		rs := p.metric(t, "stampede_sweeper_passes_total", `pass="reconcile"`, `result="skipped"`)
		split = append(split, fmt.Sprintf("%s closed %.0f lost %.0f (close passes %.0f, skipped %.0f; reconcile rounds %.0f, skipped %.0f)",
			p.name, c, l, done, sk, r, rs))
		closed += c
		lost += l
		skipped += sk
		rounds += r
		roundsSkipped += rs
	}
	t.Logf("sweepers: %s", strings.Join(split, "; "))
	if int(closed) != timeouts {
		t.Errorf("sweepers closed %.0f orders, want the %d timeouts", closed, timeouts)
	}
	if lost != 0 && !raced {
		t.Errorf("%.0f wasted sweeper close attempts, want 0", lost)
	}
	if skipped == 0 || roundsSkipped == 0 {
		t.Errorf("sweepers never met the other's lock (close skipped %.0f, reconcile skipped %.0f)", skipped, roundsSkipped)
	}
	// One round per 0.9 s at most, between both sweepers, since they started.
	if limit := time.Since(start).Seconds()/0.9 + 2; rounds > limit || rounds == 0 {
		t.Errorf("%.0f reconciliation rounds in %s between two sweepers, want 1…%.0f", rounds, time.Since(start).Round(time.Second), limit)
	}
	if n := e.count(`SELECT COUNT(*) FROM stock_flow WHERE biz_type = 'RELEASE'`); n != timeouts+len(cancelled) {
		t.Errorf("%d RELEASE flows, want %d", n, timeouts+len(cancelled))
	}
	for _, ps := range procs {
		for _, p := range ps {
			if !p.alive() {
				t.Errorf("%s exited", p.name)
			}
		}
	}
	t.Logf("sweep phase %s; total %s", sweepEnd.Sub(actEnd).Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
}

// scaleProduct creates a product on sale now with stock units, one per user.
func (e *env) scaleProduct(name string, stock int) int64 {
	e.t.Helper()
	now := time.Now().UTC()
	a, err := e.call("POST", "/api/admin/products", e.admin, map[string]any{
		"name": name, "price": 1000, "stock": stock, "perUserLimit": 1, "shards": 1,
		"saleStart": now.Add(-time.Second).Format(time.RFC3339), "saleEnd": now.Add(time.Hour).Format(time.RFC3339),
	})
	if err != nil || a.status != http.StatusCreated {
		e.t.Fatalf("create product: %d %s %v", a.status, a.raw, err)
	}
	id, _ := a.body["id"].(interface{ Int64() (int64, error) }).Int64()
	return id
}

// scaleAct sends POST /api/orders/{orderNo}/<what> for every intent through
// its user's gateway, 16 at a time, and returns those answered 200.
func (e *env) scaleAct(ins []*intent, what string) []*intent {
	var mu sync.Mutex
	var ok []*intent
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= len(ins) {
					return
				}
				in := ins[i]
				a, err := e.callAt(e.baseFor(in.user), "POST", "/api/orders/"+in.orderNo+"/"+what, in.token, nil)
				if err == nil && a.status == http.StatusOK {
					mu.Lock()
					ok = append(ok, in)
					mu.Unlock()
				} else {
					e.t.Logf("%s %s: %d %s %v", what, in.orderNo, a.status, a.raw, err)
				}
			}
		})
	}
	wg.Wait()
	return ok
}

// waitCount polls q until it counts want.
func (e *env) waitCount(limit time.Duration, want int, q string, args ...any) {
	e.t.Helper()
	deadline := time.Now().Add(limit)
	n := -1
	for time.Now().Before(deadline) {
		if err := e.store.DB.QueryRowContext(e.ctx, q, args...).Scan(&n); err == nil && n == want {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	e.t.Fatalf("%s: %d after %s, want %d", q, n, limit, want)
}

// blockDelayQueue puts a message with a 10-minute TTL at the head of the
// pay-timeout delay queue once a process has declared it: the delayed close
// messages behind it cannot expire. The returned func takes it off (it is
// still the head), and every close message already due expires at once.
func (e *env) blockDelayQueue() (unblock func()) {
	e.t.Helper()
	conn, err := amqp.Dial(e.directAMQ)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { conn.Close() })
	deadline := time.Now().Add(30 * time.Second)
	var ch *amqp.Channel
	for {
		if ch, err = conn.Channel(); err != nil {
			e.t.Fatal(err)
		}
		if _, err = ch.QueueDeclarePassive(order.PayTimeoutDelayQueue, true, false, false, false, nil); err == nil {
			break
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("delay queue never declared: %v", err)
		}
		time.Sleep(100 * time.Millisecond) // the failed passive declare closed the channel
	}
	if err := ch.Confirm(false); err != nil {
		e.t.Fatal(err)
	}
	dc, err := ch.PublishWithDeferredConfirmWithContext(e.ctx, "", order.PayTimeoutDelayQueue, true, false, amqp.Publishing{
		MessageId: "scale-test-blocker", Expiration: "600000", Body: []byte(`{"blocker":true}`), DeliveryMode: amqp.Persistent,
	})
	if err != nil {
		e.t.Fatal(err)
	}
	if ok, err := dc.WaitContext(e.ctx); !ok || err != nil {
		e.t.Fatalf("blocker not confirmed: %v", err)
	}
	return func() {
		e.t.Helper()
		d, ok, err := ch.Get(order.PayTimeoutDelayQueue, false)
		if err != nil || !ok || d.MessageId != "scale-test-blocker" {
			e.t.Fatalf("delay queue head: ok %v, messageId %q, err %v; want the blocker", ok, d.MessageId, err)
		}
		if err := d.Ack(false); err != nil {
			e.t.Fatal(err)
		}
		ch.Close()
	}
}

// checkConsumedOnce checks that every event reached each of its consumers
// once. The consume log (written in the handler's transaction) must hold, per
// consumer name, exactly the outbox events routed to it; the handlers that
// keep no MySQL log are checked on the consumer processes' metrics: the
// release handler applied every CANCELLED/FAILED event once (ok) and the close
// handler handled every pay-timeout event once (all skipped: the sweepers
// closed the orders first).
func (e *env) checkConsumedOnce(consumers []*proc, timeouts int) {
	t := e.t
	t.Helper()
	routed := map[string][]string{ // consumer name → routing keys of its events
		pipeline.ConsumerOrderLock:    {order.RouteCreated},
		pipeline.ConsumerStockRelease: {order.RouteStatus(order.Cancelled), order.RouteStatus(order.Failed)},
		pipeline.ConsumerOrderClose:   {order.PayTimeoutDelayQueue},
	}
	names := map[string]int{}
	rows, err := e.store.DB.QueryContext(e.ctx, `SELECT consumer_name, COUNT(*) FROM mq_consume_log GROUP BY consumer_name`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var name string
		var n int
		rows.Scan(&name, &n)
		names[name] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	rows.Close()
	switch {
	case e.consumersLock() && names[pipeline.ConsumerOrderLock] == 0:
		t.Errorf("consume log has no %s rows", pipeline.ConsumerOrderLock)
	case !e.consumersLock() && names[pipeline.ConsumerOrderLock] != 0:
		t.Errorf("consume log has %d %s rows: the writer design publishes no ORDER_CREATED", names[pipeline.ConsumerOrderLock], pipeline.ConsumerOrderLock)
	}
	events := func(keys []string) int {
		q := `SELECT COUNT(*) FROM mq_outbox WHERE routing_key IN (?` + strings.Repeat(",?", len(keys)-1) + `)`
		var args []any
		for _, k := range keys {
			args = append(args, k)
		}
		return e.count(q, args...)
	}
	for name, n := range names {
		keys, ok := routed[name]
		if !ok {
			t.Errorf("consume log has %d rows of unknown consumer %q", n, name)
			continue
		}
		args := []any{name}
		in := "?" + strings.Repeat(",?", len(keys)-1)
		for _, k := range keys {
			args = append(args, k)
		}
		// Routed to it but not in its log.
		missing := e.count(`SELECT COUNT(*) FROM mq_outbox o WHERE o.routing_key IN (`+in+`)
			AND NOT EXISTS (SELECT 1 FROM mq_consume_log l WHERE l.event_id = o.event_id AND l.consumer_name = ?)`,
			append(args[1:], name)...)
		// In its log but not an event routed to it.
		stray := e.count(`SELECT COUNT(*) FROM mq_consume_log l WHERE l.consumer_name = ? AND NOT EXISTS
			(SELECT 1 FROM mq_outbox o WHERE o.event_id = l.event_id AND o.routing_key IN (`+in+`))`, args...)
		want := events(keys)
		if missing != 0 || stray != 0 || n != want {
			t.Errorf("consumer %s: %d log rows for %d events (%d missing, %d stray), want each event once", name, n, want, missing, stray)
		}
		t.Logf("consumer %s: %d events, each in the consume log once", name, n)
	}
	sum := func(handler, outcome string) float64 {
		var s float64
		for _, p := range consumers {
			s += p.metric(t, "stampede_consumer_messages_total", `handler="`+handler+`"`, `outcome="`+outcome+`"`)
		}
		return s
	}
	if got, want := sum(pipeline.ConsumerOrderLock, pipeline.OutcomeOK), events(routed[pipeline.ConsumerOrderLock]); int(got) != want {
		t.Errorf("%s applied %.0f events, want %d", pipeline.ConsumerOrderLock, got, want)
	}
	release := events(routed[pipeline.ConsumerStockRelease])
	if got := sum(pipeline.ConsumerStockRelease, pipeline.OutcomeOK); int(got) != release {
		t.Errorf("%s applied %.0f events, want %d (one per CANCELLED/FAILED event)", pipeline.ConsumerStockRelease, got, release)
	}
	closes := events(routed[pipeline.ConsumerOrderClose])
	ok, skipped := sum(pipeline.ConsumerOrderClose, pipeline.OutcomeOK), sum(pipeline.ConsumerOrderClose, pipeline.OutcomeSkipped)
	if int(ok+skipped) != closes || ok != 0 {
		t.Errorf("%s: %.0f ok + %.0f skipped of %d pay-timeout events, want all skipped once", pipeline.ConsumerOrderClose, ok, skipped, closes)
	}
	for _, h := range []string{pipeline.ConsumerOrderLock, pipeline.ConsumerStockRelease, pipeline.ConsumerOrderClose} {
		for _, o := range []string{pipeline.OutcomeRetry, pipeline.OutcomeDeadLetter, pipeline.OutcomeDuplicate} {
			if n := sum(h, o); n != 0 {
				t.Logf("%s: %.0f %s", h, n, o)
			}
		}
	}
	t.Logf("releases %d, close messages %d (timeouts %d)", release, closes, timeouts)
}

// consumersLock tells whether the processes' order-lock design has the
// consumers lock orders (batch: ORDER_CREATED messages) rather than the
// writers (writer, the default).
func (e *env) consumersLock() bool {
	return e.lockDesign == "batch"
}
