package pipeline_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/stampede-sh/stampede/lua"
	"github.com/stampede-sh/stampede/order"
	"github.com/stampede-sh/stampede/persistence"
	"github.com/stampede-sh/stampede/persistence/persistencetest"
	"github.com/stampede-sh/stampede/pipeline"
)

// The writers' model runs: -writers.runs runs of -writers.load of load each
// (the defaults fit the normal test run in about a minute); -writers.seed
// replays one run's schedule.
var (
	writerModelRuns = flag.Int("writers.runs", 10, "runs of the writers' model test (TestWritersModelUnderFaults)")
	writerModelLoad = flag.Duration("writers.load", 4*time.Second, "load per run of the writers' model test")
	writerModelSeed = flag.Uint64("writers.seed", 0, "seed of the first run of the writers' model test (0: from the clock)")
	// A resend after a lost record is of an intent accepted at least this
	// long before; 0 also resends intents still in the same writer batch.
	writerModelLostAge = flag.Duration("writers.lostage", 0, "least age of an intent resent after its record was lost (writers' model test)")
)

// writerChildModelEnv carries the JSON writerChildSpec of a child writer
// process (TestWriterModelChild).
const writerChildModelEnv = "STAMPEDE_TEST_WRITER_MODEL_CHILD"

// writerChildSpec configures the child writer process of a model run.
type writerChildSpec struct {
	Consumer   string        `json:"consumer"`
	BatchSize  int           `json:"batchSize"`
	BatchWait  time.Duration `json:"batchWait"`
	ClaimIdle  time.Duration `json:"claimIdle"`
	KillAfter  int           `json:"killAfter"` // SIGKILL after this many commits, before their XACK
	LockWaitMS int           `json:"lockWaitMs"`
}

// writerModelDSN is dsn (the test's database) with the session's lock wait
// timeout set to lockWait whole seconds.
func writerModelDSN(t testing.TB, dsn string, lockWait int) string {
	t.Helper()
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Params == nil {
		cfg.Params = map[string]string{}
	}
	cfg.Params["innodb_lock_wait_timeout"] = fmt.Sprint(lockWait)
	return cfg.FormatDSN()
}

// TestWriterModelChild is not a test on its own: run by
// TestWritersModelUnderFaults in a child process, it is one more locking
// writer, which kills its own process with SIGKILL after its KillAfter-th
// commit, before the XACK.
func TestWriterModelChild(t *testing.T) {
	raw := os.Getenv(writerChildModelEnv)
	if raw == "" {
		t.Skip("run by TestWritersModelUnderFaults")
	}
	var spec writerChildSpec
	if err := json.Unmarshal([]byte(raw), &spec); err != nil {
		t.Fatal(err)
	}
	store, err := persistence.Open(context.Background(), writerModelDSN(t, os.Getenv(childMySQLEnv), max(1, spec.LockWaitMS/1000)))
	if err != nil {
		t.Fatal(err)
	}
	rdb := childRedis(t)
	var mu sync.Mutex
	commits := 0
	w, err := pipeline.NewWriter(store, rdb, pipeline.WriterConfig{Consumer: spec.Consumer, BatchSize: spec.BatchSize,
		BatchWait: spec.BatchWait, ClaimIdle: spec.ClaimIdle, ClaimInterval: spec.ClaimIdle / 3, LockOrders: true, PayTimeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	w.TestSignals.AfterCommit = func(int) {
		mu.Lock()
		defer mu.Unlock()
		if commits++; commits >= spec.KillAfter {
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w.Run(ctx)
	t.Fatal("the writer was not killed")
}

// modelOp is one buyer request of a model run's history and its answer.
type modelOp struct {
	kind    string // "new", "replay" (same record), "lost" (the record deleted first: Redis lost it)
	key     requestKeyM
	qty     int64
	orderNo string // the answer's orderNo
	err     error
	at      time.Time
}

// requestKeyM is a buyer's (user, product, requestId).
type requestKeyM struct {
	user, product int64
	request       string
}

// The writers' model (docs/durability.md, docs/spec.md §5 invariants 4, 5, 7 and
// 2–3 through Reconcile): 2–4 locking writers on the same intake streams
// (goroutines) plus one child writer process that dies by SIGKILL between a
// commit and its XACK, with short stale-entry claim times, so that writers
// claim each other's entries while a batch is still uncommitted; buyers
// reserve on two products (new intents, replays of a live record, and
// requestIds whose Redis record was lost, which the writers must store as
// one order and fail the others as REQUEST_REUSED); a fault injector holds
// a product's stock row locked for 0.3–1.5 s (the writers' lock wait timeout
// is 1 s: 1205 errors) and takes two stock rows in the order opposite to the
// writers' (1213 deadlocks). Relay and consumers carry FAILED orders'
// releases to Redis. The history of answers is then checked against the
// idle system:
//
//   - every accepted reservation is exactly one order; every replay answered
//     the orderNo of its intent;
//   - per (user, product, requestId): exactly one order stored under it
//     (WAITING_PAY: nobody pays here), every other order of that key FAILED
//     REQUEST_REUSED; a key never sent with a lost record has one order,
//     WAITING_PAY;
//   - one LOCK flow per WAITING_PAY order and none else; a RELEASE flow only
//     for a CANCELLED or FAILED order, at most one per order;
//   - Reconcile passes for both products: Redis and MySQL agree (drift 0),
//     MySQL locked = Σ WAITING_PAY, nothing left in flight.
//
// On the code before the fix (the careful retry read stored orders without
// a lock and took a writer's own order, committed meanwhile, for a reused
// requestId) it fails with WAITING_PAY orders holding a RELEASE flow and
// Redis above MySQL (see the note of this change).
func TestWritersModelUnderFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("model test: -short")
	}
	e := newEnv(t)
	seed := *writerModelSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	for i := range *writerModelRuns {
		s := seed + uint64(i)
		if !t.Run(fmt.Sprintf("seed=%d", s), func(t *testing.T) { e.writerModelRun(t, s) }) {
			t.Logf("replay with -run 'TestWritersModelUnderFaults' -writers.runs 1 -writers.seed %d", s)
			return
		}
	}
}

// writerModelRun is one run of TestWritersModelUnderFaults.
func (e *env) writerModelRun(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	ctx := context.Background()
	type prod struct {
		p persistence.Product
		k lua.Keys
	}
	var prods []prod
	for range 2 {
		p, k := e.product(1_000_000, 1_000_000)
		prods = append(prods, prod{p, k})
	}
	pids := []int64{prods[0].p.ID, prods[1].p.ID}
	writers := 2 + rng.IntN(3) // 2–4 in-process writers, plus the child
	claimIdle := time.Duration(150+rng.IntN(350)) * time.Millisecond
	batch := []int{20, 60, 150}[rng.IntN(3)]
	t.Logf("seed %d: %d writers + 1 child writer killed after a commit, claim idle %s, batch %d", seed, writers, claimIdle, batch)

	wstore, err := persistence.Open(ctx, writerModelDSN(t, persistencetest.DSN(persistencetest.Name(e.store)), 1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { wstore.DB.Close() })
	var stops []func()
	var ws []*pipeline.Writer
	for i := range writers {
		cfg := pipeline.WriterConfig{Consumer: fmt.Sprintf("w%d-%d", seed%1000, i), BatchSize: batch,
			BatchWait: time.Duration(5+rng.IntN(40)) * time.Millisecond, ClaimIdle: claimIdle, ClaimInterval: claimIdle / 3,
			RetryMin: 20 * time.Millisecond, RetryMax: 200 * time.Millisecond, Flushers: 1 + rng.IntN(2),
			LockOrders: true, PayTimeout: time.Hour}
		reg := e.regsFor(&cfg)
		w, err := pipeline.NewWriter(wstore, e.rdb, cfg)
		if err != nil {
			t.Fatal(err)
		}
		e.own(w, reg)
		ws = append(ws, w)
		stops = append(stops, run(t, cfg.Consumer, w.Run))
	}
	stops = append(stops, run(t, "relay", e.relay(pipeline.RelayConfig{}).Run))
	stops = append(stops, run(t, "consumer", e.consumer(pipeline.ConsumerConfig{}).Run))
	child := e.startChildWriter(t, writerChildSpec{Consumer: fmt.Sprintf("child-%d", seed%1000), BatchSize: batch,
		BatchWait: 20 * time.Millisecond, ClaimIdle: claimIdle, KillAfter: 1 + rng.IntN(3), LockWaitMS: 1000})

	loadCtx, stopLoad := context.WithTimeout(ctx, *writerModelLoad)
	defer stopLoad()
	var wg sync.WaitGroup
	faults := &faultLog{}
	wg.Go(func() { e.injectFaults(loadCtx, rand.New(rand.NewPCG(seed, 7)), pids, faults) })
	history := e.buyers(loadCtx, rand.New(rand.NewPCG(seed, 11)), prods[0].k, prods[1].k, pids)
	wg.Wait()
	childDied := make(chan error, 1)
	go func() { childDied <- child.Wait() }()
	select {
	case err := <-childDied:
		if err == nil || !strings.Contains(err.Error(), "killed") {
			t.Errorf("child writer did not die by SIGKILL after a commit: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Errorf("child writer still running 10 s after the load")
	}

	idleCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
	rep, err := pipeline.WaitIdle(idleCtx, e.rdb, e.store, pids, 100*time.Millisecond)
	cancel()
	for _, stop := range stops {
		stop()
	}
	var failures int64
	for _, w := range ws {
		failures += e.writerStats(w).Failures
	}
	t.Logf("seed %d: %d requests, faults: %s; %d failed writer batches (retried)", seed, len(history), faults, failures)
	if err != nil {
		t.Errorf("not idle: %v", err)
	}
	for _, f := range rep.Failed() {
		t.Errorf("reconcile: %s", f)
	}
	checkWriterHistory(t, e, history, pids)
}

// regsFor gives cfg Metrics on a registry of their own and returns it.
func (e *env) regsFor(cfg *pipeline.WriterConfig) *prometheus.Registry {
	m, reg := e.metrics()
	cfg.Metrics = m
	return reg
}

// startChildWriter starts the child writer process of spec; Wait reaps it.
func (e *env) startChildWriter(t *testing.T, spec writerChildSpec) *exec.Cmd {
	raw, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestWriterModelChild$", "-test.count=1")
	cmd.Env = append(e.childEnviron(), writerChildModelEnv+"="+string(raw))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	return cmd
}

// faultLog counts the injected faults and what MySQL answered the injector.
type faultLog struct {
	mu                           sync.Mutex
	holds, deadlockTries, victim int
}

func (f *faultLog) String() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return fmt.Sprintf("%d stock rows held 0.3–1.5 s, %d crossed stock locks (%d ended in a deadlock the injector lost)",
		f.holds, f.deadlockTries, f.victim)
}

// injectFaults holds stock rows and crosses stock locks until ctx ends.
func (e *env) injectFaults(ctx context.Context, rng *rand.Rand, pids []int64, log *faultLog) {
	db, err := sql.Open("mysql", writerModelDSN(e.t, persistencetest.DSN(persistencetest.Name(e.store)), 2))
	if err != nil {
		e.t.Error(err)
		return
	}
	defer db.Close()
	for ctx.Err() == nil {
		sleep(ctx, time.Duration(50+rng.IntN(250))*time.Millisecond)
		tx, err := db.BeginTx(context.WithoutCancel(ctx), nil)
		if err != nil {
			continue
		}
		if rng.IntN(3) > 0 {
			pid := pids[rng.IntN(len(pids))]
			if _, err := tx.Exec(`SELECT available FROM stock WHERE product_id = ? FOR UPDATE`, pid); err == nil {
				log.mu.Lock()
				log.holds++
				log.mu.Unlock()
				time.Sleep(time.Duration(300+rng.IntN(1200)) * time.Millisecond)
			}
		} else {
			// The writers take stock rows in product id order; this takes
			// them the other way round.
			_, err := tx.Exec(`SELECT available FROM stock WHERE product_id = ? FOR UPDATE`, pids[1])
			if err == nil {
				time.Sleep(time.Duration(50+rng.IntN(200)) * time.Millisecond)
				_, err = tx.Exec(`SELECT available FROM stock WHERE product_id = ? FOR UPDATE`, pids[0])
			}
			var me *mysql.MySQLError
			log.mu.Lock()
			log.deadlockTries++
			if errors.As(err, &me) && me.Number == 1213 {
				log.victim++
			}
			log.mu.Unlock()
		}
		tx.Rollback()
	}
}

// sleep pauses for d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// buyers sends reservations on the two products until ctx ends, at about
// 500 a second, and returns the history: new intents, replays of a live
// record and resends after the record was lost.
func (e *env) buyers(ctx context.Context, rng *rand.Rand, k0, k1 lua.Keys, pids []int64) []modelOp {
	keys := []lua.Keys{k0, k1}
	var history []modelOp
	var accepted []modelOp // the "new" ones, to replay or lose
	next := 0
	for ctx.Err() == nil {
		for range 5 {
			var op modelOp
			switch r := rng.IntN(100); {
			case r < 4 && len(accepted) > 0:
				op = accepted[rng.IntN(len(accepted))]
				op.kind = "replay"
			case r < 7 && len(accepted) > 0:
				op = accepted[rng.IntN(len(accepted))]
				op.kind = "lost"
				if time.Since(op.at) < *writerModelLostAge {
					continue
				}
			default:
				next++
				pi := rng.IntN(2)
				op = modelOp{kind: "new", key: requestKeyM{int64(1 + rng.IntN(300)), pids[pi], fmt.Sprintf("m-%d", next)}, qty: int64(1 + rng.IntN(3))}
			}
			k := keys[slices.Index(pids, op.key.product)]
			if op.kind == "lost" {
				if err := e.rdb.Del(ctx, k.Request(op.key.user, op.key.request)).Err(); err != nil {
					continue
				}
			}
			op.at = time.Now()
			res, err := lua.Reserve(context.WithoutCancel(ctx), e.rdb, k, lua.ReserveArgs{OrderNo: e.gen.Next(op.key.product, 0),
				UserID: op.key.user, RequestID: op.key.request, Quantity: op.qty, TTL: time.Hour})
			op.orderNo, op.err = res.OrderNo, err
			if errors.Is(err, lua.ErrDuplicate) {
				op.err = nil
			}
			history = append(history, op)
			if op.kind == "new" && err == nil {
				accepted = append(accepted, op)
			}
		}
		sleep(ctx, 10*time.Millisecond)
	}
	return history
}

// storedOrder is an order_info row with its flows, as the checker reads it.
type storedOrder struct {
	no, request, status, reason string
	key                         requestKeyM
	lock, release               int
}

// checkWriterHistory checks the history against the stored orders (see
// TestWritersModelUnderFaults).
func checkWriterHistory(t *testing.T, e *env, history []modelOp, pids []int64) {
	t.Helper()
	rows, err := e.store.DB.Query(`SELECT o.order_no, o.user_id, o.product_id, o.request_id, o.status, COALESCE(o.close_reason, ''),
			(SELECT COUNT(*) FROM stock_flow f WHERE f.biz_type = 'LOCK' AND f.biz_no = o.order_no),
			(SELECT COUNT(*) FROM stock_flow f WHERE f.biz_type = 'RELEASE' AND f.biz_no = o.order_no)
		FROM order_info o WHERE o.product_id IN (?, ?)`, pids[0], pids[1])
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	stored := map[string]*storedOrder{}
	for rows.Next() {
		var o storedOrder
		if err := rows.Scan(&o.no, &o.key.user, &o.key.product, &o.request, &o.status, &o.reason, &o.lock, &o.release); err != nil {
			t.Fatal(err)
		}
		stored[o.no] = &o
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	var bad []string
	fail := func(format string, args ...any) {
		if len(bad) < 20 {
			bad = append(bad, fmt.Sprintf(format, args...))
		}
	}
	// Every accepted reservation is one order; replays answer their intent.
	intents := map[requestKeyM][]string{} // key → its orderNos, in acceptance order
	latest := map[requestKeyM]string{}
	accepted := map[string]bool{}
	for _, op := range history {
		if op.err != nil {
			fail("%s request %v: %v", op.kind, op.key, op.err)
			continue
		}
		switch op.kind {
		case "replay":
			if op.orderNo != latest[op.key] {
				fail("replay of %v answered %s, its intent is %s", op.key, op.orderNo, latest[op.key])
			}
			continue
		case "lost":
			if op.orderNo == latest[op.key] {
				fail("a resend of %v after its record was lost answered the old orderNo %s", op.key, op.orderNo)
				continue
			}
		}
		latest[op.key] = op.orderNo
		intents[op.key] = append(intents[op.key], op.orderNo)
		accepted[op.orderNo] = true
		if stored[op.orderNo] == nil {
			fail("accepted %s (%v) has no order", op.orderNo, op.key)
		}
	}
	for no, o := range stored {
		if !accepted[no] {
			fail("order %s (%v) was never accepted", no, o.key)
		}
		if o.release > 1 || o.lock > 1 {
			fail("order %s has %d LOCK and %d RELEASE flows", no, o.lock, o.release)
		}
		if o.release > 0 && o.status != string(order.Cancelled) && o.status != string(order.Failed) {
			fail("order %s is %s with a RELEASE flow (invariant 7)", no, o.status)
		}
		if (o.lock == 1) != (o.status == string(order.WaitingPay)) {
			fail("order %s is %s with %d LOCK flows", no, o.status, o.lock)
		}
	}
	// Per key: one order stored under it, the others failed as reused.
	for key, nos := range intents {
		var kept []string
		for _, no := range nos {
			o := stored[no]
			switch {
			case o == nil:
			case o.status == string(order.WaitingPay) && o.request == key.request:
				kept = append(kept, no)
			case o.status == string(order.Failed) && o.reason == "REQUEST_REUSED" && o.request == persistence.ReusedRequestPrefix+no:
				if len(nos) == 1 {
					fail("order %s failed as reused, but %v was only ever sent once", no, key)
				}
			default:
				fail("order %s of %v is %s (%s) under request %q", no, key, o.status, o.reason, o.request)
			}
		}
		if len(kept) != 1 {
			fail("%v: %d orders stored under it (%v), want 1", key, len(kept), kept)
		}
	}
	for _, b := range bad {
		t.Error(b)
	}
}
