package intake

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-sh/stampede/gateway/rediscall"
	"github.com/stampede-sh/stampede/lua"
)

// The replicated durability of the order path (the gateway's
// Config.Durability "replicated": DurabilityReplicated).

// durableWaiter runs the WAIT of DurabilityReplicated. WAIT covers the writes
// of the connection it runs on, and the reserve scripts ran on other pooled
// connections; so each WAIT goes in one pipeline after a small write of its
// own (SET of the shard's wait key, lua.Keys.Wait) on the master that ran the
// scripts: that write's replication offset is past every write the master
// had answered before, so the WAIT that follows covers all of them. One
// pipeBatcher per master shares that pair among every request waiting at
// the same moment: one round trip and one WAIT per batch, not per request.
type durableWaiter struct {
	s       *Intake
	acks    int
	timeout time.Duration

	mu    sync.Mutex
	ctx   context.Context // the workers' context once started; nil before
	nodes map[string]*rediscall.PipeBatcher[waitCall]
	done  []<-chan struct{}
}

// waitCall is one request's wait: key routes it to its master.
type waitCall struct {
	key string
	err error
}

func newDurableWaiter(s *Intake, acks int, timeout time.Duration) *durableWaiter {
	return &durableWaiter{s: s, acks: acks, timeout: timeout, nodes: map[string]*rediscall.PipeBatcher[waitCall]{}}
}

// start runs the batchers' workers (those made later too) until ctx ends;
// the channel closes once they stopped.
func (w *durableWaiter) start(ctx context.Context) <-chan struct{} {
	w.mu.Lock()
	w.ctx = ctx
	for _, b := range w.nodes {
		w.done = append(w.done, b.Start(ctx))
	}
	w.mu.Unlock()
	out := make(chan struct{})
	go func() {
		<-ctx.Done()
		w.mu.Lock()
		done := w.done
		w.mu.Unlock()
		for _, d := range done {
			<-d
		}
		close(out)
	}()
	return out
}

// wait returns once the writes answered so far by the master of k's shard
// are on ReplicaAcks replicas: nil, lua.ErrNotReplicated, or the Redis error.
func (w *durableWaiter) wait(k lua.Keys) error {
	key := k.Wait()
	node, name, err := w.master(key)
	if err != nil {
		return err
	}
	b := w.batcher(name, node)
	start := time.Now()
	c := b.Do(waitCall{key: key})
	w.s.metrics.ReplicaWait(c.err, time.Since(start))
	return c.err
}

// master is the client of the master that owns key, and its name: the
// cluster node's address, or "" for a single client (a Sentinel failover
// client follows the current primary itself).
func (w *durableWaiter) master(key string) (*redis.Client, string, error) {
	switch c := w.s.rdb.(type) {
	case *redis.ClusterClient:
		var node *redis.Client
		err := w.s.redisCall(func(ctx context.Context) (err error) {
			node, err = c.MasterForKey(ctx, key)
			return err
		})
		if err != nil {
			return nil, "", err
		}
		return node, node.Options().Addr, nil
	case *redis.Client:
		return c, "", nil
	}
	return nil, "", fmt.Errorf("gateway: redis durability replicated needs a *redis.Client or *redis.ClusterClient, not %T", w.s.rdb)
}

func (w *durableWaiter) batcher(name string, node *redis.Client) *rediscall.PipeBatcher[waitCall] {
	w.mu.Lock()
	defer w.mu.Unlock()
	if b := w.nodes[name]; b != nil {
		return b
	}
	run := func(cs []*waitCall) {
		err := w.run(node, cs[0].key)
		for _, c := range cs {
			c.err = err
		}
	}
	b := rediscall.NewPipeBatcher(64, func(c *waitCall) { run([]*waitCall{c}) }, run)
	w.nodes[name] = b
	if w.ctx != nil {
		w.done = append(w.done, b.Start(w.ctx))
	}
	return b
}

// run is one shared SET + WAIT on node (lua.WaitOn).
func (w *durableWaiter) run(node *redis.Client, key string) error {
	err := w.s.redisCall(func(ctx context.Context) error {
		return lua.WaitOn(ctx, node, key, w.acks, w.timeout)
	})
	if err != nil && !errors.Is(err, lua.ErrNotReplicated) {
		// The slot moved, the master failed over or died: the cluster
		// client rereads its slot map (lazily) before the next batch.
		if c, ok := w.s.rdb.(*redis.ClusterClient); ok {
			c.ReloadState(context.Background())
		}
	}
	return err
}
