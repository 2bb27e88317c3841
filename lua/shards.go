package lua

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Hot-SKU sharding. A product created with shards: N has N stock hashes, each
// under its own hash tag. Every user has a home shard, HomeShard(userId, N):
// the user's idempotency records, per-user counter and orders all live there,
// so any replay of (user, requestId) meets its record whatever gateway it
// reaches. When the home shard cannot serve a request, units are moved into
// it from the other shards (Move: a two-step transfer that neither loses nor
// doubles units across a crash) and the reservation is tried again. The
// product is sold out only when every shard is dry and no transfer is in
// flight (RepairTransfers completes those first).

// MaxShards is the most stock shards a product may have (orderNos have room
// for 100).
const MaxShards = 16

// DefaultMinPull and DefaultMaxPulls are Sharded's MinPull and MaxPulls
// when they are 0.
const (
	DefaultMinPull  = 8
	DefaultMaxPulls = 8
)

// HomeShard is userID's shard of a product with n shards (splitmix64 of the
// id, so consecutive ids spread evenly).
func HomeShard(userID int64, n int) int {
	if n <= 1 {
		return 0
	}
	z := uint64(userID) + 0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	z ^= z >> 31
	return int(z % uint64(n))
}

// ShardShare is shard sh's part of total units split over n shards: even
// shares, the remainder going one unit each to the first shards.
func ShardShare(total int64, n, sh int) int64 {
	share := total / int64(n)
	if int64(sh) < total%int64(n) {
		share++
	}
	return share
}

// Product is what LoadProduct writes for a product: its stock split over
// Shards shards and the sale's terms, the same in every shard.
type Product struct {
	ID int64
	// Incarnation is the product's (persistence.Product.Incarnation): every
	// stock hash gets it, and one that carries another is never adopted.
	Incarnation string
	Total       int64
	// Available, when not nil, is the units left to sell, split over the
	// shards like Total (ReloadProduct); nil: Total (a new product).
	Available    *int64
	Shards       int
	Price        int64 // minor units
	PerUserLimit int64 // 0 = none
	MaxPerOrder  int64
	SaleStart    time.Time
	SaleEnd      time.Time
}

// Sharded runs the operations that span the shards of one product. Its hooks
// let the caller put its own timeout, circuit breaker, batching and
// instrumentation around each Redis call; set it up once and share it.
type Sharded struct {
	RDB redis.UniversalClient
	// MarkerTTL is the life of a transfer's marker at its receiver (the
	// gateway uses its RequestTTL).
	MarkerTTL time.Duration
	// Do runs one Redis operation; the caller bounds ctx and may refuse
	// (an open circuit breaker). Required.
	Do func(fn func(ctx context.Context) error) error
	// ReserveShard runs reserve.lua on one shard (Reserve through Do if
	// nil); the caller may batch the calls and time them.
	ReserveShard func(k Keys, a ReserveArgs) (ReserveResult, error)
	// TransferID returns a new unique transfer id for a pull into shard home
	// of productID. Required for Reserve of a product with shards > 1.
	TransferID func(productID int64, home int) string
	// MinPull is the least number of units pulled from a donor shard at
	// once, so that a dry home shard does not pay a transfer per order at
	// the end of a sale. Default DefaultMinPull.
	MinPull int64
	// MaxPulls bounds the pull-and-retry rounds of one reservation; other
	// buyers may take pulled units before its retry. Default
	// DefaultMaxPulls.
	MaxPulls int
}

func (s *Sharded) reserveShard(k Keys, a ReserveArgs) (res ReserveResult, err error) {
	if s.ReserveShard != nil {
		return s.ReserveShard(k, a)
	}
	err = s.Do(func(ctx context.Context) (err error) {
		res, err = Reserve(ctx, s.RDB, k, a)
		return err
	})
	return res, err
}

// Reserve runs reserve.lua on the home shard; for a sharded product whose
// home shard is short it pulls units from the other shards and tries again
// (at most MaxPulls times). dry reports that the answer (ErrSoldOut) is
// final: every shard was found empty with no transfer in flight, so a
// sold-out cache may learn it. Errors are Reserve's.
func (s *Sharded) Reserve(productID int64, shards, home int, args ReserveArgs) (res ReserveResult, dry bool, err error) {
	res, err = s.reserveShard(ShardKeys(productID, home), args)
	if shards <= 1 {
		return res, errors.Is(err, ErrSoldOut), err
	}
	for range cmp.Or(s.MaxPulls, DefaultMaxPulls) {
		if !short(err) {
			return res, false, err
		}
		moved, perr := s.pull(productID, shards, home, args.Quantity-res.Available)
		if perr != nil {
			return res, false, perr
		}
		if moved == 0 {
			// Every other shard is dry.
			final, perr := s.dry(productID, shards)
			if perr != nil {
				return res, false, perr
			}
			if final {
				return res, errors.Is(err, ErrSoldOut), err
			}
		}
		res, err = s.reserveShard(ShardKeys(productID, home), args)
	}
	return res, false, err
}

// dry reports whether productID has no unit left anywhere, once every other
// shard was found dry. Units of a transfer whose mover died between its two
// steps are counted nowhere: those are completed first (a repaired transfer
// answers false: try again).
func (s *Sharded) dry(productID int64, shards int) (bool, error) {
	var repaired int
	err := s.Do(func(ctx context.Context) (err error) {
		repaired, err = RepairTransfers(ctx, s.RDB, productID, shards, s.MarkerTTL)
		return err
	})
	if err != nil || repaired > 0 {
		return false, err
	}
	// The donors were read one after another: a transfer by another buyer
	// may have moved units into a shard this request had already found dry.
	// The product is sold out only if one look at every shard finds nothing
	// left.
	var left int64
	err = s.Do(func(ctx context.Context) (err error) {
		// Twice: one look reads the shards in no fixed order (one pipeline
		// per node, nodes in parallel), so a transfer completing during it
		// can be missed on both ends — in the receiver read before its
		// units came, in the donor read after its record went. Its units
		// are in the receiver when the second look starts.
		for look := 0; look < 2 && left == 0 && err == nil; look++ {
			left, err = UnitsLeft(ctx, s.RDB, productID, shards)
		}
		return err
	})
	return err == nil && left == 0, err
}

func short(err error) bool {
	return errors.Is(err, ErrSoldOut) || errors.Is(err, ErrInsufficient)
}

// pull moves at least need units (MinPull at least, when there are) from the
// other shards into home, trying donors home+1, home+2, … in turn. It
// returns the units moved; 0 means every other shard was dry.
func (s *Sharded) pull(productID int64, shards, home int, need int64) (int64, error) {
	need = max(need, 1)
	var total int64
	for i := 1; i < shards && total < need; i++ {
		donor := (home + i) % shards
		id := s.TransferID(productID, home)
		var moved int64
		err := s.Do(func(ctx context.Context) (err error) {
			moved, err = Move(ctx, s.RDB, productID, donor, home, id, max(need-total, cmp.Or(s.MinPull, DefaultMinPull)), s.MarkerTTL)
			return err
		})
		if err != nil {
			return total, err
		}
		total += moved
	}
	return total, nil
}

// UnitsLeft is the units available in every shard of productID plus the
// transfers still in flight (each counts as one: its units are on their way
// to a shard), read in one pipelined round trip per Redis node. It is not
// a snapshot: the reads of different shards are not atomic together.
func UnitsLeft(ctx context.Context, rdb redis.UniversalClient, productID int64, shards int) (int64, error) {
	pipe := rdb.Pipeline()
	avail := make([]*redis.StringCmd, shards)
	xfers := make([]*redis.IntCmd, shards)
	for sh := range shards {
		k := ShardKeys(productID, sh)
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
			return 0, &CorruptError{Key: ShardKeys(productID, sh).Stock(), Detail: "available: " + err.Error()}
		}
		x, err := xfers[sh].Result()
		if err != nil {
			return 0, err
		}
		left += max(n, 0) + x
	}
	return left, nil
}

// ShardCount is the number of stock shards of productID as Redis knows it:
// 0 when the product is not registered (ProductsKey), else the stock hashes
// 0, 1, … that exist (a product is registered only after every shard was
// loaded). One pipelined round trip.
func ShardCount(ctx context.Context, rdb redis.Cmdable, productID int64) (int, error) {
	var exists [MaxShards]*redis.IntCmd
	pipe := rdb.Pipeline()
	member := pipe.SIsMember(ctx, ProductsKey, strconv.FormatInt(productID, 10))
	for sh := range exists {
		exists[sh] = pipe.Exists(ctx, ShardKeys(productID, sh).Stock())
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return 0, err
	}
	if !member.Val() {
		return 0, nil
	}
	n := 0
	for n < MaxShards && exists[n].Val() == 1 {
		n++
	}
	return n, nil
}

// LoadProduct creates the stock hash of every shard of p with its share of
// the stock (ShardShare; an existing hash keeps its available, see Load),
// registers each shard's intake stream for the writers (StreamsKey) and then
// the product (ProductsKey). One Do per shard and one for the registration.
// Idempotent. A shard whose hash belongs to another incarnation of the id
// stops the load there: *IncarnationError (ErrIncarnation), that hash
// untouched.
func (s *Sharded) LoadProduct(p Product) error {
	for sh := range p.Shards {
		k := ShardKeys(p.ID, sh)
		share := ShardShare(p.Total, p.Shards, sh)
		avail := share
		if p.Available != nil {
			avail = ShardShare(*p.Available, p.Shards, sh)
		}
		err := s.Do(func(ctx context.Context) error {
			if _, _, err := Load(ctx, s.RDB, k, ShardStock{
				Incarnation: p.Incarnation,
				Available:   avail, Total: share, Price: p.Price, PerUserLimit: p.PerUserLimit,
				MaxPerOrder: p.MaxPerOrder, SaleStart: p.SaleStart, SaleEnd: p.SaleEnd,
			}); err != nil {
				return err
			}
			return s.RDB.SAdd(ctx, StreamsKey, k.Intake()).Err()
		})
		if err != nil {
			return fmt.Errorf("load product %d shard %d: %w", p.ID, sh, err)
		}
	}
	return s.Do(func(ctx context.Context) error {
		return s.RDB.SAdd(ctx, ProductsKey, strconv.FormatInt(p.ID, 10)).Err()
	})
}

// CheckUnused returns an *IncarnationError (ErrIncarnation) if Redis holds
// stock data of productID that a new product with that id and incarnation
// must not adopt: a stock hash of any of its possible shards (0 …
// MaxShards-1) carrying another incarnation, or an intake stream of one with
// entries. nil: the id is unused in Redis. One pipelined round trip (one per
// node on a cluster). The gateway runs it before it commits a new product.
func CheckUnused(ctx context.Context, rdb redis.Cmdable, productID int64, incarnation string) error {
	var incs [MaxShards]*redis.SliceCmd
	var lens [MaxShards]*redis.IntCmd
	pipe := rdb.Pipeline()
	for sh := range MaxShards {
		k := ShardKeys(productID, sh)
		incs[sh] = pipe.HMGet(ctx, k.Stock(), "available", "inc")
		lens[sh] = pipe.XLen(ctx, k.Intake())
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) && !isWrongType(err) {
		return err
	}
	for sh := range MaxShards {
		k := ShardKeys(productID, sh)
		if v, err := incs[sh].Result(); err == nil && v[0] != nil {
			found, _ := v[1].(string)
			if found != incarnation {
				return &IncarnationError{Key: k.Stock(), Found: found, Want: incarnation}
			}
		} else if isWrongType(err) {
			return &IncarnationError{Key: k.Stock(), Want: incarnation}
		}
		if n, err := lens[sh].Result(); (err == nil && n > 0) || isWrongType(err) {
			return &IncarnationError{Key: k.Intake(), Want: incarnation}
		}
	}
	return nil
}

func isWrongType(err error) bool { return err != nil && redis.HasErrorPrefix(err, "WRONGTYPE") }

// AdjustMarkerTTL is the life of the Redis marker that makes a stock repair
// apply once; a retry of the same repairNo after it expired would apply the
// repair to Redis again.
const AdjustMarkerTTL = 90 * 24 * time.Hour

// ApplyAdjustment is the Redis half of a stock repair (the MySQL half, the
// ADJUST flow, is persistence's): adjust.lua on shard 0 of productID, once
// per repairNo (marker AdjustMarkerTTL). Answers as Adjust.
func ApplyAdjustment(ctx context.Context, rdb redis.Scripter, productID int64, repairNo string, delta int64) (applied bool, available int64, err error) {
	return Adjust(ctx, rdb, ShardKeys(productID, 0), repairNo, delta, AdjustMarkerTTL)
}

// AdjustmentApplied reports whether repairNo's marker exists on productID's
// shard 0 (its Redis half was applied and the marker has not expired).
func AdjustmentApplied(ctx context.Context, rdb redis.Cmdable, productID int64, repairNo string) (bool, error) {
	n, err := rdb.Exists(ctx, ShardKeys(productID, 0).Adjusted(repairNo)).Result()
	return n > 0, err
}
