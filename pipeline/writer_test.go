package pipeline_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-sh/stampede/lua"
	"github.com/stampede-sh/stampede/order"
	"github.com/stampede-sh/stampede/pipeline"
)

func TestWriterWritesEveryReservationInBatches(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	p, k := e.product(1000, 1000)
	// Half the entries exist before the writer creates its group: a group
	// created at "$" would skip them.
	first := e.reserve(p, k, 1, 500, 1)
	for _, no := range first[:5] {
		if n, _ := e.rdb.Exists(ctx, k.Order(no)).Result(); n != 1 {
			t.Fatalf("no pending-order record for %s before the writer ran", no)
		}
	}
	w := e.writer(pipeline.WriterConfig{BatchSize: 100, BatchWait: 20 * time.Millisecond})
	run(t, "writer", w.Run)
	e.reserve(p, k, 501, 500, 1)

	e.waitCount(20*time.Second, 1000, `SELECT COUNT(*) FROM order_info WHERE product_id = ?`, p.ID)
	if n := e.count(`SELECT COUNT(*) FROM order_item i JOIN order_info o USING (order_no)
		WHERE o.product_id = ? AND i.product_name = ? AND i.unit_price = 1999 AND o.amount = 1999 AND o.status = 'PROCESSING'`, p.ID, p.Name); n != 1000 {
		t.Errorf("%d matching order items, want 1000", n)
	}
	if n := e.count(`SELECT COUNT(DISTINCT event_id) FROM mq_outbox WHERE event_type = ? AND routing_key = ?`, string(order.EventCreated), order.RouteCreated); n != 1000 {
		t.Errorf("%d ORDER_CREATED outbox rows, want 1000", n)
	}
	waitNoPending(t, e, k.Intake())
	st := e.writerStats(w)
	if st.Written != 1000 || st.Duplicates != 0 || st.Dead != 0 {
		t.Errorf("stats %+v", st)
	}
	// 1,000 entries at ≤ 100 per batch: at least 10 batches, and far fewer
	// than one per entry.
	if st.Batches < 10 || st.Batches > 200 {
		t.Errorf("%d batches for 1000 entries of batch size 100", st.Batches)
	}
	if n, _ := e.rdb.XLen(ctx, k.Intake()).Result(); n != 0 {
		t.Errorf("intake stream still holds %d acknowledged entries", n)
	}
	// What MySQL now holds is gone from Redis; what idempotency and the
	// per-user limit need stays.
	if keys, _ := e.rdb.Keys(ctx, k.Order("")+"*").Result(); len(keys) != 0 {
		t.Errorf("%d pending-order records left after the writer stored every order", len(keys))
	}
	if n, _ := e.rdb.Exists(ctx, k.Request(1, "req-1"), k.User(1)).Result(); n != 2 {
		t.Errorf("idempotency record or user count of user 1 gone (%d of 2 keys)", n)
	}
}

func TestWriterReclaimsEntriesOfDeadWriter(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	p, k := e.product(100, 100)
	e.reserve(p, k, 1, 50, 1)
	// A writer "dead" read every entry and died before writing them.
	if err := e.rdb.XGroupCreateMkStream(ctx, k.Intake(), "writers", "0").Err(); err != nil {
		t.Fatal(err)
	}
	res, err := e.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "writers", Consumer: "dead", Streams: []string{k.Intake(), ">"}, Count: 100, Block: -1}).Result()
	if err != nil || len(res[0].Messages) != 50 {
		t.Fatalf("dead writer read %v, %v", res, err)
	}

	w := e.writer(pipeline.WriterConfig{ClaimIdle: 300 * time.Millisecond, ClaimInterval: 100 * time.Millisecond})
	run(t, "writer", w.Run)
	e.waitCount(10*time.Second, 50, `SELECT COUNT(*) FROM order_info WHERE product_id = ?`, p.ID)
	waitNoPending(t, e, k.Intake())
	if st := e.writerStats(w); st.Claimed != 50 || st.Written != 50 {
		t.Errorf("stats %+v, want 50 claimed and written", st)
	}
	// The dead writer comes back and writes what it had read: nothing new.
	var batch []order.Reservation
	for _, m := range res[0].Messages {
		r, err := lua.ParseReservation(m.Values)
		if err != nil {
			t.Fatal(err)
		}
		batch = append(batch, r)
	}
	out, err := e.store.InsertReservations(ctx, batch, map[int64]string{p.ID: p.Name})
	if err != nil || out.Inserted != 0 || out.Duplicates != 50 {
		t.Fatalf("late write by the dead writer: %+v %v", out, err)
	}
	if n := e.count(`SELECT COUNT(*) FROM order_info`); n != 50 {
		t.Errorf("%d orders, want 50", n)
	}
	if n := e.count(`SELECT COUNT(*) FROM mq_outbox`); n != 50 {
		t.Errorf("%d outbox rows, want 50", n)
	}
	if n := e.count(`SELECT COUNT(*) FROM order_item`); n != 50 {
		t.Errorf("%d order items, want 50", n)
	}
}

// waitNoPending waits until the writers' group has nothing pending on stream.
func waitNoPending(t *testing.T, e *env, stream string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		p, err := e.rdb.XPending(context.Background(), stream, "writers").Result()
		if err == nil && p.Count == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pending entries on %s: %+v %v", stream, p, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestWriterRestartReadsOwnPendingFirst(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	p, k := e.product(100, 100)
	e.reserve(p, k, 1, 20, 2)
	if err := e.rdb.XGroupCreateMkStream(ctx, k.Intake(), "writers", "0").Err(); err != nil {
		t.Fatal(err)
	}
	// The previous run of writer "w-1" read the entries and stopped.
	if err := e.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "writers", Consumer: "w-1", Streams: []string{k.Intake(), ">"}, Count: 100, Block: -1}).Err(); err != nil {
		t.Fatal(err)
	}
	// Restarted under the same name, it writes them at once (no XAUTOCLAIM:
	// ClaimIdle is an hour).
	w := e.writer(pipeline.WriterConfig{Consumer: "w-1", ClaimIdle: time.Hour})
	run(t, "writer", w.Run)
	e.waitCount(10*time.Second, 20, `SELECT COUNT(*) FROM order_info WHERE product_id = ? AND quantity = 2`, p.ID)
	waitNoPending(t, e, k.Intake())
	if st := e.writerStats(w); st.Claimed != 0 || st.Written != 20 {
		t.Errorf("stats %+v", st)
	}
}

func TestWriterMovesUnparseableEntryToDeadStream(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	p, k := e.product(100, 100)
	e.reserve(p, k, 1, 3, 1)
	junk, err := e.rdb.XAdd(ctx, &redis.XAddArgs{Stream: k.Intake(), Values: []any{"o", "not-an-order", "q", "x"}}).Result()
	if err != nil {
		t.Fatal(err)
	}
	e.reserve(p, k, 10, 3, 1)
	w := e.writer(pipeline.WriterConfig{})
	run(t, "writer", w.Run)
	e.waitCount(10*time.Second, 6, `SELECT COUNT(*) FROM order_info`)
	waitNoPending(t, e, k.Intake())
	dead, err := e.rdb.XRange(ctx, k.Intake()+":dead", "-", "+").Result()
	if err != nil || len(dead) != 1 || dead[0].Values["id"] != junk || dead[0].Values["f:o"] != "not-an-order" {
		t.Fatalf("dead stream %v %v", dead, err)
	}
	if st := e.writerStats(w); st.Dead != 1 || st.Written != 6 {
		t.Errorf("stats %+v", st)
	}
	if n, _ := e.rdb.XLen(ctx, k.Intake()).Result(); n != 0 {
		t.Errorf("intake stream holds %d entries", n)
	}
}

// consumerNames is the group's consumers on stream, name → pending.
func consumerNames(t *testing.T, e *env, stream string) map[string]int64 {
	t.Helper()
	cs, err := e.rdb.XInfoConsumers(context.Background(), stream, "writers").Result()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, c := range cs {
		out[c.Name] = c.Pending
	}
	return out
}

// Writers remove idle consumers that hold nothing (restarted or scaled-away
// writers), keep those with pending entries, and leave the group
// themselves when they stop with nothing pending.
func TestWriterPrunesIdleConsumers(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	p, k := e.product(100, 100)
	e.reserve(p, k, 1, 10, 1)
	if err := e.rdb.XGroupCreateMkStream(ctx, k.Intake(), "writers", "0").Err(); err != nil {
		t.Fatal(err)
	}
	// "gone" read and acknowledged 5 entries; "holding" read 5 and holds them.
	for _, c := range []string{"gone", "holding"} {
		res, err := e.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "writers", Consumer: c, Streams: []string{k.Intake(), ">"}, Count: 5, Block: -1}).Result()
		if err != nil || len(res[0].Messages) != 5 {
			t.Fatalf("%s read %v, %v", c, res, err)
		}
		if c == "gone" {
			for _, m := range res[0].Messages {
				e.rdb.XAck(ctx, k.Intake(), "writers", m.ID)
			}
		}
	}
	time.Sleep(100 * time.Millisecond)

	w := e.writer(pipeline.WriterConfig{Consumer: "w1", ClaimIdle: time.Hour, ClaimInterval: 50 * time.Millisecond, PruneIdle: 50 * time.Millisecond})
	stop := run(t, "writer", w.Run)
	deadline := time.Now().Add(10 * time.Second)
	for {
		names := consumerNames(t, e, k.Intake())
		if _, ok := names["gone"]; !ok {
			if names["holding"] != 5 {
				t.Fatalf("consumers %v: the one holding 5 entries must stay", names)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("idle consumer without pending entries never pruned: %v", names)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, ok := consumerNames(t, e, k.Intake())["w1"]; !ok {
		t.Fatal("the running writer is not in the group")
	}
	stop()
	names := consumerNames(t, e, k.Intake())
	if _, ok := names["w1"]; ok || names["holding"] != 5 {
		t.Errorf("after the writer stopped: %v, want only holding (5 pending)", names)
	}
}

// WaitIdle for some products is not held up by other products' unpublished
// events (another sale, a sweeper closing old orders); without products it
// waits for the whole outbox.
func TestWaitIdleIgnoresOtherProductsOutbox(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	quiet, _ := e.product(10, 10)
	busy, k := e.product(10, 10)
	e.reserve(busy, k, 1, 3, 1)
	w := e.writer(pipeline.WriterConfig{})
	stop := run(t, "writer", w.Run)
	e.waitCount(10*time.Second, 3, `SELECT COUNT(*) FROM order_info WHERE product_id = ?`, busy.ID)
	stop() // no relay runs: the busy product's 3 ORDER_CREATED rows stay NEW

	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := pipeline.WaitIdle(wctx, e.rdb, e.store, []int64{quiet.ID}, 10*time.Millisecond); err != nil {
		t.Fatalf("quiet product not idle: %v", err)
	}
	if n, err := e.store.PendingOutboxFor(ctx, []int64{busy.ID, quiet.ID}); err != nil || n != 3 {
		t.Fatalf("pending outbox of both: %d, %v; want 3", n, err)
	}
	short, cancel2 := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel2()
	if _, err := pipeline.WaitIdle(short, e.rdb, e.store, nil, 10*time.Millisecond); err == nil {
		t.Fatal("WaitIdle over every product returned while 3 events were unpublished")
	}
}

// Item 6 of issue 18: one limit for the writer batch, MaxWriterBatch, used by
// WriterConfig.Validate and by the STAMPEDE_WRITER_BATCH flag (package app
// TestWriterBatchLimitMatchesPipeline).
func TestWriterBatchLimit(t *testing.T) {
	for _, c := range []struct {
		n  int
		ok bool
	}{{1, true}, {pipeline.MaxWriterBatch, true}, {pipeline.MaxWriterBatch + 1, false}, {-1, false}} {
		cfg := pipeline.WriterConfig{Group: "g", Consumer: "c", BatchSize: c.n, BatchWait: time.Millisecond, ClaimIdle: time.Second,
			ClaimInterval: time.Second, StreamRefresh: time.Second, IdlePoll: time.Second, FlushTimeout: time.Second,
			RetryMin: time.Millisecond, RetryMax: time.Second, DeadMaxLen: 1}
		if err := cfg.Validate(); (err == nil) != c.ok {
			t.Errorf("batch %d: Validate() = %v, want ok=%v", c.n, err, c.ok)
		}
	}
}
