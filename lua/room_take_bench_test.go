package lua_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-sh/stampede/lua"
	"github.com/stampede-sh/stampede/lua/luatest"
)

// BenchmarkRoomTake gives new tickets of a fifo room after its opening in
// batches of 1, 16 and 64 (the gateway's take pipeline runs about 15), on a
// private Redis so that its INFO commandstats count this benchmark alone,
// from 8 goroutines at once so that Redis is kept busy as a gateway keeps it
// (one client waiting for each answer leaves Redis idle between calls, and
// a call on a just-woken Redis measured several times slower).
// Reported: redis-µs/ticket, the time Redis spent in room_take.lua (its
// own measure, EVALSHA's usec, the inner commands included) per ticket,
// and the inner commands' share of it; ns/op is the client's wall time per
// ticket.
//
//	go test -run '^$' -bench RoomTake ./lua/
func BenchmarkRoomTake(b *testing.B) {
	for _, size := range []int{1, 16, 64} {
		b.Run(fmt.Sprintf("batch=%d", size), func(b *testing.B) {
			rdb := luatest.Private(b)
			ctx := context.Background()
			pid := int64(1)
			s := open(1_000_000_000)
			s.SaleStart = time.Now().Add(-time.Minute)
			roomWith(b, rdb, pid, s, lua.RoomSettings{On: true, Window: time.Minute})
			openRoom(b, rdb, pid, lua.ModeFIFO)
			// A line of 100,000 first: a sale's line is long, and its zset and
			// hash cost more per insert than small ones.
			var user atomic.Int64
			batch := func(n int) {
				calls := make([]lua.TakeCall, n)
				for i := range calls {
					u := user.Add(1)
					calls[i] = lua.TakeCall{ProductID: pid, Args: lua.TakeArgs{UserID: u, TicketID: fmt.Sprintf("%016x", u)}}
				}
				lua.TakeMany(ctx, rdb, calls)
				for _, c := range calls {
					if c.Err != nil || c.Place.State != lua.PlaceWaiting {
						b.Errorf("take of user %d: %+v %v", c.Args.UserID, c.Place, c.Err)
					}
				}
			}
			for user.Load() < 100_000 {
				batch(64)
			}
			if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
				b.Fatal(err)
			}
			var left atomic.Int64
			left.Store(int64(b.N))
			b.SetParallelism(4)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() { // the batches share b.N out; pb's own count is not used
					if n := min(int64(size), left.Add(-int64(size))+int64(size)); n > 0 {
						batch(int(n))
					}
				}
			})
			b.StopTimer()
			total, inner := scriptUsec(b, rdb)
			b.ReportMetric(total/float64(b.N), "redis-µs/ticket")
			if total > 0 {
				b.ReportMetric(100*inner/total, "inner-%")
			}
		})
	}
}

// scriptUsec reads INFO commandstats: the usec of EVALSHA and EVAL, and of
// every other command but CONFIG (which, run from a script, count inside
// the script's).
func scriptUsec(b *testing.B, rdb *redis.Client) (scripts, inner float64) {
	b.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		var usec float64
		for _, f := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(f, "usec="); ok {
				usec, _ = strconv.ParseFloat(v, 64)
			}
		}
		switch strings.TrimPrefix(name, "cmdstat_") {
		case "evalsha", "eval":
			scripts += usec
		case "config", "info":
		default:
			inner += usec
		}
	}
	return scripts, inner
}
