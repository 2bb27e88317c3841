package gateway

import (
	"context"
	"sync"
	"time"

	"github.com/stampede-sh/stampede/gateway/httpapi"
	"github.com/stampede-sh/stampede/lua"
	"github.com/stampede-sh/stampede/persistence"
)

// Hot-SKU sharding (lua/shards.go holds the model: home shards, transfers,
// pull-and-retry). The gateway keeps the routing — each product's shard
// count, cached — and runs lua.Sharded with its own timeout, circuit breaker,
// reserve batcher and metrics around every Redis call (newSharded).

// routeCache keeps each product's shard count: it never changes.
type routeCache struct {
	m sync.Map // int64 → int
}

// productMissRefresh bounds how often an unknown productId makes the gateway
// re-read the product table.
const productMissRefresh = 100 * time.Millisecond

// shardCount returns productID's number of stock shards, or
// errProductNotFound. The answer must be exact: a wrong count would send a
// replay to another shard than its first request. It asks Redis first (one
// pipelined round trip, once per product and gateway), so the order path
// works while MySQL is down: a product is in the stampede:products set only
// after every shard was loaded, and its shards are the stock hashes 0, 1, …
// that exist. A product not registered there is looked up in MySQL.
func (s *Server) shardCount(productID int64) (int, error) {
	if v, ok := s.routing.m.Load(productID); ok {
		return v.(int), nil
	}
	n, err := s.shardCountRedis(productID)
	if err != nil {
		return 0, err
	}
	if n == 0 {
		if n, err = s.shardCountMySQL(productID); err != nil {
			return 0, err
		}
	}
	s.routing.m.Store(productID, n)
	s.metrics.productSeen(productID)
	return n, nil
}

// shardCountRedis is 0 when the product is not registered in Redis.
func (s *Server) shardCountRedis(productID int64) (n int, err error) {
	err = s.redisCall(func(ctx context.Context) (err error) {
		n, err = lua.ShardCount(ctx, s.rdb, productID)
		return err
	})
	return n, err
}

func (s *Server) shardCountMySQL(productID int64) (int, error) {
	p, err := s.productRow(productID)
	if err != nil {
		return 0, err
	}
	return max(p.Shards, 1), nil
}

// productRow is productID's row from the product cache, re-reading MySQL
// (at most once per productMissRefresh) for a product created since.
func (s *Server) productRow(productID int64) (persistence.Product, error) {
	snap, err := s.products.Get(s.cfg.StoreTimeout)
	if err != nil {
		return persistence.Product{}, err
	}
	i, ok := snap.ByID[productID]
	if !ok {
		if snap, err = s.products.RefreshOlderThan(productMissRefresh, s.cfg.StoreTimeout); err != nil {
			return persistence.Product{}, err
		}
		if i, ok = snap.ByID[productID]; !ok {
			return persistence.Product{}, httpapi.ErrProductNotFound
		}
	}
	return snap.List[i], nil
}

// Pull policy of a sharded product whose home shard is short.
const (
	// minPull is the least number of units pulled from a donor shard at
	// once, so that a dry home shard does not pay a transfer per order at
	// the end of a sale.
	minPull = 8
	// maxPulls bounds the pull-and-retry rounds of one request; other
	// buyers may take pulled units before this request's retry.
	maxPulls = 8
)

// newSharded is the gateway's lua.Sharded: every Redis call under
// redisCall, reservations through reserveOnce, transfer ids from the orderNo
// generator, the gateway's pull policy.
func (s *Server) newSharded() *lua.Sharded {
	return &lua.Sharded{RDB: s.rdb, MarkerTTL: s.cfg.RequestTTL, Do: s.redisCall, ReserveShard: s.reserveOnce, TransferID: s.gen.Next,
		MinPull: minPull, MaxPulls: maxPulls}
}

// reserveOnce runs reserve.lua on one shard: through the reserve batcher
// when there is one, else alone, timed in stampede_lua_call_duration_seconds.
func (s *Server) reserveOnce(k lua.Keys, args lua.ReserveArgs) (res lua.ReserveResult, err error) {
	if s.batcher != nil {
		return s.batcher.reserve(k, args)
	}
	err = s.redisCall(func(rctx context.Context) (err error) {
		start := time.Now()
		res, err = lua.Reserve(rctx, s.rdb, k, args)
		s.metrics.lua.Observe(time.Since(start).Seconds())
		return err
	})
	return res, err
}
