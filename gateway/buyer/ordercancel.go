package buyer

import (
	"errors"

	"github.com/valyala/fasthttp"

	"github.com/stampede-sh/stampede/auth"
	"github.com/stampede-sh/stampede/gateway/httpapi"
	"github.com/stampede-sh/stampede/order"
	"github.com/stampede-sh/stampede/persistence"
)

// cancelFrom are the statuses a buyer may cancel from (docs/spec.md §2).
var cancelFrom = []order.Status{order.Processing, order.WaitingPay}

// cancelOrder is POST /api/orders/{orderNo}/cancel: the caller cancels their
// order, PROCESSING or WAITING_PAY → CANCELLED, with store.CloseOrder. The
// Redis reservation is given back by the pipeline's release consumer when
// the status event arrives; the gateway never releases stock itself.
//
// 200 order; 404 (no such order, or another user's); 409 INVALID_STATE (the
// order is past cancelling, or is accepted but not yet stored in MySQL).
func (s *API) cancelOrder(ctx *fasthttp.RequestCtx, c auth.Claims) {
	no := httpapi.OrderNoParam(ctx)
	if no == "" {
		s.ans.Fail(ctx, persistence.ErrNotFound)
		return
	}
	sctx, cancel := s.callCtx(s.cfg.StoreTimeout)
	o, err := s.store.CloseOrder(sctx, persistence.CloseRequest{
		OrderNo: no, UserID: c.UserID, Reason: order.ReasonUser, From: cancelFrom,
	})
	cancel()
	switch {
	case err == nil:
		s.statusCache(o)
		s.ans.JSON(ctx, fasthttp.StatusOK, httpapi.ToOrderJSON(o))
	case errors.Is(err, persistence.ErrInvalidState):
		s.ans.Fail(ctx, httpapi.InvalidState("order is %s and can no longer be cancelled", o.Status))
	case errors.Is(err, persistence.ErrNotFound):
		s.failNotStored(ctx, no, c.UserID)
	default:
		s.ans.Fail(ctx, err)
	}
}

// failNotStored answers a change asked for an order MySQL does not have: 409
// if it is the caller's order still on its way from Redis to MySQL, else 404.
func (s *API) failNotStored(ctx *fasthttp.RequestCtx, no string, userID int64) {
	_, owner, err := s.PendingOrder(no)
	switch {
	case err != nil:
		s.ans.Fail(ctx, err)
	case owner == userID:
		s.ans.Fail(ctx, httpapi.InvalidState("order is still being recorded (PROCESSING); retry shortly"))
	default:
		s.ans.Fail(ctx, persistence.ErrNotFound)
	}
}
