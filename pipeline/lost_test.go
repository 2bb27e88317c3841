package pipeline_test

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-sh/stampede/lua"
	"github.com/stampede-sh/stampede/order"
	"github.com/stampede-sh/stampede/pipeline"
)

// TestRepairLostReservations: of three reservations accepted minutes ago,
// one is in MySQL, one still in the intake stream (accepted later than the
// lost one, as the stream is ordered) and one in neither; only the last is
// released, once.
func TestRepairLostReservations(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	p, k := e.product(100, 100)
	nos := e.reserve(p, k, 1, 3, 2) // A in MySQL, C lost, D in the stream
	a, c, d := nos[0], nos[1], nos[2]
	entries, err := e.rdb.XRange(ctx, k.Intake(), "-", "+").Result()
	if err != nil || len(entries) != 3 {
		t.Fatalf("stream %v %v", entries, err)
	}
	old := time.Now().Add(-10 * time.Minute).UnixMilli()
	at := map[string]int64{a: old, c: old, d: time.Now().Add(-5 * time.Minute).UnixMilli()}
	byNo := map[string]map[string]any{}
	for _, en := range entries {
		no := en.Values[lua.FieldOrderNo].(string)
		en.Values[lua.FieldAccepted] = strconv.FormatInt(at[no], 10)
		byNo[no] = en.Values
	}
	for _, no := range nos {
		if err := e.rdb.HSet(ctx, k.Order(no), "t", strconv.FormatInt(at[no], 10)).Err(); err != nil {
			t.Fatal(err)
		}
	}
	// A was written (and its entry acknowledged and deleted); D's entry is
	// still in the stream, with the id of its accepted time; C's is gone.
	r, err := lua.ParseReservation(byNo[a])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.InsertReservations(ctx, []order.Reservation{r}, map[int64]string{p.ID: p.Name}); err != nil {
		t.Fatal(err)
	}
	if err := e.rdb.Del(ctx, k.Intake()).Err(); err != nil {
		t.Fatal(err)
	}
	if err := e.rdb.XAdd(ctx, &redis.XAddArgs{Stream: k.Intake(), ID: strconv.FormatInt(at[d], 10) + "-0", Values: byNo[d]}).Err(); err != nil {
		t.Fatal(err)
	}
	before := e.redisAvailable(k)
	// (Had D's entry been older than C, C could not be told apart from an
	// entry still in the stream and would be kept until D is written.)

	// Within the grace period nothing is touched.
	rep, err := pipeline.RepairLostReservations(ctx, e.rdb, e.store, pipeline.LostConfig{Grace: time.Hour})
	if err != nil || len(rep.Released) != 0 {
		t.Fatalf("grace: %+v %v", rep, err)
	}
	rep, err = pipeline.RepairLostReservations(ctx, e.rdb, e.store, pipeline.LostConfig{})
	if err != nil || !slices.Equal(rep.Released, []string{c}) || rep.Scanned != 3 {
		t.Fatalf("repair: %+v %v (a %s c %s d %s)", rep, err, a, c, d)
	}
	if got := e.redisAvailable(k); got != before+2 {
		t.Errorf("redis available %d, want %d", got, before+2)
	}
	// Once: the release marker holds.
	rep, err = pipeline.RepairLostReservations(ctx, e.rdb, e.store, pipeline.LostConfig{})
	if err != nil || len(rep.Released) != 0 {
		t.Fatalf("second repair: %+v %v", rep, err)
	}
	if got := e.redisAvailable(k); got != before+2 {
		t.Errorf("redis available %d after second repair", got)
	}
}

// TestRepairAdjustments: a stock repair committed in MySQL whose Redis half
// never ran is applied once by the sweeper's pass; one already applied is not.
func TestRepairAdjustments(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	p, k := e.product(10, 10)
	if _, err := e.store.AdjustStock(ctx, p.ID, "R-done", 2, ""); err != nil {
		t.Fatal(err)
	}
	if _, _, err := lua.Adjust(ctx, e.rdb, k, "R-done", 2, lua.AdjustMarkerTTL); err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.AdjustStock(ctx, p.ID, "R-half", 3, ""); err != nil { // Redis failed here
		t.Fatal(err)
	}
	for i, want := range [][]string{{"R-half"}, nil} {
		got, err := pipeline.RepairAdjustments(ctx, e.rdb, e.store)
		if err != nil || !slices.Equal(got, want) {
			t.Fatalf("pass %d: %v %v", i, got, err)
		}
	}
	if a := e.redisAvailable(k); a != 15 {
		t.Fatalf("redis available %d, want 15", a)
	}
	rep, err := pipeline.Reconcile(ctx, e.rdb, e.store, []int64{p.ID})
	if err != nil || !rep.OK {
		t.Fatalf("reconcile %v %v", rep.Failed(), err)
	}
}
