package gateway

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-sh/stampede/lua"
	"github.com/stampede-sh/stampede/persistence"
)

// Hot-SKU sharding. A product created with shards: N has N stock hashes, each
// under its own hash tag. Every user has a home shard, hash(userId) mod N:
// the user's idempotency records, per-user counter and orders all live there,
// so any replay of (user, requestId) meets its record whatever gateway it
// reaches. When the home shard cannot serve a request, the gateway moves
// units into it from the other shards (lua.Move: a two-step transfer that
// neither loses nor doubles units across a crash) and reserves again. The
// product is sold out only when every shard is dry and no transfer is in
// flight (lua.RepairTransfers completes those first).

// minPull is the least number of units pulled from a donor shard at once, so
// that a dry home shard does not pay a transfer per order at the end of a sale.
const minPull = 8

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
func (s *Server) shardCountRedis(productID int64) (int, error) {
	var member *redis.BoolCmd
	var exists [maxShards]*redis.IntCmd
	err := s.redisCall(func(ctx context.Context) error {
		pipe := s.rdb.Pipeline()
		member = pipe.SIsMember(ctx, lua.ProductsKey, strconv.FormatInt(productID, 10))
		for sh := range exists {
			exists[sh] = pipe.Exists(ctx, lua.ShardKeys(productID, sh).Stock())
		}
		_, err := pipe.Exec(ctx)
		return err
	})
	if err != nil {
		return 0, err
	}
	if !member.Val() {
		return 0, nil
	}
	n := 0
	for n < maxShards && exists[n].Val() == 1 {
		n++
	}
	return n, nil
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
	snap, err := s.products.get(s.cfg.StoreTimeout)
	if err != nil {
		return persistence.Product{}, err
	}
	i, ok := snap.byID[productID]
	if !ok {
		if snap, err = s.products.refreshOlderThan(productMissRefresh, s.cfg.StoreTimeout); err != nil {
			return persistence.Product{}, err
		}
		if i, ok = snap.byID[productID]; !ok {
			return persistence.Product{}, errProductNotFound
		}
	}
	return snap.list[i], nil
}

// refreshOlderThan re-reads MySQL unless the snapshot is younger than minAge.
func (c *productCache) refreshOlderThan(minAge, timeout time.Duration) (*productSnapshot, error) {
	c.mu.Lock()
	if sn := c.snap.Load(); sn != nil && time.Since(sn.at) < minAge {
		c.mu.Unlock()
		return sn, nil
	}
	c.snap.Store(nil)
	c.mu.Unlock()
	return c.get(timeout)
}

// homeShard is userID's shard of a product with n shards (splitmix64 of the
// id, so consecutive ids spread evenly).
func homeShard(userID int64, n int) int {
	if n <= 1 {
		return 0
	}
	z := uint64(userID) + 0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	z ^= z >> 31
	return int(z % uint64(n))
}

// maxPulls bounds the pull-and-retry rounds of one request; other buyers
// may take pulled units before this request's retry.
const maxPulls = 8

// reserve runs reserve.lua on the home shard; for a sharded product whose
// home shard is short it pulls units from the other shards and tries again.
// dry reports that the answer (SOLD_OUT) is final: every shard was found
// empty with no transfer in flight, so the sold-out cache may learn it.
func (s *Server) reserve(productID int64, shards, home int, args lua.ReserveArgs) (res lua.ReserveResult, dry bool, err error) {
	res, err = s.reserveOnce(productID, home, args)
	if shards <= 1 {
		return res, errors.Is(err, lua.ErrSoldOut), err
	}
	for range maxPulls {
		if !short(err) {
			return res, false, err
		}
		moved, perr := s.pullStock(productID, shards, home, args.Quantity-res.Available)
		if perr != nil {
			return res, false, perr
		}
		if moved == 0 {
			// Every other shard is dry. Units of a transfer whose mover died
			// between its two steps are counted nowhere: complete those
			// before calling the product sold out.
			var repaired int
			perr = s.redisCall(func(ctx context.Context) (err error) {
				repaired, err = lua.RepairTransfers(ctx, s.rdb, productID, shards, s.cfg.RequestTTL)
				return err
			})
			if perr != nil {
				return res, false, perr
			}
			if repaired == 0 {
				// The donors were read one after another: a transfer by
				// another buyer may have moved units into a shard this
				// request had already found dry. Call the product sold out
				// only if one look at every shard finds nothing left.
				var left int64
				perr = s.redisCall(func(ctx context.Context) (err error) {
					// Twice: one look reads the shards in no fixed order
					// (one pipeline per node, nodes in parallel), so a
					// transfer completing during it can be missed on both
					// ends — in the receiver read before its units came,
					// in the donor read after its record went. Its units
					// are in the receiver when the second look starts.
					for look := 0; look < 2 && left == 0 && err == nil; look++ {
						left, err = unitsLeft(ctx, s.rdb, productID, shards)
					}
					return err
				})
				if perr != nil {
					return res, false, perr
				}
				if left == 0 {
					return res, errors.Is(err, lua.ErrSoldOut), err
				}
			}
		}
		res, err = s.reserveOnce(productID, home, args)
	}
	return res, false, err
}

// unitsLeft is the units available in every shard of productID plus the
// transfers still in flight (each counts as one: its units are on their way
// to a shard), read in one pipelined round trip per Redis node. It is not
// a snapshot: the reads of different shards are not atomic together.
func unitsLeft(ctx context.Context, rdb redis.UniversalClient, productID int64, shards int) (int64, error) {
	pipe := rdb.Pipeline()
	avail := make([]*redis.StringCmd, shards)
	xfers := make([]*redis.IntCmd, shards)
	for sh := range shards {
		k := lua.ShardKeys(productID, sh)
		avail[sh] = pipe.HGet(ctx, k.Stock(), "available")
		xfers[sh] = pipe.HLen(ctx, k.Transfers())
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return 0, err
	}
	var left int64
	for sh := range shards {
		n, err := avail[sh].Int64()
		if err != nil && !errors.Is(err, redis.Nil) {
			// Not an integer: the shard's data, not Redis, is at fault.
			return 0, &lua.CorruptError{Key: lua.ShardKeys(productID, sh).Stock(), Detail: "available: " + err.Error()}
		}
		x, err := xfers[sh].Result()
		if err != nil {
			return 0, err
		}
		left += max(n, 0) + x
	}
	return left, nil
}

func short(err error) bool {
	return errors.Is(err, lua.ErrSoldOut) || errors.Is(err, lua.ErrInsufficient)
}

func (s *Server) reserveOnce(productID int64, shard int, args lua.ReserveArgs) (res lua.ReserveResult, err error) {
	if s.batcher != nil {
		return s.batcher.reserve(lua.ShardKeys(productID, shard), args)
	}
	err = s.redisCall(func(rctx context.Context) (err error) {
		start := time.Now()
		res, err = lua.Reserve(rctx, s.rdb, lua.ShardKeys(productID, shard), args)
		s.metrics.lua.Observe(time.Since(start).Seconds())
		return err
	})
	return res, err
}

// pullStock moves at least need units (minPull at least, when there are) from
// the other shards into home, trying donors home+1, home+2, … in turn. It
// returns the units moved; 0 means every other shard was dry.
func (s *Server) pullStock(productID int64, shards, home int, need int64) (int64, error) {
	need = max(need, 1)
	var total int64
	for i := 1; i < shards && total < need; i++ {
		donor := (home + i) % shards
		id := s.gen.Next(productID, home)
		var moved int64
		err := s.redisCall(func(ctx context.Context) (err error) {
			moved, err = lua.Move(ctx, s.rdb, productID, donor, home, id, max(need-total, minPull), s.cfg.RequestTTL)
			return err
		})
		if err != nil {
			return total, err
		}
		total += moved
	}
	return total, nil
}

// transferRepairEvery is the period of the background completion of
// transfers left half-done by a crashed gateway, for products nobody is
// buying any more (the order path repairs before calling a product sold out).
var transferRepairEvery = 5 * time.Second

// startTransferRepair runs RepairTransfers over every sharded product each
// transferRepairEvery until ctx ends; the channel closes when it stopped.
func (s *Server) startTransferRepair(ctx context.Context) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(transferRepairEvery)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			snap, err := s.products.get(s.cfg.StoreTimeout)
			if err != nil {
				continue
			}
			for _, p := range snap.list {
				if p.Shards <= 1 {
					continue
				}
				var n int
				err := s.redisCall(func(ctx context.Context) (err error) {
					n, err = lua.RepairTransfers(ctx, s.rdb, p.ID, p.Shards, s.cfg.RequestTTL)
					return err
				})
				if err != nil {
					s.log.Warn("transfer repair failed", "productId", p.ID, "err", err)
				} else if n > 0 {
					s.log.Info("completed stock transfers left half-done", "productId", p.ID, "transfers", n)
				}
			}
		}
	}()
	return done
}
