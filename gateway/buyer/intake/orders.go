package intake

import (
	"errors"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/stampede-sh/stampede/auth"
	"github.com/stampede-sh/stampede/gateway/httpapi"
	"github.com/stampede-sh/stampede/lua"
	"github.com/stampede-sh/stampede/order"
)

// errNoNode answers orders while the gateway holds no valid node lease
// (Deps.NodeValid).
var errNoNode = &httpapi.APIError{Status: 503, Code: httpapi.CodeUnavailable,
	Message: "this gateway holds no orderNo node id yet; retry shortly", RetryAfter: true}

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
func (s *Intake) createOrder(ctx *fasthttp.RequestCtx, c auth.Claims) {
	if !s.Allow(ctx, c.UserID) {
		return
	}
	req, aerr := s.decodeOrder(ctx)
	if aerr != nil {
		s.ans.Fail(ctx, aerr)
		return
	}
	shards, err := s.ShardCount(req.productID)
	if err != nil {
		if errors.Is(err, httpapi.ErrProductNotFound) {
			s.metrics.ReserveOutcome(lua.ErrNotFound)
		}
		s.ans.Fail(ctx, err)
		return
	}
	home := lua.HomeShard(c.UserID, shards)
	now := time.Now()
	if s.soldOut.hit(req.productID, now) {
		s.answerSoldOut(ctx, c, req.productID, home, req.requestID, req.quantity, now)
		return
	}
	if !s.nodeValid(now) { // Deps.NodeValid (the gateway's nodeid.go): no orderNo without a node id of our own
		s.ans.Fail(ctx, errNoNode)
		return
	}
	res, err := s.reserveOrder(c, req, shards, home)
	s.metrics.ReserveOutcome(err)
	s.answerOrder(ctx, req, home, res, err)
}

// orderRequest is a decoded, validated POST /api/orders body.
type orderRequest struct {
	productID, quantity int64
	requestID           string
}

// decodeOrder reads and validates the POST /api/orders body: 400
// INVALID_ARGUMENT for a malformed body or field.
func (s *Intake) decodeOrder(ctx *fasthttp.RequestCtx) (orderRequest, *httpapi.APIError) {
	var req orderRequest
	fields := [...]httpapi.Field{
		httpapi.IntField("productId", &req.productID),
		httpapi.IntField("quantity", &req.quantity),
		httpapi.StringField("requestId", &req.requestID),
	}
	if err := httpapi.DecodeBody(ctx.PostBody(), s.cfg.MaxBodyBytes, fields[:]); err != nil {
		return req, err
	}
	switch {
	case req.productID <= 0:
		return req, httpapi.InvalidArg("productId must be a positive integer")
	case req.quantity < 1:
		return req, httpapi.InvalidArg("quantity must be at least 1")
	case !order.ValidRequestID(req.requestID):
		return req, httpapi.InvalidArg("requestId must be 1 to 64 characters of [A-Za-z0-9._:-]")
	}
	return req, nil
}

// reserveOrder takes req's units on the user's home shard (reserve) and
// does what must precede the answer: the sold-out mark, the replicated
// durability wait, the synchronous MySQL write. err is the reservation's
// outcome (lua.ErrDuplicate: a replay, res its record).
func (s *Intake) reserveOrder(c auth.Claims, req orderRequest, shards, home int) (lua.ReserveResult, error) {
	args := lua.ReserveArgs{
		OrderNo:   s.gen.Next(req.productID, home),
		UserID:    c.UserID,
		RequestID: req.requestID,
		Quantity:  req.quantity,
		TTL:       s.cfg.RequestTTL,
		Sync:      s.cfg.SyncIntake,
	}
	res, dry, err := s.reserve(req.productID, shards, home, args) // room: the admission first
	// A replay tells the stock of its shard too: on a one-shard product a
	// storm of replays after the sell-out keeps the sold-out cache marked
	// (its replays are then answered by the pipelined record lookups)
	// instead of running the script each.
	if dry || (shards == 1 && res.Available == 0 && errors.Is(err, lua.ErrDuplicate)) {
		s.soldOut.mark(req.productID, time.Now())
	}
	if s.durable != nil && (err == nil || errors.Is(err, lua.ErrDuplicate)) {
		// Durability replicated: the 202, and a replay's 200, only once the
		// record is on enough replicas (durability.go).
		if werr := s.durable.wait(lua.ShardKeys(req.productID, home)); werr != nil {
			err = werr
		}
	}
	if err == nil && s.cfg.SyncIntake {
		err = s.persistSync(order.Reservation{
			OrderNo: res.OrderNo, UserID: c.UserID, RequestID: req.requestID, ProductID: req.productID, Shard: home,
			Quantity: req.quantity, UnitPrice: res.UnitPrice, AcceptedAt: res.AcceptedAt,
		})
	}
	return res, err
}

// answerOrder writes the answer to a reservation's outcome: 202 with
// Location, a replay's 200, or the error.
func (s *Intake) answerOrder(ctx *fasthttp.RequestCtx, req orderRequest, home int, res lua.ReserveResult, err error) {
	switch {
	case err == nil:
		s.acceptedBuyer(req.productID, home) // buyers.go
		ctx.Response.Header.Set("Location", "/api/orders/"+res.OrderNo)
		writeOrderState(ctx, fasthttp.StatusAccepted, res.OrderNo, req.requestID, order.Processing)
	case errors.Is(err, lua.ErrDuplicate):
		s.replay(ctx, res.OrderNo, req.requestID, res.Status)
	case errors.Is(err, lua.ErrStockCorrupt):
		s.StockCorrupt(req.productID, err)
		s.ans.FailWith(ctx, err, "", req.requestID)
	default:
		s.ans.FailWith(ctx, err, "", req.requestID)
	}
}

// writeOrderState writes {"orderNo","requestId","status"} without
// encoding/json: orderNo is digits, requestId was validated, status is ours.
func writeOrderState(ctx *fasthttp.RequestCtx, status int, orderNo, requestID string, st order.Status) {
	var a [192]byte
	b := append(a[:0], `{"orderNo":`...)
	b = httpapi.AppendJSONString(b, orderNo)
	b = append(b, `,"requestId":`...)
	b = httpapi.AppendJSONString(b, requestID)
	b = append(b, `,"status":`...)
	b = httpapi.AppendJSONString(b, string(st))
	b = append(b, '}')
	httpapi.WriteBody(ctx, status, b)
}
