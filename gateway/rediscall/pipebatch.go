package rediscall

import (
	"context"
	"sync"
	"sync/atomic"
)

// PipeBatcher sends the Redis calls of concurrent requests in shared
// pipelines (the reserve calls of Config.ReservePipeline, the request-record
// lookups of Config.LookupPipeline). A few workers each take one waiting call,
// add whatever else is already waiting (up to max, never waiting for more: a
// lone request goes out at once) and run them with many, one network exchange
// for all; each call's answer is what it would have been alone. Calls made
// while no worker runs (before start, after the workers stopped) run alone,
// with one.
type PipeBatcher[C any] struct {
	max     int
	Workers int // pipelines in flight at once (set before Start)
	jobs    chan *pipeJob[C]
	stopped atomic.Pointer[chan struct{}] // closed while no worker runs
	pool    sync.Pool
	one     func(c *C)    // runs one call alone, filling in its answer
	many    func(cs []*C) // runs calls as one pipeline, filling in each answer
}

// PipeWorkers is the number of pipelines in flight at once, unless a
// batcher sets its own.
const PipeWorkers = 4

type pipeJob[C any] struct {
	call C
	done chan struct{}
}

func NewPipeBatcher[C any](max int, one func(*C), many func([]*C)) *PipeBatcher[C] {
	b := &PipeBatcher[C]{max: max, Workers: PipeWorkers, jobs: make(chan *pipeJob[C], 4*max), one: one, many: many}
	closed := make(chan struct{})
	close(closed)
	b.stopped.Store(&closed)
	b.pool.New = func() any { return &pipeJob[C]{done: make(chan struct{}, 1)} }
	return b
}

// Start runs the workers until ctx ends; the returned channel closes when
// they have stopped and the calls queued meanwhile were answered.
func (b *PipeBatcher[C]) Start(ctx context.Context) <-chan struct{} {
	stopped := make(chan struct{})
	b.stopped.Store(&stopped)
	var wg sync.WaitGroup
	for range b.Workers {
		wg.Go(func() { b.work(ctx) })
	}
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(stopped)
		for { // calls queued as the workers stopped are answered directly
			select {
			case j := <-b.jobs:
				b.one(&j.call)
				j.done <- struct{}{}
			default:
				close(done)
				return
			}
		}
	}()
	return done
}

// Do queues call, waits for its answer and returns the call with it.
func (b *PipeBatcher[C]) Do(call C) C {
	j := b.pool.Get().(*pipeJob[C])
	j.call = call
	select {
	case b.jobs <- j:
	case <-*b.stopped.Load():
		b.one(&j.call)
		j.done <- struct{}{}
	}
	<-j.done
	out := j.call
	var zero C
	j.call = zero
	b.pool.Put(j)
	return out
}

func (b *PipeBatcher[C]) work(ctx context.Context) {
	batch := make([]*pipeJob[C], 0, b.max)
	calls := make([]*C, 0, b.max)
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
			calls = append(calls, &j.call)
		}
		b.many(calls)
		for _, j := range batch {
			j.done <- struct{}{}
		}
		clear(batch)
		clear(calls)
	}
}
