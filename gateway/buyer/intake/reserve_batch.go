package intake

import (
	"context"
	"time"

	"github.com/stampede-sh/stampede/gateway/rediscall"
	"github.com/stampede-sh/stampede/lua"
)

// Fewer round trips (Config.ReservePipeline): reserve calls of concurrent
// requests are sent to Redis in pipelines by a few workers. A worker takes
// one waiting call, adds whatever else is already waiting (up to
// ReservePipeline calls, never waiting for more) and runs them with
// lua.ReserveMany: one write and one read instead of one round trip each,
// for the gateway and for Redis. Each script call stays atomic; only the
// network exchange is shared. Off (0) by default: see bench/README.md for
// whether it pays on a given machine.

// reserveBatcher pipelines reserve calls (pipeBatcher).
type reserveBatcher struct {
	*rediscall.PipeBatcher[lua.ReserveCall]
}

func newReserveBatcher(s *Intake, max int) *reserveBatcher {
	one := func(c *lua.ReserveCall) {
		c.Err = s.redisCall(func(ctx context.Context) (err error) {
			c.Result, err = lua.Reserve(ctx, s.rdb, c.Keys, c.Args)
			return err
		})
	}
	bufs := make(chan []lua.ReserveCall, rediscall.PipeWorkers) // one buffer per worker in flight
	for range rediscall.PipeWorkers {
		bufs <- make([]lua.ReserveCall, 0, max)
	}
	many := func(cs []*lua.ReserveCall) {
		calls := (<-bufs)[:0]
		for _, c := range cs {
			calls = append(calls, *c)
		}
		start := time.Now()
		ran := false
		err := s.redisCall(func(ctx context.Context) error {
			ran = true
			lua.ReserveMany(ctx, s.rdb, calls)
			for i := range calls { // the breaker counts a failed round trip once
				if rediscall.IsFailure(calls[i].Err) {
					return calls[i].Err
				}
			}
			return nil
		})
		d := time.Since(start).Seconds()
		for i, c := range cs {
			if ran {
				c.Result, c.Err = calls[i].Result, calls[i].Err
			} else {
				c.Err = err
			}
			s.metrics.LuaCall(d)
		}
		clear(calls)
		bufs <- calls
	}
	return &reserveBatcher{rediscall.NewPipeBatcher(max, one, many)}
}

// reserve queues one call and waits for its answer.
func (b *reserveBatcher) reserve(k lua.Keys, a lua.ReserveArgs) (lua.ReserveResult, error) {
	c := b.Do(lua.ReserveCall{Keys: k, Args: a})
	return c.Result, c.Err
}
