package gateway

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// Request-record lookups in pipelines (Config.LookupPipeline, issue 19). A
// sold-out cache hit still reads the (user, product, requestId) record, so
// that a replay of an intent accepted on any gateway gets its orderNo; in a
// storm those GETs were one round trip each, about half of the gateway's CPU
// in system calls. Here the GETs of concurrent requests share round trips: a
// worker takes one waiting lookup, adds whatever else is already waiting (up
// to LookupPipeline, never waiting for more: a lone request goes out at
// once) and sends them as one pipeline. Redis answers each GET as before;
// only the network exchange is shared, so the answer is the same as one GET
// would give.

const lookupWorkers = 4 // pipelines in flight at once

type lookupJob struct {
	key  string
	val  string
	err  error
	done chan struct{}
}

type lookupBatcher struct {
	s       *Server
	max     int
	jobs    chan *lookupJob
	stopped atomic.Pointer[chan struct{}] // closed while no worker runs
	pool    sync.Pool
}

func newLookupBatcher(s *Server, max int) *lookupBatcher {
	b := &lookupBatcher{s: s, max: max, jobs: make(chan *lookupJob, 4*max)}
	closed := make(chan struct{})
	close(closed)
	b.stopped.Store(&closed)
	b.pool.New = func() any { return &lookupJob{done: make(chan struct{}, 1)} }
	return b
}

// start runs the workers until ctx ends; the returned channel closes when
// they have stopped. Lookups made while no worker runs go straight to Redis.
func (b *lookupBatcher) start(ctx context.Context) <-chan struct{} {
	stopped := make(chan struct{})
	b.stopped.Store(&stopped)
	var wg sync.WaitGroup
	for range lookupWorkers {
		wg.Go(func() { b.work(ctx) })
	}
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(stopped)
		for { // lookups queued as the workers stopped are answered directly
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

// get is GET key: the value, or redis.Nil.
func (b *lookupBatcher) get(key string) (string, error) {
	j := b.pool.Get().(*lookupJob)
	j.key = key
	select {
	case b.jobs <- j:
	case <-*b.stopped.Load():
		b.runOne(j)
	}
	<-j.done
	val, err := j.val, j.err
	*j = lookupJob{done: j.done}
	b.pool.Put(j)
	return val, err
}

func (b *lookupBatcher) runOne(j *lookupJob) {
	j.err = b.s.redisCall(func(ctx context.Context) (err error) {
		j.val, err = b.s.rdb.Get(ctx, j.key).Result()
		return err
	})
	j.done <- struct{}{}
}

// mgetOne is the answer of MGET key as GET would give it.
func mgetOne(cmd *redis.SliceCmd) (string, error) {
	vals, err := cmd.Result()
	switch {
	case err != nil:
		return "", err
	case len(vals) != 1:
		return "", errors.New("gateway: MGET of one key answered " + strconv.Itoa(len(vals)) + " values")
	}
	v, ok := vals[0].(string)
	if !ok {
		return "", redis.Nil
	}
	return v, nil
}

func (b *lookupBatcher) work(ctx context.Context) {
	batch := make([]*lookupJob, 0, b.max)
	cmds := make([]*redis.SliceCmd, 0, b.max)
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
		cmds = cmds[:0]
		err := b.s.redisCall(func(ctx context.Context) error {
			pipe := b.s.rdb.Pipeline()
			for _, j := range batch {
				// MGET of one key: an absent record is a nil element, not
				// a redis.Nil error (whose handling in go-redis allocates).
				cmds = append(cmds, pipe.MGet(ctx, j.key))
			}
			_, err := pipe.Exec(ctx) // the first failed command's error
			return err
		})
		for i, j := range batch {
			if i < len(cmds) {
				j.val, j.err = mgetOne(cmds[i])
			} else { // the breaker refused: nothing was sent
				j.err = err
			}
			j.done <- struct{}{}
		}
		clear(batch)
		clear(cmds)
	}
}
