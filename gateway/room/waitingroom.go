package room

import (
	"context"
	"errors"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/stampede-sh/stampede/auth"
	"github.com/stampede-sh/stampede/drop"
	"github.com/stampede-sh/stampede/gateway/httpapi"
	"github.com/stampede-sh/stampede/gateway/rediscall"
	"github.com/stampede-sh/stampede/lua"
)

// The waiting room (lua/waitingroom.go). A product created with
// waitingRoom: true, or turned on by POST /api/admin/products/{id}/waiting-room,
// gives each buyer a ticket (POST /api/products/{id}/queue, one Redis call)
// and lets buyers order only once the admission pacer (pipeline/pacer.go)
// has admitted them; an order without a live admission answers 409
// NOT_ADMITTED and reserves nothing. For a one-shard product the check is
// inside reserve.lua's one round trip: the stock hash says whether the room
// is on, and the gateway passes the admissions key once it knows
// (roomHints). A sharded product's order is the admission saga
// (lua/admission.go): it claims the admission on shard 0, then reserves on
// the buyer's home shard under the claim (reserveSharded). For a product whose room is off the order path costs one map
// read and nothing in Redis but one more field of an HMGET.
//
// Fair drops (issue 28): tickets taken before the opening (the sale's
// start; from preQueueSeconds before it, or any time with 0) are pre-queued
// without a position; at the opening the pacer shuffles them by the room's
// committed seed (package drop) and publishes the seed and the list
// (GET /api/products/{id}/drop, …/drop/tickets), from which a buyer
// recomputes its own position. Mode random admits everyone waiting lowest
// random key first; mode draw picks as many winners as units, and a reserve
// list, at the opening. A room may ask a proof-of-work for every new ticket
// (pow.go).

// roomHints remembers the products whose waiting room this gateway saw on,
// so that their order requests carry the admissions key (or claim the
// admission) at once. A missing hint is only a cost, never a fault:
// reserve.lua answers ROOM_ON without the key or claim and the request is
// sent again with it (createOrder).
type roomHints struct {
	m sync.Map // int64 → struct{}
}

func (h *roomHints) on(productID int64) bool {
	_, ok := h.m.Load(productID)
	return ok
}

// set records whether productID's room is on; a hint already right is not
// written again (every ticket sets it: a read costs a sync.Map far less).
func (h *roomHints) set(productID int64, on bool) {
	if h.on(productID) == on {
		return
	}
	if on {
		h.m.Store(productID, struct{}{})
	} else {
		h.m.Delete(productID)
	}
}

// appendPlace appends the answer of POST /api/products/{id}/queue:
//
//	{"productId","mode","ticket","state","position","shufflePosition","etaSeconds",
//	 "ratePerSecond","waiting","opensAt","admittedUntil"}
//
// ticket is the opaque ticket id; position the tickets still waiting up to
// and including this one (1 = next; 0 once admitted, before the shuffle and
// in random mode); shufflePosition a pre-queued ticket's place in the
// published shuffle (0 otherwise); etaSeconds the estimated wait at the
// pacer's current rate (null while unknown, for SOLD_OUT — nothing to wait
// for unless stock comes back, as the push message says —, in random mode
// and on a draw's reserve list, which moves only when a win passes on); waiting the
// tickets in a random room's pool; opensAt the opening (the sale's start);
// admittedUntil the end of an admission (ADMITTED only). Written without
// encoding/json: every string is ours or validated.
func appendPlace(b []byte, productID int64, p lua.Place) []byte {
	b = append(b, `{"productId":`...)
	b = strconv.AppendInt(b, productID, 10)
	mode := p.Mode
	if mode == "" {
		mode = lua.ModeFIFO
	}
	b = append(b, `,"mode":`...)
	b = httpapi.AppendJSONString(b, string(mode))
	b = append(b, `,"ticket":`...)
	b = httpapi.AppendJSONString(b, p.Ticket)
	b = append(b, `,"state":`...)
	b = httpapi.AppendJSONString(b, string(p.State))
	b = append(b, `,"position":`...)
	b = strconv.AppendInt(b, p.Position, 10)
	b = append(b, `,"shufflePosition":`...)
	b = strconv.AppendInt(b, p.ShufflePosition, 10)
	b = append(b, `,"etaSeconds":`...)
	switch {
	case p.State == lua.PlaceAdmitted:
		b = append(b, '0')
	case p.Rate > 0 && p.Position > 0 && p.Mode != lua.ModeDraw && p.State == lua.PlaceWaiting:
		b = strconv.AppendInt(b, int64(math.Ceil(float64(p.Position)/p.Rate)), 10)
	default:
		b = append(b, "null"...)
	}
	b = append(b, `,"ratePerSecond":`...)
	b = strconv.AppendFloat(b, math.Round(p.Rate*1000)/1000, 'f', -1, 64)
	b = append(b, `,"waiting":`...)
	b = strconv.AppendInt(b, p.Waiting, 10)
	b = append(b, `,"opensAt":`...)
	b = appendTime(b, p.OpensAt)
	if p.State == lua.PlaceAdmitted {
		b = append(b, `,"admittedUntil":`...)
		b = appendTime(b, p.Deadline)
	}
	return append(b, '}')
}

// appendTime appends t as an RFC 3339 UTC JSON string, or null when zero.
func appendTime(b []byte, t time.Time) []byte {
	if t.IsZero() {
		return append(b, "null"...)
	}
	b = append(b, '"')
	b = t.UTC().AppendFormat(b, time.RFC3339Nano)
	return append(b, '"')
}

// ProductID reads the route's {id}; false (answered 404) if it is not a
// product id.
func (s *Room) ProductID(ctx *fasthttp.RequestCtx) (int64, bool) {
	raw, _ := ctx.UserValue("id").(string)
	productID, ok := httpapi.ParseID(raw)
	if !ok {
		s.ans.Fail(ctx, httpapi.ErrProductNotFound)
		return 0, false
	}
	return productID, true
}

// takePlace is POST /api/products/{id}/queue, body optional
// {"altcha": "<the ALTCHA widget's payload>"}: the buyer's place in the
// product's waiting room (or draw entry), a new ticket if the buyer holds
// none that is live. Idempotent per user: asking again answers the same
// ticket while it lives, without a new proof-of-work. One Redis call.
//
//	200 place (appendPlace); states WAITING, ADMITTED, SOLD_OUT, PRE_QUEUE, SHUFFLING, and for a
//	    draw EXPIRED (the win passed on), ORDERED, LOST
//	400 a body that is not {"altcha": string}; 403 POW_REQUIRED, POW_INVALID; 404 PRODUCT_NOT_FOUND;
//	409 WAITING_ROOM_OFF (order directly), SOLD_OUT (no ticket given), PRE_QUEUE_NOT_OPEN,
//	DRAW_CLOSED, POW_REUSED, SALE_NOT_ACTIVE (the sale ended: no ticket, and a place or a live
//	admission is over), PURCHASE_LIMIT_EXCEEDED (the buyer holds the per-user limit already;
//	one-shard products, lua.TakeArgs.CheckLimit); 429 RATE_LIMITED (the order path's per-user bucket)
func (s *Room) takePlace(ctx *fasthttp.RequestCtx, c auth.Claims) {
	if s.limit != nil && !s.limit(ctx, c.UserID) {
		return
	}
	productID, ok := s.ProductID(ctx)
	if !ok {
		return
	}
	var args lua.TakeArgs
	if body := ctx.PostBody(); len(body) > 0 {
		var payload string
		fields := [...]httpapi.Field{httpapi.Optional(httpapi.StringField("altcha", &payload), nil)}
		if err := httpapi.DecodeBody(body, s.cfg.MaxBodyBytes, fields[:]); err != nil {
			s.ans.Fail(ctx, err)
			return
		}
		if payload != "" {
			ch, ttl, err := s.pow.verify(payload, c.UserID, productID, time.Now())
			if err != nil {
				s.ans.Fail(ctx, err)
				return
			}
			args.PowChallenge, args.PowTTL = ch, ttl
		}
	}
	shards, err := s.shardCount(productID) // cached: 404 for an unknown product without a script
	if err != nil {
		s.ans.Fail(ctx, err)
		return
	}
	args.UserID = c.UserID
	args.CheckLimit = shards == 1 // a sharded product counts a user's units on the home shard
	p, err := s.take(productID, args)
	if errors.Is(err, lua.ErrTicketIDTaken) { // 64 random bits met a pre-queued ticket's: practically never
		p, err = s.take(productID, args)
	}
	switch {
	case err == nil:
		s.hints.set(productID, true)
		var a [320]byte
		httpapi.WriteBody(ctx, fasthttp.StatusOK, appendPlace(a[:0], productID, p))
	case errors.Is(err, lua.ErrPreQueueNotOpen):
		s.ans.Fail(ctx, &httpapi.APIError{Status: fasthttp.StatusConflict, Code: httpapi.CodePreQueueNotOpen,
			Message: "the pre-queue opens at " + p.OpensAt.Format(time.RFC3339) + ": come back then"})
	case errors.Is(err, lua.ErrRoomOff):
		s.hints.set(productID, false)
		s.ans.Fail(ctx, err)
	case errors.Is(err, lua.ErrLimitExceeded):
		s.ans.Fail(ctx, &httpapi.APIError{Status: fasthttp.StatusConflict, Code: httpapi.CodePurchaseLimitExceeded,
			Message: "you already hold this product's per-user limit: there is nothing left for you to order, so no ticket"})
	default:
		s.ans.Fail(ctx, err)
	}
}

// take runs room_take.lua with a new ticket id, in one call with other
// requests' (Config.RoomPipeline) or alone.
func (s *Room) take(productID int64, args lua.TakeArgs) (lua.Place, error) {
	tid, err := drop.NewTicketID()
	if err != nil {
		return lua.Place{}, err
	}
	args.TicketID = tid
	if s.takes != nil {
		c := s.takes.Do(lua.TakeCall{ProductID: productID, Args: args})
		return c.Place, c.Err
	}
	var p lua.Place
	err = s.redisCall(func(rctx context.Context) (err error) {
		p, err = lua.Take(rctx, s.rdb, productID, args)
		return err
	})
	return p, err
}

// takeWorkers is the take batcher's pipelines in flight: each is one
// room_take.lua run per product (lua.TakeMany), and Redis runs them one
// after another anyway, so fewer workers make larger runs, whose shared
// reads and writes are paid once. One: while its call is out, the
// requests that arrive gather into the next (bench "tickets", 2-core AMD
// host: 20–22 tickets a run against 13–14 with two, Redis's CPU per ticket
// about a tenth less on average, the rate the same within the noise); the
// longest extra wait is one round trip to Redis
// (docs/waiting-room-performance.md "One take pipeline in flight").
const takeWorkers = 1

// takeBatcher collects the take calls of concurrent requests (pipeBatcher,
// like the reserve calls of reserve_batch.go) into one room_take.lua call
// per product (lua.TakeMany).
type takeBatcher struct {
	*rediscall.PipeBatcher[lua.TakeCall]
}

func newTakeBatcher(s *Room, max int) *takeBatcher {
	one := func(c *lua.TakeCall) {
		c.Err = s.redisCall(func(ctx context.Context) (err error) {
			c.Place, err = lua.Take(ctx, s.rdb, c.ProductID, c.Args)
			return err
		})
	}
	many := func(cs []*lua.TakeCall) {
		calls := make([]lua.TakeCall, len(cs))
		for i, c := range cs {
			calls[i] = *c
		}
		ran := false
		err := s.redisCall(func(ctx context.Context) error {
			ran = true
			lua.TakeMany(ctx, s.rdb, calls)
			for i := range calls { // the breaker counts a failed round trip once
				if rediscall.IsFailure(calls[i].Err) {
					return calls[i].Err
				}
			}
			return nil
		})
		for i, c := range cs {
			if ran {
				c.Place, c.Err = calls[i].Place, calls[i].Err
			} else {
				c.Err = err
			}
		}
	}
	b := rediscall.NewPipeBatcher(max, one, many)
	b.Workers = takeWorkers
	return &takeBatcher{b}
}

// Reserve is the order path's one reserve.lua call, with the room's
// admission (a sharded product's through reserveSharded, which claims the
// waiting room first); dry: the shard is
// out of stock. A one-shard product whose waiting room was turned on since
// this gateway last looked is tried again with its admission checked.
func (s *Room) Reserve(productID int64, shards, home int, args lua.ReserveArgs) (res lua.ReserveResult, dry bool, err error) {
	if shards > 1 {
		return s.reserveSharded(productID, shards, home, args) // lua/shards.go, waiting room claimed first
	}
	args.Admission = s.hints.on(productID)                         // roomHints: one map read
	res, dry, err = s.stock.Reserve(productID, shards, home, args) // lua/shards.go
	if errors.Is(err, lua.ErrRoomOn) {
		s.hints.set(productID, true)
		args.Admission = true
		res, dry, err = s.stock.Reserve(productID, shards, home, args)
	}
	return res, dry, err
}

// reserveSharded reserves for a sharded product, whose waiting room (if on)
// lives in shard 0's slot while the reservation runs on the buyer's home
// shard: the admission saga (lua/admission.go, lua.AdmissionSaga) claims the
// admission, reserves under the claim, and marks it used or — only when the
// home shard confirms nothing was reserved with it — gives it back. A
// product whose room is off costs one round trip; a room product two, or
// three for the order that uses the admission.
func (s *Room) reserveSharded(productID int64, shards, home int, args lua.ReserveArgs) (lua.ReserveResult, bool, error) {
	if !s.hints.on(productID) {
		res, dry, err := s.stock.Reserve(productID, shards, home, args)
		if !errors.Is(err, lua.ErrRoomOn) {
			return res, dry, err
		}
		s.hints.set(productID, true)
	}
	return s.admissions.Order(productID, shards, home, args)
}

// newAdmissionSaga is the gateway's admission saga: its Redis steps run
// under redisCall, its reservations through the sharded stock (batched and
// timed like any other).
func (s *Room) newAdmissionSaga() *lua.AdmissionSaga {
	return &lua.AdmissionSaga{RDB: s.rdb, Do: s.redisCall, Reserve: s.stock.Reserve,
		OnFault: func(step string, productID, userID int64, err error) {
			s.log.Warn("waiting room: admission claim left pending (the buyer's next order settles it)",
				"step", step, "productId", productID, "userId", userID, "err", err)
		}}
}

// roomPowCost is the proof-of-work cost of productID's room (one HMGET);
// lua.ErrRoomOff when the room is off.
func (s *Room) roomPowCost(productID int64) (int64, error) {
	st, err := s.Read(productID)
	if err != nil {
		return 0, err
	}
	if !st.On {
		return 0, lua.ErrRoomOff
	}
	return st.PowCost, nil
}
