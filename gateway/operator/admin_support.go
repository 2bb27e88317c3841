package operator

import (
	"context"
	"errors"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/stampede-sh/stampede/auth"
	"github.com/stampede-sh/stampede/gateway/httpapi"
	"github.com/stampede-sh/stampede/order"
	"github.com/stampede-sh/stampede/persistence"
)

// adminOrderJSON is an order as support sees it in the search: the buyer's
// shape (orderJSON) plus the buyer.
type adminOrderJSON struct {
	httpapi.OrderJSON
	UserID int64 `json:"userId"`
}

// buyerJSON names an identity provider's buyer (the single-order read; absent
// for a user id of the direct range).
type buyerJSON struct {
	Issuer  string `json:"issuer,omitempty"`
	Subject string `json:"subject,omitempty"`
}

// adminOrderHistoryJSON is the single-order read: adminOrderJSON plus its
// history, always present ([] while the order is only in Redis).
type adminOrderHistoryJSON struct {
	adminOrderJSON
	buyerJSON
	History []historyEntry `json:"history"`
}

// historyEntry is one status an order took (persistence.OrderHistory).
type historyEntry struct {
	Status order.Status    `json:"status"`
	At     time.Time       `json:"at"`    // RFC 3339 UTC: the event's occurredAt
	Event  order.EventType `json:"event"` // the outbox event type
}

// adminOrderList is the body of GET /api/admin/orders.
type adminOrderList struct {
	Orders     []adminOrderJSON `json:"orders"`
	NextCursor string           `json:"nextCursor"` // "" on the last page
}

// pageArgs reads ?limit= (1…200, default 50) and ?cursor= (a nextCursor of
// the same endpoint, "" for the first page).
func pageArgs(ctx *fasthttp.RequestCtx) (int, persistence.Cursor, error) {
	args := ctx.QueryArgs()
	limit, msg := pageLimit(args)
	if msg != "" {
		return 0, persistence.Cursor{}, httpapi.InvalidArg("%s", msg)
	}
	c, err := persistence.ParseCursor(string(args.Peek("cursor")))
	if err != nil {
		return 0, persistence.Cursor{}, httpapi.InvalidArg("cursor is not a nextCursor returned by this endpoint")
	}
	return limit, c, nil
}

// positiveArg reads an optional positive int64 query argument (0 if absent).
func positiveArg(ctx *fasthttp.RequestCtx, name string) (int64, error) {
	v := ctx.QueryArgs().Peek(name)
	if v == nil {
		return 0, nil
	}
	n, ok := httpapi.ParseID(string(v))
	if !ok {
		return 0, httpapi.InvalidArg("%s must be a positive integer", name)
	}
	return n, nil
}

// timeArg reads an optional RFC 3339 query argument (zero if absent).
func timeArg(ctx *fasthttp.RequestCtx, name string) (time.Time, error) {
	v := ctx.QueryArgs().Peek(name)
	if v == nil {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, string(v))
	if err != nil || t.Year() < 1970 || t.Year() > 9999 {
		return time.Time{}, httpapi.InvalidArg("%s must be an RFC 3339 time such as 2026-12-01T15:00:00Z", name)
	}
	return t.UTC(), nil
}

// adminSearchOrders is GET /api/admin/orders?userId=&subject=&issuer=&productId=&status=&from=&to=&limit=&cursor=
//
// It searches the orders stored in MySQL (an order accepted but not yet
// written is found by GET /api/admin/orders/{orderNo} only), newest first
// by (createdAt, id), keyset-paged. Every filter is optional: userId and
// productId positive integers; subject (an identity provider's sub, with
// its issuer or alone when no other issuer has that subject: 400 otherwise;
// not with userId) names the buyer as the provider does, a subject never
// seen has no orders; status one of PROCESSING, WAITING_PAY, PAID,
// CANCELLED, FAILED, from (inclusive) and to (exclusive) RFC 3339 times on
// createdAt. limit 1…200 (50); cursor the previous page's nextCursor.
// 200 {"orders": [Order + "userId"], "nextCursor": "..." ("" on the last
// page)}; 400 INVALID_ARGUMENT; 401; 403.
func (s *API) adminSearchOrders(ctx *fasthttp.RequestCtx, _ auth.Claims) {
	var f persistence.OrderFilter
	var err error
	limit, cursor, err := pageArgs(ctx)
	if err == nil {
		f.UserID, err = positiveArg(ctx, "userId")
	}
	if err == nil {
		f.ProductID, err = positiveArg(ctx, "productId")
	}
	var unknownSubject bool
	if err == nil {
		unknownSubject, err = s.subjectArg(ctx, &f)
	}
	if err == nil {
		f.From, err = timeArg(ctx, "from")
	}
	if err == nil {
		f.To, err = timeArg(ctx, "to")
	}
	if err == nil {
		if v := ctx.QueryArgs().Peek("status"); v != nil {
			f.Status = order.Status(v)
			if !f.Status.Valid() {
				err = httpapi.InvalidArg("status must be one of PROCESSING, WAITING_PAY, PAID, CANCELLED, FAILED")
			}
		}
	}
	if err == nil && !f.From.IsZero() && !f.To.IsZero() && !f.From.Before(f.To) {
		err = httpapi.InvalidArg("from must be before to")
	}
	if err != nil {
		s.ans.Fail(ctx, err)
		return
	}
	if unknownSubject {
		ctx.Response.Header.Set("Cache-Control", "no-store")
		s.ans.JSON(ctx, fasthttp.StatusOK, adminOrderList{Orders: []adminOrderJSON{}})
		return
	}
	sctx, cancel := s.callCtx(s.cfg.StoreTimeout)
	orders, next, err := s.store.SearchOrders(sctx, f, limit, cursor)
	cancel()
	if err != nil {
		s.ans.Fail(ctx, err)
		return
	}
	out := adminOrderList{Orders: make([]adminOrderJSON, 0, len(orders)), NextCursor: next.String()}
	for _, o := range orders {
		out.Orders = append(out.Orders, adminOrderJSON{OrderJSON: httpapi.ToOrderJSON(o), UserID: o.UserID})
	}
	ctx.Response.Header.Set("Cache-Control", "no-store")
	s.ans.JSON(ctx, fasthttp.StatusOK, out)
}

// subjectArg applies ?subject= (and ?issuer=) to f.UserID: unknown is true
// for a subject never seen (no orders).
func (s *API) subjectArg(ctx *fasthttp.RequestCtx, f *persistence.OrderFilter) (unknown bool, err error) {
	args := ctx.QueryArgs()
	sub, iss := args.Peek("subject"), args.Peek("issuer")
	switch {
	case sub == nil && iss == nil:
		return false, nil
	case sub == nil:
		return false, httpapi.InvalidArg("issuer is given only with subject")
	case f.UserID != 0:
		return false, httpapi.InvalidArg("give userId or subject, not both")
	case !auth.ValidSubject(string(sub)):
		return false, httpapi.InvalidArg("subject must be 1 to %d bytes of printable UTF-8", auth.MaxSubjectBytes)
	case iss != nil && !auth.ValidSubject(string(iss)):
		return false, httpapi.InvalidArg("issuer must be 1 to %d bytes of printable UTF-8", auth.MaxSubjectBytes)
	}
	sctx, cancel := s.callCtx(s.cfg.StoreTimeout)
	ids, err := s.store.FindSubject(sctx, string(iss), string(sub))
	cancel()
	switch {
	case err != nil:
		return false, err
	case len(ids) == 0:
		return true, nil
	case len(ids) > 1:
		return false, httpapi.InvalidArg("subject %q is known under %d issuers: give issuer", sub, len(ids))
	}
	f.UserID = ids[0]
	return false, nil
}

// adminGetOrder is GET /api/admin/orders/{orderNo}: any buyer's order, from
// MySQL or, while the writers have not stored it yet, from its pending
// record in Redis (status PROCESSING, empty history), with userId (and, for
// a buyer of an identity provider, its issuer and subject) and
// "history": [{"status", "at", "event"}], the statuses it went through in
// order, read from its outbox events (persistence.Store.OrderHistory: events
// purged after the outbox retention are missing). 404 NOT_FOUND (the code
// of GET /api/orders/{orderNo}) for an unknown or malformed orderNo; 401; 403.
func (s *API) adminGetOrder(ctx *fasthttp.RequestCtx, _ auth.Claims) {
	no := httpapi.OrderNoParam(ctx)
	if no == "" {
		s.ans.Fail(ctx, persistence.ErrNotFound)
		return
	}
	sctx, cancel := s.callCtx(s.cfg.StoreTimeout)
	defer cancel()
	o, err := s.store.GetOrder(sctx, no)
	if errors.Is(err, persistence.ErrNotFound) {
		p, owner, perr := s.pendingOrder(no)
		switch {
		case perr != nil:
			err = perr
		case owner != 0:
			buyer, berr := s.buyer(sctx, owner)
			if berr != nil {
				s.ans.Fail(ctx, berr)
				return
			}
			s.ans.JSON(ctx, fasthttp.StatusOK, adminOrderHistoryJSON{adminOrderJSON{OrderJSON: p, UserID: owner}, buyer, []historyEntry{}})
			return
		default:
			// The writer may have stored it between the two reads.
			o, err = s.store.GetOrder(sctx, no)
		}
	}
	if err != nil {
		s.ans.Fail(ctx, err)
		return
	}
	hist, err := s.store.OrderHistory(sctx, o)
	if err != nil {
		s.ans.Fail(ctx, err)
		return
	}
	buyer, err := s.buyer(sctx, o.UserID)
	if err != nil {
		s.ans.Fail(ctx, err)
		return
	}
	out := adminOrderHistoryJSON{adminOrderJSON{OrderJSON: httpapi.ToOrderJSON(o), UserID: o.UserID}, buyer, make([]historyEntry, 0, len(hist))}
	for _, h := range hist {
		out.History = append(out.History, historyEntry{Status: h.Status, At: h.At, Event: h.Event})
	}
	ctx.Response.Header.Set("Cache-Control", "no-store")
	s.ans.JSON(ctx, fasthttp.StatusOK, out)
}

// buyer is the identity provider's name of userID ("" fields for an id of
// the direct range).
func (s *API) buyer(ctx context.Context, userID int64) (buyerJSON, error) {
	id, _, err := s.store.IdentityOf(ctx, userID)
	return buyerJSON{Issuer: id.Issuer, Subject: id.Subject}, err
}

// refundJSON is one entry of the refund queue.
type refundJSON struct {
	PaymentNo      string    `json:"paymentNo"`
	OrderNo        string    `json:"orderNo"`
	UserID         int64     `json:"userId"`
	Amount         int64     `json:"amount"` // minor units
	Status         string    `json:"status"` // REFUND_PENDING
	CreatedAt      time.Time `json:"createdAt"`
	WaitingSeconds int64     `json:"waitingSeconds"` // whole seconds since createdAt, on the gateway's clock
}

// refundList is the body of GET /api/admin/refunds.
type refundList struct {
	Refunds    []refundJSON `json:"refunds"`
	NextCursor string       `json:"nextCursor"` // "" on the last page
}

// adminRefunds is GET /api/admin/refunds?limit=&cursor=: the REFUND_PENDING
// payments (money taken for an order that was no longer payable), oldest
// first, keyset-paged (limit 1…200, default 50). 200 {"refunds": [...],
// "nextCursor"}; 400; 401; 403.
func (s *API) adminRefunds(ctx *fasthttp.RequestCtx, _ auth.Claims) {
	limit, cursor, err := pageArgs(ctx)
	if err != nil {
		s.ans.Fail(ctx, err)
		return
	}
	sctx, cancel := s.callCtx(s.cfg.StoreTimeout)
	list, next, err := s.store.ListRefunds(sctx, limit, cursor)
	cancel()
	if err != nil {
		s.ans.Fail(ctx, err)
		return
	}
	now := time.Now()
	out := refundList{Refunds: make([]refundJSON, 0, len(list)), NextCursor: next.String()}
	for _, r := range list {
		out.Refunds = append(out.Refunds, refundJSON{PaymentNo: r.PaymentNo, OrderNo: r.OrderNo, UserID: r.UserID,
			Amount: r.Amount, Status: r.Status, CreatedAt: r.CreatedAt, WaitingSeconds: max(int64(now.Sub(r.CreatedAt)/time.Second), 0)})
	}
	ctx.Response.Header.Set("Cache-Control", "no-store")
	s.ans.JSON(ctx, fasthttp.StatusOK, out)
}

// refundedJSON is the answer of POST /api/admin/payments/{paymentNo}/refund.
type refundedJSON struct {
	PaymentNo  string    `json:"paymentNo"`
	OrderNo    string    `json:"orderNo"`
	Status     string    `json:"status"` // REFUNDED
	RefundNo   string    `json:"refundNo"`
	RefundedAt time.Time `json:"refundedAt"`
}

// adminRefund is POST /api/admin/payments/{paymentNo}/refund {"refundNo": "..."}:
// it records that the REFUND_PENDING payment was refunded (the money went
// back through the provider; Stampede records it), REFUNDED, refundNo and
// refundedAt, once, with its admin_audit entry naming the admin
// (persistence.Store.Refund). refundNo: 1–64 characters of
// [A-Za-z0-9._:-], the operator's idempotency key.
//
// 200 {"paymentNo", "orderNo", "status": "REFUNDED", "refundNo",
// "refundedAt"}, also for the same refundNo again (nothing changes); 400
// INVALID_ARGUMENT; 401; 403; 404 NOT_FOUND (no such payment); 409
// ALREADY_REFUNDED (refunded under another refundNo); 409 NOT_REFUNDABLE (a
// PAID payment); 409 CONFLICT (the refundNo already refunded another
// payment).
func (s *API) adminRefund(ctx *fasthttp.RequestCtx, c auth.Claims) {
	paymentNo, _ := ctx.UserValue("paymentNo").(string)
	if !order.ValidRequestID(paymentNo) {
		s.ans.Fail(ctx, errPaymentNotFound)
		return
	}
	var refundNo string
	fields := [...]httpapi.Field{httpapi.StringField("refundNo", &refundNo)}
	if err := httpapi.DecodeBody(ctx.PostBody(), s.cfg.MaxBodyBytes, fields[:]); err != nil {
		s.ans.Fail(ctx, err)
		return
	}
	if !order.ValidRequestID(refundNo) {
		s.ans.Fail(ctx, httpapi.InvalidArg("refundNo must be 1 to 64 characters of [A-Za-z0-9._:-]"))
		return
	}
	sctx, cancel := s.callCtx(s.cfg.StoreTimeout)
	r, err := s.store.Refund(sctx, c.UserID, paymentNo, refundNo)
	cancel()
	switch {
	case errors.Is(err, persistence.ErrNotFound):
		err = errPaymentNotFound
	case errors.Is(err, persistence.ErrAlreadyRefunded):
		err = &httpapi.APIError{Status: fasthttp.StatusConflict, Code: httpapi.CodeAlreadyRefunded,
			Message: "the payment was already refunded under another refundNo"}
	case errors.Is(err, persistence.ErrNotRefundable):
		err = &httpapi.APIError{Status: fasthttp.StatusConflict, Code: httpapi.CodeNotRefundable,
			Message: "the payment paid its order (PAID): only REFUND_PENDING payments are refunded"}
	case errors.Is(err, persistence.ErrRefundNoReused):
		err = &httpapi.APIError{Status: fasthttp.StatusConflict, Code: httpapi.CodeConflict,
			Message: "refundNo was already used to refund another payment"}
	}
	if err != nil {
		s.ans.Fail(ctx, err)
		return
	}
	if r.Applied {
		s.log.Info("payment refunded", append(httpapi.AdminAttrs(c), "paymentNo", r.PaymentNo, "orderNo", r.OrderNo, "refundNo", r.RefundNo)...)
	}
	s.ans.JSON(ctx, fasthttp.StatusOK, refundedJSON{PaymentNo: r.PaymentNo, OrderNo: r.OrderNo, Status: r.Status,
		RefundNo: r.RefundNo, RefundedAt: r.RefundedAt})
}

// errPaymentNotFound is the 404 of the refund endpoint.
var errPaymentNotFound = &httpapi.APIError{Status: fasthttp.StatusNotFound, Code: httpapi.CodeNotFound, Message: "payment not found"}
