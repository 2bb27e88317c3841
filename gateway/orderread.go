package gateway

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

// orderJSON is the API shape of an order (SPEC §3). Times are RFC 3339 UTC;
// payDeadline is null until the order waits for payment.
type orderJSON struct {
	OrderNo     string       `json:"orderNo"`
	RequestID   string       `json:"requestId"`
	ProductID   int64        `json:"productId"`
	Quantity    int64        `json:"quantity"`
	Amount      int64        `json:"amount"`
	Status      order.Status `json:"status"`
	Version     int64        `json:"version"`
	CreatedAt   time.Time    `json:"createdAt"`
	UpdatedAt   time.Time    `json:"updatedAt"`
	PayDeadline *time.Time   `json:"payDeadline"`
}

func toOrderJSON(o persistence.Order) orderJSON {
	j := orderJSON{
		OrderNo: o.OrderNo, RequestID: o.RequestID, ProductID: o.ProductID, Quantity: o.Quantity,
		Amount: o.Amount, Status: o.Status, Version: o.Version,
		CreatedAt: o.CreatedAt.UTC(), UpdatedAt: o.UpdatedAt.UTC(),
	}
	if o.PayDeadline != nil {
		t := o.PayDeadline.UTC()
		j.PayDeadline = &t
	}
	return j
}

// listResponse is the body of GET /api/orders.
type listResponse struct {
	Orders     []orderJSON `json:"orders"`
	NextCursor *string     `json:"nextCursor"` // null on the last page
}

// allowRead takes a token from userID's order-read bucket
// (Config.RateUserRead); false: answered 429 RATE_LIMITED.
func (s *Server) allowRead(ctx *fasthttp.RequestCtx, userID int64) bool {
	if s.reads == nil {
		return true
	}
	ok, wait := s.reads.allow(userID, time.Now())
	if !ok {
		tooMany(ctx, wait)
	}
	return ok
}

// orderNoParam returns the {orderNo} of the path, or "" when it is not a
// well-formed orderNo (which answers 404: no such order can exist).
func orderNoParam(ctx *fasthttp.RequestCtx) string {
	no, _ := ctx.UserValue("orderNo").(string)
	if _, _, _, err := order.ParseNo(no); err != nil {
		return ""
	}
	return no
}

// getOrder is GET /api/orders/{orderNo}: the caller's order from MySQL, or,
// while the writers have not stored it yet, from its pending record in Redis
// (status PROCESSING, version 1). Another user's order is 404.
func (s *Server) getOrder(ctx *fasthttp.RequestCtx, c auth.Claims) {
	if !s.allowRead(ctx, c.UserID) {
		return
	}
	no := orderNoParam(ctx)
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
func (s *Server) findOrder(no string, userID int64) (orderJSON, error) {
	o, found, err := s.storedOrder(no, userID)
	if err != nil || found {
		return o, err
	}
	p, owner, err := s.pendingOrder(no)
	if err != nil {
		return orderJSON{}, err
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
	return orderJSON{}, persistence.ErrNotFound
}

// storedOrder reads no from MySQL: found only if it is userID's (another
// user's order is not found).
func (s *Server) storedOrder(no string, userID int64) (orderJSON, bool, error) {
	sctx, cancel := s.callCtx(s.cfg.StoreTimeout)
	o, err := s.store.GetOrder(sctx, no)
	cancel()
	switch {
	case err == nil && o.UserID == userID:
		return toOrderJSON(o), true, nil
	case err == nil || errors.Is(err, persistence.ErrNotFound):
		return orderJSON{}, false, nil
	}
	return orderJSON{}, false, err
}

// pendingOrder reads the record reserve.lua keeps for an accepted order
// (lua.ReadPendingOrder) until the writers have stored it. owner is 0 when
// there is no usable record.
func (s *Server) pendingOrder(no string) (o orderJSON, owner int64, err error) {
	_, shard, productID, err := order.ParseNo(no)
	if err != nil {
		return orderJSON{}, 0, nil
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
		return orderJSON{}, 0, nil // no record (or a partial one): not found
	case errors.Is(err, lua.ErrStockCorrupt):
		s.log.Warn("malformed pending order record", "orderNo", no, "err", err)
		return orderJSON{}, 0, nil
	case err != nil:
		return orderJSON{}, 0, err
	}
	at := time.UnixMilli(p.AcceptedMs).UTC()
	return orderJSON{
		OrderNo: no, RequestID: p.RequestID, ProductID: productID, Quantity: p.Quantity, Amount: p.Quantity * p.UnitPrice,
		Status: order.Processing, Version: 1, CreatedAt: at, UpdatedAt: at,
	}, p.UserID, nil
}

// listOrders is GET /api/orders?limit=20&cursor=: the caller's orders stored
// in MySQL, newest first. limit is 1…100 (default 20); cursor is the
// nextCursor of the previous page.
func (s *Server) listOrders(ctx *fasthttp.RequestCtx, c auth.Claims) {
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
	resp := listResponse{Orders: make([]orderJSON, 0, len(orders))}
	for _, o := range orders {
		resp.Orders = append(resp.Orders, toOrderJSON(o))
	}
	if next != "" {
		resp.NextCursor = &next
	}
	s.ans.JSON(ctx, fasthttp.StatusOK, resp)
}
