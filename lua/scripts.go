package lua

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Sentinel errors returned by the script wrappers.
var (
	ErrDuplicate      = errors.New("lua: duplicate request")       // same intent seen: use the returned orderNo
	ErrKeyReused      = errors.New("lua: requestId reused")        // same requestId, different payload
	ErrNotFound       = errors.New("lua: product not loaded")      // no stock hash
	ErrNotActive      = errors.New("lua: sale not active")         // outside the sale window
	ErrSoldOut        = errors.New("lua: sold out")                // available = 0
	ErrInsufficient   = errors.New("lua: insufficient stock")      // 0 < available < quantity
	ErrLimitExceeded  = errors.New("lua: purchase limit exceeded") // per-user limit
	ErrBadQuantity    = errors.New("lua: bad quantity")            // < 1 or > max per order
	ErrNegativeAdjust = errors.New("lua: adjustment below zero")   // adjust would make available < 0
	errUnknownCode    = errors.New("lua: unknown script return code")
)

var (
	reserveScript = redis.NewScript(reserveSrc)
	releaseScript = redis.NewScript(releaseSrc)
	loadScript    = redis.NewScript(loadSrc)
	adjustScript  = redis.NewScript(adjustSrc)
	all           = []*redis.Script{reserveScript, releaseScript, loadScript, adjustScript}
)

// LoadAll loads every script into the script cache of rdb (on a cluster
// client: of every master). Needed only before pipelining scripts with
// EVALSHA; Run-based wrappers reload by themselves.
func LoadAll(ctx context.Context, rdb redis.Scripter) error {
	for _, s := range all {
		if err := s.Load(ctx, rdb).Err(); err != nil {
			return fmt.Errorf("lua: load script: %w", err)
		}
	}
	return nil
}

// ReserveArgs is one purchase intent.
type ReserveArgs struct {
	OrderNo   string        // used if the intent is new
	UserID    int64         //
	RequestID string        // validated by the caller
	Quantity  int64         //
	TTL       time.Duration // life of the idempotency record, >= the pay timeout
}

// ReserveResult is what reserve answered.
type ReserveResult struct {
	OrderNo   string // the new orderNo, or the stored one for ErrDuplicate and ErrKeyReused
	Available int64  // units left in the shard after the call (0 when unknown)
}

// Reserve runs reserve.lua for one shard. It returns a nil error when stock
// was taken; ErrDuplicate or ErrKeyReused with the stored orderNo; ErrNotFound,
// ErrNotActive, ErrSoldOut, ErrInsufficient, ErrLimitExceeded or ErrBadQuantity
// when nothing was reserved; any other error is Redis's (nothing is known to
// have been reserved: the caller must not retry with a different orderNo
// without replaying the same requestId).
func Reserve(ctx context.Context, rdb redis.Scripter, k Keys, a ReserveArgs) (ReserveResult, error) {
	res, err := reserveScript.Run(ctx, rdb,
		[]string{k.Stock(), k.Request(a.UserID, a.RequestID), k.User(a.UserID), k.Order(a.OrderNo), k.Intake()},
		a.OrderNo, a.UserID, a.RequestID, a.Quantity, int64(a.TTL/time.Second),
	).Slice()
	if err != nil {
		return ReserveResult{}, fmt.Errorf("lua: reserve: %w", err)
	}
	code, no, avail, err := triple(res)
	if err != nil {
		return ReserveResult{}, err
	}
	r := ReserveResult{OrderNo: no, Available: avail}
	switch code {
	case 0:
		return r, nil
	case 1:
		return r, ErrDuplicate
	case 2:
		return r, ErrKeyReused
	case 3:
		return r, ErrNotFound
	case 4:
		return r, ErrNotActive
	case 5:
		return r, ErrSoldOut
	case 6:
		return r, ErrInsufficient
	case 7:
		return r, ErrLimitExceeded
	case 8:
		return r, ErrBadQuantity
	}
	return r, fmt.Errorf("%w %d from reserve", errUnknownCode, code)
}

// Release runs release.lua: gives quantity units of orderNo back to the shard
// at most once. released is false when the marker showed an earlier release.
// ErrNotFound means the shard's stock hash is missing and nothing changed.
func Release(ctx context.Context, rdb redis.Scripter, k Keys, orderNo string, userID, quantity int64, markerTTL time.Duration) (released bool, available int64, err error) {
	res, err := releaseScript.Run(ctx, rdb,
		[]string{k.Stock(), k.User(userID), k.Released(orderNo)},
		quantity, int64(markerTTL/time.Second),
	).Slice()
	if err != nil {
		return false, 0, fmt.Errorf("lua: release %s: %w", orderNo, err)
	}
	code, available, err := pair(res)
	if err != nil {
		return false, 0, err
	}
	switch code {
	case 1:
		return true, available, nil
	case 0:
		return false, available, nil
	case -1:
		return false, 0, ErrNotFound
	}
	return false, 0, fmt.Errorf("%w %d from release", errUnknownCode, code)
}

// ShardStock is what load.lua writes for one shard.
type ShardStock struct {
	Available    int64 // set only if the shard is new
	Total        int64
	Price        int64 // minor units
	PerUserLimit int64 // 0 = none
	MaxPerOrder  int64
	SaleStart    time.Time
	SaleEnd      time.Time
}

// Load creates the shard's stock hash, or refreshes its metadata without
// touching available. created tells which; available is the shard's count after.
func Load(ctx context.Context, rdb redis.Scripter, k Keys, s ShardStock) (created bool, available int64, err error) {
	res, err := loadScript.Run(ctx, rdb, []string{k.Stock()},
		s.Available, s.Total, s.Price, s.PerUserLimit, s.MaxPerOrder,
		s.SaleStart.UnixMilli(), s.SaleEnd.UnixMilli(),
	).Slice()
	if err != nil {
		return false, 0, fmt.Errorf("lua: load: %w", err)
	}
	code, available, err := pair(res)
	if err != nil {
		return false, 0, err
	}
	return code == 1, available, nil
}

// Adjust runs adjust.lua: available += delta once per repairNo. applied is
// false when repairNo was applied before. ErrNotFound: no stock hash;
// ErrNegativeAdjust: the result would be negative (nothing changed).
func Adjust(ctx context.Context, rdb redis.Scripter, k Keys, repairNo string, delta int64, markerTTL time.Duration) (applied bool, available int64, err error) {
	res, err := adjustScript.Run(ctx, rdb, []string{k.Stock(), k.Adjusted(repairNo)},
		delta, int64(markerTTL/time.Second)).Slice()
	if err != nil {
		return false, 0, fmt.Errorf("lua: adjust %s: %w", repairNo, err)
	}
	code, available, err := pair(res)
	if err != nil {
		return false, 0, err
	}
	switch code {
	case 1:
		return true, available, nil
	case 0:
		return false, available, nil
	case -1:
		return false, 0, ErrNotFound
	case -2:
		return false, available, ErrNegativeAdjust
	}
	return false, 0, fmt.Errorf("%w %d from adjust", errUnknownCode, code)
}

func triple(res []any) (code int64, s string, n int64, err error) {
	if len(res) != 3 {
		return 0, "", 0, fmt.Errorf("lua: want 3 results, got %d", len(res))
	}
	code, ok1 := res[0].(int64)
	s, ok2 := res[1].(string)
	n, ok3 := res[2].(int64)
	if !ok1 || !ok2 || !ok3 {
		return 0, "", 0, fmt.Errorf("lua: unexpected result %v", res)
	}
	return code, s, n, nil
}

func pair(res []any) (code, n int64, err error) {
	if len(res) != 2 {
		return 0, 0, fmt.Errorf("lua: want 2 results, got %d", len(res))
	}
	code, ok1 := res[0].(int64)
	n, ok2 := res[1].(int64)
	if !ok1 || !ok2 {
		return 0, 0, fmt.Errorf("lua: unexpected result %v", res)
	}
	return code, n, nil
}
