package buyer

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/stampede-sh/stampede/auth"
	"github.com/stampede-sh/stampede/gateway/httpapi"
	"github.com/stampede-sh/stampede/lua"
	"github.com/stampede-sh/stampede/order"
	"github.com/stampede-sh/stampede/persistence"
)

// listResponse is the body of GET /api/orders.
type listResponse struct {
	Orders     []httpapi.OrderJSON `json:"orders"`
	NextCursor *string             `json:"nextCursor"` // null on the last page
}

// allowRead takes a token from userID's order-read bucket
// (Config.RateUserRead); false: answered 429 RATE_LIMITED.
func (s *API) allowRead(ctx *fasthttp.RequestCtx, userID int64) bool {
	if s.reads == nil {
		return true
	}
	ok, wait := s.reads.Allow(userID, time.Now())
	if !ok {
		httpapi.TooMany(ctx, wait)
	}
	return ok
}

// getOrder is GET /api/orders/{orderNo}: the caller's order from MySQL, or,
// while the writers have not stored it yet, from its pending record in Redis
// (status PROCESSING, version 1). Another user's order is 404.
func (s *API) getOrder(ctx *fasthttp.RequestCtx, c auth.Claims) {
	if !s.allowRead(ctx, c.UserID) {
		return
	}
	no := httpapi.OrderNoParam(ctx)
	if no == "" {
		s.ans.Fail(ctx, persistence.ErrNotFound)
		return
	}
	o, err := s.findOrder(no, c.UserID)
	if err != nil {
		s.ans.Fail(ctx, err)
		return
	}
	s.ans.JSON(ctx, fasthttp.StatusOK, o)
}

// findOrder looks no up in MySQL, then in Redis. It returns
// persistence.ErrNotFound for an order that does not exist or is not
// userID's. Every not-found path does the same reads — MySQL, the pending
// record in Redis, MySQL once more — so that how long a 404 takes tells
// nothing of whether another user's order exists (a timing oracle before:
// another user's stored order answered after one read).
func (s *API) findOrder(no string, userID int64) (httpapi.OrderJSON, error) {
	o, found, err := s.storedOrder(no, userID)
	if err != nil || found {
		return o, err
	}
	p, owner, err := s.PendingOrder(no)
	if err != nil {
		return httpapi.OrderJSON{}, err
	}
	if owner == userID {
		return p, nil
	}
	// No record of the caller's (none, or another user's): the writer drops
	// the pending record once the order is in MySQL, and may have stored it
	// between the two reads. Look once more.
	o, found, err = s.storedOrder(no, userID)
	if err != nil || found {
		return o, err
	}
	return httpapi.OrderJSON{}, persistence.ErrNotFound
}

// storedOrder reads no from MySQL: found only if it is userID's (another
// user's order is not found).
func (s *API) storedOrder(no string, userID int64) (httpapi.OrderJSON, bool, error) {
	sctx, cancel := s.callCtx(s.cfg.StoreTimeout)
	o, err := s.store.GetOrder(sctx, no)
	cancel()
	switch {
	case err == nil && o.UserID == userID:
		return httpapi.ToOrderJSON(o), true, nil
	case err == nil || errors.Is(err, persistence.ErrNotFound):
		return httpapi.OrderJSON{}, false, nil
	}
	return httpapi.OrderJSON{}, false, err
}

// PendingOrder reads the record reserve.lua keeps for an accepted order
// (lua.ReadPendingOrder) until the writers have stored it. owner is 0 when
// there is no usable record.
func (s *API) PendingOrder(no string) (o httpapi.OrderJSON, owner int64, err error) {
	_, shard, productID, err := order.ParseNo(no)
	if err != nil {
		return httpapi.OrderJSON{}, 0, nil
	}
	var p lua.PendingOrder
	var bad error // the record's answer: Redis worked
	err = s.redisCall(func(ctx context.Context) (err error) {
		p, err = lua.ReadPendingOrder(ctx, s.rdb, lua.ShardKeys(productID, shard), no)
		if errors.Is(err, lua.ErrNoRecord) || errors.Is(err, lua.ErrStockCorrupt) {
			bad, err = err, nil
		}
		return err
	})
	if err == nil {
		err = bad
	}
	switch {
	case errors.Is(err, lua.ErrNoRecord):
		return httpapi.OrderJSON{}, 0, nil // no record (or a partial one): not found
	case errors.Is(err, lua.ErrStockCorrupt):
		s.log.Warn("malformed pending order record", "orderNo", no, "err", err)
		return httpapi.OrderJSON{}, 0, nil
	case err != nil:
		return httpapi.OrderJSON{}, 0, err
	}
	at := time.UnixMilli(p.AcceptedMs).UTC()
	return httpapi.OrderJSON{
		OrderNo: no, RequestID: p.RequestID, ProductID: productID, Quantity: p.Quantity, Amount: p.Quantity * p.UnitPrice,
		Status: order.Processing, Version: 1, CreatedAt: at, UpdatedAt: at,
	}, p.UserID, nil
}

// listOrders is GET /api/orders?limit=20&cursor=: the caller's orders stored
// in MySQL, newest first. limit is 1…100 (default 20); cursor is the
// nextCursor of the previous page.
func (s *API) listOrders(ctx *fasthttp.RequestCtx, c auth.Claims) {
	if !s.allowRead(ctx, c.UserID) {
		return
	}
	args := ctx.QueryArgs()
	limit := 20
	if v := args.Peek("limit"); v != nil {
		n, err := strconv.Atoi(string(v))
		if err != nil || n < 1 || n > 100 {
			s.ans.Fail(ctx, httpapi.InvalidArg("limit must be an integer from 1 to 100"))
			return
		}
		limit = n
	}
	cursor := string(args.Peek("cursor"))
	if cursor != "" {
		if _, ok := httpapi.ParseID(cursor); !ok {
			s.ans.Fail(ctx, httpapi.InvalidArg("cursor is not a cursor returned by this endpoint"))
			return
		}
	}
	sctx, cancel := s.callCtx(s.cfg.StoreTimeout)
	orders, next, err := s.store.ListOrders(sctx, c.UserID, limit, cursor)
	cancel()
	if err != nil {
		s.ans.Fail(ctx, err)
		return
	}
	resp := listResponse{Orders: make([]httpapi.OrderJSON, 0, len(orders))}
	for _, o := range orders {
		resp.Orders = append(resp.Orders, httpapi.ToOrderJSON(o))
	}
	if next != "" {
		resp.NextCursor = &next
	}
	s.ans.JSON(ctx, fasthttp.StatusOK, resp)
}
