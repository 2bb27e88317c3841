package gateway

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

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

const reserveWorkers = 4 // pipelines in flight at once

type reserveJob struct {
	call lua.ReserveCall
	done chan struct{}
}

type reserveBatcher struct {
	s       *Server
	max     int
	jobs    chan *reserveJob
	stopped atomic.Pointer[chan struct{}] // closed while no worker runs
	pool    sync.Pool
}

func newReserveBatcher(s *Server, max int) *reserveBatcher {
	b := &reserveBatcher{s: s, max: max, jobs: make(chan *reserveJob, 4*max)}
	closed := make(chan struct{})
	close(closed)
	b.stopped.Store(&closed)
	b.pool.New = func() any { return &reserveJob{done: make(chan struct{}, 1)} }
	return b
}

// start runs the workers until ctx ends; the returned channel closes when
// they have stopped. Calls made while no worker runs go straight to Redis.
func (b *reserveBatcher) start(ctx context.Context) <-chan struct{} {
	stopped := make(chan struct{})
	b.stopped.Store(&stopped)
	var wg sync.WaitGroup
	for range reserveWorkers {
		wg.Go(func() { b.work(ctx) })
	}
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(stopped)
		// Calls queued as the workers stopped are answered directly.
		for {
			select {
			case j := <-b.jobs:
				b.runOne(j)
			default:
				close(done)
				return
			}
		}
	}()
	return done
}

// reserve queues one call and waits for its answer.
func (b *reserveBatcher) reserve(k lua.Keys, a lua.ReserveArgs) (lua.ReserveResult, error) {
	j := b.pool.Get().(*reserveJob)
	j.call = lua.ReserveCall{Keys: k, Args: a}
	select {
	case b.jobs <- j:
	case <-*b.stopped.Load():
		b.runOne(j)
	}
	<-j.done
	res, err := j.call.Result, j.call.Err
	j.call = lua.ReserveCall{}
	b.pool.Put(j)
	return res, err
}

func (b *reserveBatcher) runOne(j *reserveJob) {
	j.call.Err = b.s.redisCall(func(ctx context.Context) (err error) {
		j.call.Result, err = lua.Reserve(ctx, b.s.rdb, j.call.Keys, j.call.Args)
		return err
	})
	j.done <- struct{}{}
}

func (b *reserveBatcher) work(ctx context.Context) {
	batch := make([]*reserveJob, 0, b.max)
	calls := make([]lua.ReserveCall, 0, b.max)
	for {
		select {
		case <-ctx.Done():
			return
		case j := <-b.jobs:
			batch = append(batch[:0], j)
		}
	fill:
		for len(batch) < b.max {
			select {
			case j := <-b.jobs:
				batch = append(batch, j)
			default:
				break fill
			}
		}
		calls = calls[:0]
		for _, j := range batch {
			calls = append(calls, j.call)
		}
		start := time.Now()
		ran := false
		err := b.s.redisCall(func(ctx context.Context) error {
			ran = true
			lua.ReserveMany(ctx, b.s.rdb, calls)
			for i := range calls { // the breaker counts a failed round trip once
				if isRedisFailure(calls[i].Err) {
					return calls[i].Err
				}
			}
			return nil
		})
		d := time.Since(start).Seconds()
		for i, j := range batch {
			if ran {
				j.call.Result, j.call.Err = calls[i].Result, calls[i].Err
			} else {
				j.call.Err = err
			}
			b.s.metrics.lua.Observe(d)
			j.done <- struct{}{}
		}
	}
}
