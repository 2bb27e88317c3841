package intake

import (
	"context"
	"sync"
	"time"

	"github.com/stampede-sh/stampede/lua"
)

// Hot-SKU sharding (lua/shards.go holds the model: home shards, transfers,
// pull-and-retry). The gateway keeps the routing — each product's shard
// count, cached — and runs lua.Sharded with its own timeout, circuit breaker,
// reserve batcher and metrics around every Redis call (newSharded).

// routeCache keeps each product's shard count: it never changes.
type routeCache struct {
	m sync.Map // int64 → int
}

// ShardCount returns productID's number of stock shards, or
// errProductNotFound. The answer must be exact: a wrong count would send a
// replay to another shard than its first request. It asks Redis first (one
// pipelined round trip, once per product and gateway), so the order path
// works while MySQL is down: a product is in the stampede:products set only
// after every shard was loaded, and its shards are the stock hashes 0, 1, …
// that exist. A product not registered there is looked up in MySQL.
func (s *Intake) ShardCount(productID int64) (int, error) {
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
	s.metrics.ProductSeen(productID)
	return n, nil
}

// shardCountRedis is 0 when the product is not registered in Redis.
func (s *Intake) shardCountRedis(productID int64) (n int, err error) {
	err = s.redisCall(func(ctx context.Context) (err error) {
		n, err = lua.ShardCount(ctx, s.rdb, productID)
		return err
	})
	return n, err
}

// shardCountMySQL is the shard count of a product Redis does not list,
// from the product table (Deps.ProductShards, behind the product cache).
func (s *Intake) shardCountMySQL(productID int64) (int, error) { return s.productShards(productID) }

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
func (s *Intake) newSharded() *lua.Sharded {
	return &lua.Sharded{RDB: s.rdb, MarkerTTL: s.cfg.RequestTTL, Do: s.redisCall, ReserveShard: s.reserveOnce, TransferID: s.gen.Next,
		MinPull: minPull, MaxPulls: maxPulls}
}

// reserveOnce runs reserve.lua on one shard: through the reserve batcher
// when there is one, else alone, timed in stampede_lua_call_duration_seconds.
func (s *Intake) reserveOnce(k lua.Keys, args lua.ReserveArgs) (res lua.ReserveResult, err error) {
	if s.batcher != nil {
		return s.batcher.reserve(k, args)
	}
	err = s.redisCall(func(rctx context.Context) (err error) {
		start := time.Now()
		res, err = lua.Reserve(rctx, s.rdb, k, args)
		s.metrics.LuaCall(time.Since(start).Seconds())
		return err
	})
	return res, err
}
