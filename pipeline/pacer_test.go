package pipeline_test

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-sh/stampede/drop"
	"github.com/stampede-sh/stampede/lua"
	"github.com/stampede-sh/stampede/persistence"
	"github.com/stampede-sh/stampede/pipeline"
	"github.com/stampede-sh/stampede/pipeline/pipelinetest"
)

func (e *env) roomProduct(avail int64, buyers int) (persistence.Product, lua.Keys) {
	e.t.Helper()
	p, k := e.product(avail, avail)
	e.roomOn(p.ID, lua.RoomSettings{On: true, Window: time.Minute})
	ctx := context.Background()
	for u := 1; u <= buyers; u++ {
		if _, err := lua.Take(ctx, e.rdb, p.ID, lua.TakeArgs{UserID: int64(u), TicketID: fmt.Sprintf("%016x", u)}); err != nil {
			e.t.Fatal(err)
		}
	}
	return p, k
}

// roomOn stores a room with a new seed (what the gateway's admin call does)
// and turns it on in Redis.
func (e *env) roomOn(productID int64, rs lua.RoomSettings) drop.Seed {
	e.t.Helper()
	seed, err := drop.NewSeed()
	if err != nil {
		e.t.Fatal(err)
	}
	mode := rs.Mode
	if mode == "" {
		mode = lua.ModeFIFO
	}
	t, err := e.store.SaveRoom(context.Background(), 0, persistence.RoomTerms{ProductID: productID, On: rs.On, Mode: string(mode),
		PreQueue: rs.PreQueue, Reserve: rs.Reserve, PowCost: rs.PowCost, Window: rs.Window, Seed: seed.Hex(), Commitment: seed.Commitment()})
	if err != nil {
		e.t.Fatal(err)
	}
	rs.Commitment = t.Commitment
	if err := lua.SetRoom(context.Background(), e.rdb, productID, rs); err != nil {
		e.t.Fatal(err)
	}
	return seed
}

// Two pacers at a fixed rate share the budget: together they admit no more
// than rate × time.
func TestPacersFixedRateNeverOverAdmit(t *testing.T) {
	e := newEnv(t)
	p, _ := e.roomProduct(10000, 1000)
	const rate = 100.0
	start := time.Now()
	for i := range 2 {
		pc, err := pipeline.NewPacer(e.store, e.rdb, pipeline.PacerConfig{Rate: rate, Interval: 20 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		stop := run(t, "pacer "+strconv.Itoa(i), pc.Run)
		defer stop()
	}
	time.Sleep(700 * time.Millisecond)
	st, err := lua.ReadRoom(context.Background(), e.rdb, p.ID)
	elapsed := time.Since(start)
	if err != nil || st.Admitted == 0 || float64(st.Admitted) > rate*elapsed.Seconds()+1 {
		t.Fatalf("admitted %d in %v at %v/s: %v", st.Admitted, elapsed, rate, err)
	}
}

// Auto mode follows the pipeline: while every accepted order drains at once
// the rate climbs to the ceiling; once nothing drains, the backlog grows past
// TargetBacklog and the rate falls to MinRate.
func TestPacerAutoFollowsDrain(t *testing.T) {
	e := newEnv(t)
	p, k := e.roomProduct(100000, 20000)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := e.rdb.XGroupCreateMkStream(ctx, k.Intake(), "writers", "0").Err(); err != nil {
		t.Fatal(err)
	}
	// Buyers order as soon as they are admitted.
	go func() {
		seen := map[string]bool{}
		for ctx.Err() == nil {
			uids, _ := e.rdb.ZRange(ctx, lua.Room(p.ID).Admitted(), 0, -1).Result()
			for _, u := range uids {
				if seen[u] {
					continue
				}
				seen[u] = true
				uid, _ := strconv.ParseInt(u, 10, 64)
				lua.Reserve(ctx, e.rdb, k, lua.ReserveArgs{OrderNo: e.gen.Next(p.ID, 0), UserID: uid, RequestID: "r",
					Quantity: 1, TTL: time.Hour, Admission: true})
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	// A stand-in for an infinitely fast pipeline: every entry is taken and
	// acknowledged at once, while draining is on.
	var draining atomic.Bool
	draining.Store(true)
	go func() {
		for ctx.Err() == nil {
			if !draining.Load() {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			res, err := e.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "writers", Consumer: "t", Streams: []string{k.Intake(), ">"},
				Count: 1000, Block: 20 * time.Millisecond}).Result()
			if err != nil {
				continue
			}
			for _, m := range res[0].Messages {
				e.rdb.XAck(ctx, k.Intake(), "writers", m.ID)
			}
		}
	}()
	cfg := pipeline.PacerConfig{Ceiling: 400, MinRate: 5, StartRate: 20, TargetBacklog: 300 * time.Millisecond,
		Interval: 20 * time.Millisecond, MeasureEvery: 100 * time.Millisecond}
	pc, err := pipeline.NewPacer(e.store, e.rdb, cfg)
	if err != nil {
		t.Fatal(err)
	}
	stop := run(t, "pacer", pc.Run)
	defer stop()
	waitRate := func(want float64) {
		t.Helper()
		// From StartRate to the ceiling at least doubling per second takes
		// about 4.3 s of steps; a loaded machine delays the steps.
		deadline := time.Now().Add(30 * time.Second)
		for pc.Rate(p.ID) != want {
			if time.Now().After(deadline) {
				t.Fatalf("auto rate %v, want %v", pc.Rate(p.ID), want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitRate(cfg.Ceiling)
	draining.Store(false)
	waitRate(cfg.MinRate)
}

// lineCounter is a slog handler counting the records whose message starts
// with prefix.
type lineCounter struct {
	prefix string
	n      *atomic.Int64
}

func (h lineCounter) Enabled(context.Context, slog.Level) bool { return true }
func (h lineCounter) Handle(_ context.Context, r slog.Record) error {
	if strings.HasPrefix(r.Message, h.prefix) {
		h.n.Add(1)
	}
	return nil
}
func (h lineCounter) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h lineCounter) WithGroup(string) slog.Handler      { return h }

// With MySQL down the pacer keeps its last product list and retries the
// listing with backoff: one log line when it starts failing, the other
// failures only counted (stampede_loop_failures_total{loop="pacer_list"}).
// It logged "pacer: list products" every tick (~100 ms) before.
func TestPacerBacksOffWhileMySQLIsDown(t *testing.T) {
	e := newEnv(t)
	db, err := sql.Open("mysql", "root@tcp(127.0.0.1:1)/nowhere?timeout=200ms")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	var lines atomic.Int64
	m, reg := e.metrics()
	pc, err := pipeline.NewPacer(&persistence.Store{DB: db}, e.rdb, pipeline.PacerConfig{Rate: 10, Interval: 10 * time.Millisecond,
		ListEvery: 10 * time.Millisecond, Failures: m, Logger: slog.New(lineCounter{prefix: "pacer: list products", n: &lines})})
	if err != nil {
		t.Fatal(err)
	}
	stop := run(t, "pacer (mysql down)", pc.Run)
	pipelinetest.WaitFor(t, 30*time.Second, "four failed listings", func() (bool, string) {
		n := pipelinetest.Metric(t, reg, "stampede_loop_failures_total", "loop", "pacer_list")
		return n >= 4, fmt.Sprintf("%v failures", n)
	})
	time.Sleep(300 * time.Millisecond) // 30 ticks more: each would have logged before
	stop()
	failures := pipelinetest.Metric(t, reg, "stampede_loop_failures_total", "loop", "pacer_list")
	if lines.Load() != 1 {
		t.Fatalf("%d log lines for %v failed listings, want 1", lines.Load(), failures)
	}
	t.Logf("%v failed listings, 1 log line", failures)
}
