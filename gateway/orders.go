package gateway

import (
	"errors"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/stampede-sh/stampede/auth"
	"github.com/stampede-sh/stampede/lua"
	"github.com/stampede-sh/stampede/order"
)

// createOrder is POST /api/orders {"productId", "quantity", "requestId"}: the
// hot path of a sale. The caller's token buckets are checked first (429), then
// the local sold-out cache (soldout.go); otherwise one reserve.lua call on the
// user's home shard checks idempotency, the sale window, stock and the
// per-user limit, takes the stock and appends the reservation to the shard's
// intake stream, atomically (a sharded product may first move units into the
// home shard, shards.go). With synchronous intake the order is written to
// MySQL before the answer (sync_intake.go). Nothing else touches MySQL: a
// replay is answered from the idempotency record, which holds the orderNo
// and the order's last status known to Redis (statusCache).
//
// requestIds are scoped per (user, product): the same requestId sent for two
// products is two intents, two orders (MySQL's unique key is (user_id,
// product_id, request_id) too), so neither is ever failed for reuse.
//
//	202 {"orderNo", "requestId", "status": "PROCESSING"}  first acceptance, Location: /api/orders/{orderNo}
//	200 {"orderNo", "requestId", "status"}                replay of the same intent
//	409 SALE_PAUSED                                       an admin paused the sale
//	500 STOCK_CORRUPT                                     the product's stock data is unusable
func (s *Server) createOrder(ctx *fasthttp.RequestCtx, c auth.Claims) {
	if s.limiter != nil {
		if ok, wait := s.limiter.allow(c.UserID, time.Now()); !ok {
			s.rateLimited(ctx, wait)
			return
		}
	}
	var productID, quantity int64
	var requestID string
	fields := [...]field{
		intField("productId", &productID),
		intField("quantity", &quantity),
		stringField("requestId", &requestID),
	}
	if err := decodeBody(ctx.PostBody(), s.cfg.MaxBodyBytes, fields[:]); err != nil {
		s.fail(ctx, err)
		return
	}
	switch {
	case productID <= 0:
		s.fail(ctx, invalidArg("productId must be a positive integer"))
		return
	case quantity < 1:
		s.fail(ctx, invalidArg("quantity must be at least 1"))
		return
	case !order.ValidRequestID(requestID):
		s.fail(ctx, invalidArg("requestId must be 1 to 64 characters of [A-Za-z0-9._:-]"))
		return
	}

	shards, err := s.shardCount(productID)
	if err != nil {
		if errors.Is(err, errProductNotFound) {
			s.metrics.reserveOutcome(lua.ErrNotFound)
		}
		s.fail(ctx, err)
		return
	}
	home := lua.HomeShard(c.UserID, shards)
	now := time.Now()
	if s.soldOut.hit(productID, now) {
		s.answerSoldOut(ctx, c, productID, home, requestID, quantity, now)
		return
	}
	if !s.nodeValid(now) { // nodeid.go: no orderNo without a node id of our own
		s.fail(ctx, errNoNode)
		return
	}
	args := lua.ReserveArgs{
		OrderNo:   s.gen.Next(productID, home),
		UserID:    c.UserID,
		RequestID: requestID,
		Quantity:  quantity,
		TTL:       s.cfg.RequestTTL,
		Sync:      s.cfg.SyncIntake,
	}
	var res lua.ReserveResult
	var dry bool
	if shards > 1 {
		res, dry, err = s.reserveSharded(productID, shards, home, args) // lua/shards.go, waiting room claimed first
	} else {
		args.Admission = s.rooms.on(productID)                         // waitingroom.go: one map read
		res, dry, err = s.stock.Reserve(productID, shards, home, args) // lua/shards.go
		if errors.Is(err, lua.ErrRoomOn) {                             // the room was turned on since this gateway last looked
			s.rooms.set(productID, true)
			args.Admission = true
			res, dry, err = s.stock.Reserve(productID, shards, home, args)
		}
	}
	// A replay tells the stock of its shard too: on a one-shard product a
	// storm of replays after the sell-out keeps the sold-out cache marked
	// (its replays are then answered by the pipelined record lookups)
	// instead of running the script each.
	if dry || (shards == 1 && res.Available == 0 && errors.Is(err, lua.ErrDuplicate)) {
		s.soldOut.mark(productID, time.Now())
	}
	if s.durable != nil && (err == nil || errors.Is(err, lua.ErrDuplicate)) {
		// Durability replicated: the 202, and a replay's 200, only once the
		// record is on enough replicas (durability.go).
		if werr := s.durable.wait(lua.ShardKeys(productID, home)); werr != nil {
			err = werr
		}
	}
	if err == nil && s.cfg.SyncIntake {
		err = s.persistSync(order.Reservation{
			OrderNo: res.OrderNo, UserID: c.UserID, RequestID: requestID, ProductID: productID, Shard: home,
			Quantity: quantity, UnitPrice: res.UnitPrice, AcceptedAt: res.AcceptedAt,
		})
	}
	s.metrics.reserveOutcome(err)
	switch {
	case err == nil:
		s.acceptedBuyer(productID, home) // buyers.go
		ctx.Response.Header.Set("Location", "/api/orders/"+res.OrderNo)
		writeOrderState(ctx, fasthttp.StatusAccepted, res.OrderNo, requestID, order.Processing)
	case errors.Is(err, lua.ErrDuplicate):
		s.replay(ctx, res.OrderNo, requestID, res.Status)
	case errors.Is(err, lua.ErrStockCorrupt):
		s.stockCorrupt(productID, err)
		s.failWith(ctx, err, "", requestID)
	default:
		s.failWith(ctx, err, "", requestID)
	}
}

// writeOrderState writes {"orderNo","requestId","status"} without
// encoding/json: orderNo is digits, requestId was validated, status is ours.
func writeOrderState(ctx *fasthttp.RequestCtx, status int, orderNo, requestID string, st order.Status) {
	var a [192]byte
	b := append(a[:0], `{"orderNo":`...)
	b = appendJSONString(b, orderNo)
	b = append(b, `,"requestId":`...)
	b = appendJSONString(b, requestID)
	b = append(b, `,"status":`...)
	b = appendJSONString(b, string(st))
	b = append(b, '}')
	writeBody(ctx, status, b)
}
