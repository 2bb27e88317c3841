package gateway

import (
	"context"
	"errors"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/stampede-sh/stampede/auth"
	"github.com/stampede-sh/stampede/lua"
	"github.com/stampede-sh/stampede/order"
	"github.com/stampede-sh/stampede/persistence"
)

// createOrder is POST /api/orders {"productId", "quantity", "requestId"}: the
// hot path of a sale. One reserve.lua call checks idempotency, the sale
// window, stock and the per-user limit, takes the stock and appends the
// reservation to the shard's intake stream, atomically. MySQL is read only to
// report the current status of a replayed request.
//
//	202 {"orderNo", "requestId", "status": "PROCESSING"}  first acceptance
//	200 {"orderNo", "requestId", "status"}                replay of the same intent
func (s *Server) createOrder(ctx *fasthttp.RequestCtx, c auth.Claims) {
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

	shard := s.shardFor(productID, c.UserID)
	args := lua.ReserveArgs{
		OrderNo:   s.gen.Next(productID, shard),
		UserID:    c.UserID,
		RequestID: requestID,
		Quantity:  quantity,
		TTL:       s.cfg.RequestTTL,
	}
	var res lua.ReserveResult
	err := s.redisCall(func(rctx context.Context) (err error) {
		start := time.Now()
		res, err = lua.Reserve(rctx, s.rdb, lua.ShardKeys(productID, shard), args)
		s.metrics.lua.Observe(time.Since(start).Seconds())
		return err
	})
	s.metrics.reserveOutcome(err)
	switch {
	case err == nil:
		writeOrderState(ctx, fasthttp.StatusAccepted, res.OrderNo, requestID, order.Processing)
	case errors.Is(err, lua.ErrDuplicate):
		st, err := s.currentStatus(res.OrderNo)
		if err != nil {
			s.failWith(ctx, err, res.OrderNo, requestID)
			return
		}
		writeOrderState(ctx, fasthttp.StatusOK, res.OrderNo, requestID, st)
	default:
		s.failWith(ctx, err, "", requestID)
	}
}

// shardFor picks the stock shard of productID that serves userID. Every
// product has at least shard 0; spreading a hot product over its shards
// comes later and changes only this function.
func (s *Server) shardFor(productID, userID int64) int { return 0 }

// currentStatus is the status of an accepted order: its MySQL row's, or
// PROCESSING while the writers have not stored it yet.
func (s *Server) currentStatus(orderNo string) (order.Status, error) {
	ctx, cancel := s.callCtx(s.cfg.StoreTimeout)
	defer cancel()
	o, err := s.store.GetOrder(ctx, orderNo)
	switch {
	case err == nil:
		return o.Status, nil
	case errors.Is(err, persistence.ErrNotFound):
		return order.Processing, nil
	}
	return "", err
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
