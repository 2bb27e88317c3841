package intake

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/valyala/fasthttp"

	"github.com/stampede-sh/stampede/auth"
	"github.com/stampede-sh/stampede/lua"
	"github.com/stampede-sh/stampede/order"
)

// Local sold-out cache. Once reserve answered SOLD_OUT for a product (on a
// sharded product: every shard dry, no transfer in flight), this gateway
// answers its order requests from memory for Config.SoldOutTTL instead of
// running reserve.lua. When the entry expires the next request runs the
// script again, so stock given back (release, adjust) is sold again within
// SoldOutTTL: no unit stays unsold.
//
// A cache hit is not a blind 409: a replay of a request that was accepted
// before the sell-out must still get 200 with its orderNo. A user the
// gateway's copy of the shard's buyers set does not hold (buyers.go,
// Config.SoldOutBuyers) has no such request: 409 from memory. Otherwise a hit costs one
// plain GET of the (user, requestId) idempotency record in the user's home
// shard — no script, no write; the GETs of concurrent hits share pipelines
// (Config.LookupPipeline, lookup_batch.go) — and answers the replay (200, or 422 for a
// different quantity) when the record exists, 409 SOLD_OUT otherwise. A
// request the cache answers skips the script's other checks (sale window,
// per-order maximum): it gets SOLD_OUT where the script would have said
// SALE_NOT_ACTIVE or INVALID_ARGUMENT.
type soldOutCache struct {
	ttl time.Duration // 0: off
	m   sync.Map      // productId → *atomic.Int64, unix ns until which it is sold out
}

func (c *soldOutCache) hit(productID int64, now time.Time) bool {
	if c.ttl <= 0 {
		return false
	}
	v, ok := c.m.Load(productID)
	return ok && now.UnixNano() < v.(*atomic.Int64).Load()
}

func (c *soldOutCache) mark(productID int64, now time.Time) {
	if c.ttl <= 0 {
		return
	}
	until := now.Add(c.ttl).UnixNano()
	if v, ok := c.m.Load(productID); ok {
		v.(*atomic.Int64).Store(until)
		return
	}
	a := new(atomic.Int64)
	a.Store(until)
	if v, loaded := c.m.LoadOrStore(productID, a); loaded {
		v.(*atomic.Int64).Store(until)
	}
}

// answerSoldOut answers an order request for a product the cache holds sold
// out: the stored answer of a replay, else 409 SOLD_OUT.
func (s *Intake) answerSoldOut(ctx *fasthttp.RequestCtx, c auth.Claims, productID int64, home int, requestID string, quantity int64, now time.Time) {
	if s.nonBuyer(productID, home, c.UserID, now) { // buyers.go: no record to replay
		s.metrics.ReserveOutcome(lua.ErrSoldOut)
		s.ans.Fail(ctx, lua.ErrSoldOut)
		return
	}
	k := lua.ShardKeys(productID, home)
	var seen string
	var err error
	if s.lookups != nil {
		seen, err = s.lookups.get(k.Request(c.UserID, requestID)) // lookup_batch.go
	} else {
		err = s.redisCall(func(rctx context.Context) (err error) {
			seen, err = s.rdb.Get(rctx, k.Request(c.UserID, requestID)).Result()
			return err
		})
	}
	switch {
	case errors.Is(err, redis.Nil):
		s.metrics.ReserveOutcome(lua.ErrSoldOut)
		s.ans.Fail(ctx, lua.ErrSoldOut)
		return
	case err != nil:
		s.metrics.ReserveOutcome(err)
		s.ans.FailWith(ctx, err, "", requestID)
		return
	}
	rec, ok := lua.ParseRequestRecord(seen)
	no, q, st := rec.OrderNo, rec.Quantity, rec.Status
	if !ok {
		s.metrics.ReserveOutcome(lua.ErrSoldOut)
		s.ans.Fail(ctx, lua.ErrSoldOut)
		return
	}
	if q != strconv.FormatInt(quantity, 10) {
		s.metrics.ReserveOutcome(lua.ErrKeyReused)
		s.ans.FailWith(ctx, lua.ErrKeyReused, no, requestID)
		return
	}
	if s.durable != nil { // durability.go: a 200 only once the record is on enough replicas
		if err := s.durable.wait(k); err != nil {
			s.metrics.ReserveOutcome(err)
			s.ans.FailWith(ctx, err, "", requestID)
			return
		}
	}
	s.metrics.ReserveOutcome(lua.ErrDuplicate)
	s.replay(ctx, no, requestID, st)
}

// replay answers 200 with orderNo and the status the idempotency record
// holds: the last one the pipeline reported to Redis (lua.SetStatus), or
// PROCESSING before any. It never reads MySQL, so a retry storm of buyers
// re-sending accepted intents costs Redis one script call each and the
// database nothing; the buyer's page gets later changes over push, and GET
// /api/orders/{orderNo} reads the current row.
func (s *Intake) replay(ctx *fasthttp.RequestCtx, orderNo, requestID, status string) {
	st := order.Status(status)
	if !st.Valid() {
		st = order.Processing
	}
	writeOrderState(ctx, fasthttp.StatusOK, orderNo, requestID, st)
}
