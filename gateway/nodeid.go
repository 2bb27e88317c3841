package gateway

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-sh/stampede/lua"
	"github.com/stampede-sh/stampede/order"
)

// ErrNoFreeNode is returned by LeaseNode when all 1024 node ids are leased.
var ErrNoFreeNode = errors.New("gateway: all 1024 orderNo node ids are leased")

// NodeLease is an orderNo node id (0…1023) leased from Redis, so that any
// number of gateways started without a configured node id (NodeID -1, the
// default of `stampede serve`) do not share one while they live — the
// precondition of order.NoGenerator's uniqueness. It relies on Redis keeping
// its writes (as Stampede's stock does): a Redis that restarts empty, or a
// failover that loses the last writes, can hand a live gateway's id to a new
// one until the live one's next renewal finds it taken (at most TTL/3). The lease is the key
// lua.NodeKey(id) holding a per-process owner string with a TTL; the holder
// renews it every TTL/3 (Renew). The idea is the worker-id lease of
// Snowflake-style generators that register their worker id in a shared store
// (Baidu uid-generator, Meituan Leaf).
//
// The holder must stop using the id once ValidUntil has passed without a
// renewal: Redis may have let the key expire and another gateway may have
// taken the id. A Renew that finds the id taken leases another one.
type NodeLease struct {
	rdb   redis.UniversalClient
	owner string
	ttl   time.Duration
	node  atomic.Int64
	until atomic.Int64 // unix ns after which the lease must not be trusted
}

// LeaseNode leases a free node id, probing the 1024 ids from a random one.
// owner identifies the process ("<host>-<pid>-<random>" if empty); ttl is the
// lease's life without renewal (at least 3s). Errors: ErrNoFreeNode, or
// Redis's.
func LeaseNode(ctx context.Context, rdb redis.UniversalClient, owner string, ttl time.Duration) (*NodeLease, error) {
	if ttl < 3*time.Second {
		return nil, fmt.Errorf("gateway: node lease ttl %v is below 3s", ttl)
	}
	if owner == "" {
		host, _ := os.Hostname()
		owner = host + "-" + strconv.Itoa(os.Getpid()) + "-" + strconv.FormatUint(rand.Uint64()&0xffffff, 16)
	}
	l := &NodeLease{rdb: rdb, owner: owner, ttl: ttl}
	until, err := l.acquire(ctx)
	if err != nil {
		return nil, err
	}
	l.until.Store(until)
	return l, nil
}

// acquire takes the first free id from a random start and returns the trust
// deadline of the new lease, which the caller stores once it switched to it.
func (l *NodeLease) acquire(ctx context.Context) (int64, error) {
	start := rand.Int64N(1024)
	for i := range int64(1024) {
		id := (start + i) % 1024
		t0 := time.Now()
		ok, err := lua.LeaseNode(ctx, l.rdb, id, l.owner, l.ttl)
		if err != nil {
			return 0, fmt.Errorf("gateway: lease node id: %w", err)
		}
		if ok {
			l.node.Store(id)
			return l.deadline(t0), nil
		}
	}
	return 0, ErrNoFreeNode
}

// deadline is when a lease written at t0 stops being trusted: a sixth of the
// TTL before Redis would expire it, for clock drift and slow round trips.
func (l *NodeLease) deadline(t0 time.Time) int64 {
	return t0.Add(l.ttl - l.ttl/6).UnixNano()
}

// Node is the leased node id.
func (l *NodeLease) Node() int64 { return l.node.Load() }

// Owner is the string stored under the lease's key.
func (l *NodeLease) Owner() string { return l.owner }

// TTL is the lease's life without renewal.
func (l *NodeLease) TTL() time.Duration { return l.ttl }

// Valid reports whether now is before the lease's trust deadline.
func (l *NodeLease) Valid(now time.Time) bool { return now.UnixNano() < l.until.Load() }

// Renew extends the lease. If another owner holds the id (the lease expired
// while Redis was unreachable and someone took it), it leases a new id, calls
// switchTo(new id) (may be nil) before the lease is trusted again, and
// reports changed = true. On a Redis error nothing changes and the lease
// stays trusted only until its deadline.
func (l *NodeLease) Renew(ctx context.Context, switchTo func(node int64)) (changed bool, err error) {
	t0 := time.Now()
	held, err := lua.RenewNode(ctx, l.rdb, l.Node(), l.owner, l.ttl)
	if err != nil {
		return false, fmt.Errorf("gateway: renew node lease: %w", err)
	}
	if held {
		l.until.Store(l.deadline(t0))
		return false, nil
	}
	l.until.Store(0) // the id is someone else's from now on
	until, err := l.acquire(ctx)
	if err != nil {
		return false, err
	}
	if switchTo != nil {
		switchTo(l.Node())
	}
	l.until.Store(until)
	return true, nil
}

// Release gives the id back if this lease still holds it.
func (l *NodeLease) Release(ctx context.Context) error {
	l.until.Store(0)
	if err := lua.ReleaseNode(ctx, l.rdb, l.Node(), l.owner); err != nil {
		return fmt.Errorf("gateway: release node lease: %w", err)
	}
	return nil
}

// keepNode leases a node id for a gateway with NodeID -1 and renews it every
// TTL/3 until ctx ends, then releases it. While no lease is valid, orders
// answer 503 (nodeValid). Redis errors are retried every second.
func (s *Server) keepNode(ctx context.Context, gen *order.NoGenerator) {
	var lease *NodeLease
	defer func() {
		if lease != nil {
			rctx, cancel := context.WithTimeout(context.Background(), time.Second)
			if err := lease.Release(rctx); err != nil {
				s.log.Warn("node lease not released; it expires by itself", "node", lease.Node(), "err", err)
			}
			cancel()
		}
	}()
	wait := time.Duration(0)
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		var err error
		if lease == nil {
			lease, err = LeaseNode(cctx, s.rdb, "", s.cfg.NodeLeaseTTL)
			if err == nil {
				_ = gen.SetNode(lease.Node()) // a leased id is 0…1023: in range
				s.lease.Store(lease)
				s.log.Info("orderNo node id leased", "node", lease.Node(), "owner", lease.Owner(), "ttl", lease.TTL().String())
			}
		} else {
			var changed bool
			changed, err = lease.Renew(cctx, func(node int64) { _ = gen.SetNode(node) })
			if changed {
				s.log.Warn("orderNo node id was taken by another gateway while its lease was not renewed; leased a new one", "node", lease.Node())
			}
		}
		cancel()
		wait = s.cfg.NodeLeaseTTL / 3
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			s.log.Warn("orderNo node lease", "err", err)
			wait = time.Second
		}
	}
}

// nodeValid reports whether new orderNos may be issued now.
func (s *Server) nodeValid(now time.Time) bool {
	if s.cfg.NodeID >= 0 {
		return true
	}
	l := s.lease.Load()
	return l != nil && l.Valid(now)
}
