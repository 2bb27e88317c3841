package gateway

import (
	"context"
	"errors"
	"math"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/stampede-sh/stampede/auth"
	"github.com/stampede-sh/stampede/lua"
	"github.com/stampede-sh/stampede/persistence"
)

// The waiting room (lua/waitingroom.go). A product created with
// waitingRoom: true, or turned on by POST /api/admin/products/{id}/waiting-room,
// gives each buyer a ticket (POST /api/products/{id}/queue) and lets buyers
// order only once the admission pacer (pipeline/pacer.go) has admitted them;
// an order without a live admission answers 409 NOT_ADMITTED and reserves
// nothing. The check is inside reserve.lua's one round trip: the stock hash
// says whether the room is on, and the gateway passes the admissions key
// once it knows (roomHints). For a product whose room is off the order path
// costs one map read and nothing in Redis but one more field of an HMGET.

var errRoomSharded = &apiError{status: fasthttp.StatusBadRequest, code: CodeInvalidArgument,
	message: "waitingRoom needs a one-shard product (shards: 1): the line and the admissions share the stock's hash tag"}

// roomHints remembers the products whose waiting room this gateway saw on,
// so that their order requests carry the admissions key at once. A missing
// hint is only a cost, never a fault: reserve.lua answers ROOM_ON without
// the key and the request is sent again with it (createOrder).
type roomHints struct {
	m sync.Map // int64 → struct{}
}

func (h *roomHints) on(productID int64) bool {
	_, ok := h.m.Load(productID)
	return ok
}

func (h *roomHints) set(productID int64, on bool) {
	if on {
		h.m.Store(productID, struct{}{})
	} else {
		h.m.Delete(productID)
	}
}

// placeJSON is the answer of POST /api/products/{id}/queue.
type placeJSON struct {
	ProductID int64  `json:"productId"`
	Ticket    int64  `json:"ticket"`
	State     string `json:"state"` // WAITING, ADMITTED, SOLD_OUT
	// Position is the number of tickets up to and including this one still
	// waiting (1 = next); 0 once admitted.
	Position int64 `json:"position"`
	// EtaSeconds is the estimated wait at the pacer's current rate; 0 once
	// admitted; null while the rate is not known yet (no pacer step since
	// the room opened) and for SOLD_OUT (nothing to wait for, unless stock
	// comes back). The push service's queue message says the same for the
	// same state (push/line.go).
	EtaSeconds *int64 `json:"etaSeconds"`
	// RatePerSecond is the admission rate of the pacer's last step.
	RatePerSecond float64 `json:"ratePerSecond"`
	// AdmittedUntil is when an admission ends (ADMITTED only).
	AdmittedUntil *time.Time `json:"admittedUntil,omitempty"`
}

func toPlaceJSON(productID int64, p lua.Place) placeJSON {
	out := placeJSON{ProductID: productID, Ticket: p.Ticket, State: string(p.State), Position: p.Position,
		RatePerSecond: math.Round(p.Rate*1000) / 1000}
	if p.State == lua.PlaceAdmitted {
		d := p.Deadline
		out.AdmittedUntil = &d
		var zero int64
		out.EtaSeconds = &zero
	} else if p.State == lua.PlaceWaiting && p.Rate > 0 {
		eta := int64(math.Ceil(float64(p.Position) / p.Rate))
		out.EtaSeconds = &eta
	}
	return out
}

// takePlace is POST /api/products/{id}/queue (no body): the buyer's place in
// the product's waiting room, a new ticket at the end of the line if the
// buyer holds none that is live. Idempotent per user: asking again answers
// the same ticket while it waits or is admitted.
//
//	200 {"productId","ticket","state","position","etaSeconds","ratePerSecond","admittedUntil"}
//	404 PRODUCT_NOT_FOUND; 409 WAITING_ROOM_OFF (order directly); 409 SOLD_OUT (no ticket given);
//	429 RATE_LIMITED (the per-user bucket of the order path)
func (s *Server) takePlace(ctx *fasthttp.RequestCtx, c auth.Claims) {
	if s.limiter != nil {
		if ok, wait := s.limiter.allow(c.UserID, time.Now()); !ok {
			s.rateLimited(ctx, wait)
			return
		}
	}
	raw, _ := ctx.UserValue("id").(string)
	productID, ok := parseID(raw)
	if !ok {
		s.fail(ctx, errProductNotFound)
		return
	}
	shards, err := s.shardCount(productID)
	if err != nil {
		s.fail(ctx, err)
		return
	}
	if shards > 1 {
		s.fail(ctx, lua.ErrRoomOff)
		return
	}
	var p lua.Place
	err = s.redisCall(func(rctx context.Context) (err error) {
		p, err = lua.Take(rctx, s.rdb, productID, c.UserID)
		return err
	})
	switch {
	case err == nil:
		s.rooms.set(productID, true)
		s.writeJSON(ctx, fasthttp.StatusOK, toPlaceJSON(productID, p))
	case errors.Is(err, lua.ErrRoomOff):
		s.rooms.set(productID, false)
		s.fail(ctx, err)
	default:
		s.fail(ctx, err)
	}
}

// setRoom turns productID's room on or off in Redis and in this gateway's hints.
func (s *Server) setRoom(productID int64, rs lua.RoomSettings) error {
	err := s.redisCall(func(rctx context.Context) error { return lua.SetRoom(rctx, s.rdb, productID, rs) })
	if err == nil {
		s.rooms.set(productID, rs.On)
	}
	return err
}

// Limits of the admin room settings.
const (
	maxRoomCeiling = 1_000_000 // admissions per second
	maxRoomWindow  = 3600      // seconds
)

// adminWaitingRoom is POST /api/admin/products/{id}/waiting-room
//
//	{"on": true|false, "ceiling" (optional, admissions per second, 0 = the pacer's
//	 own ceiling only), "windowSeconds" (optional, 1…3600, default Config.RoomWindow)}
//
// 200 {"productId","on","ceiling","windowSeconds"}; 400 (also for a sharded
// product); 403; 404; every change leaves an admin_audit entry (action
// room) naming the admin. Turning the room off lets every buyer order directly;
// the line is kept and is used again if the room is turned back on. Other
// gateways learn of a room turned on from their next order request for the
// product (ROOM_ON, answered again with the admission check).
func (s *Server) adminWaitingRoom(ctx *fasthttp.RequestCtx, c auth.Claims) {
	raw, _ := ctx.UserValue("id").(string)
	productID, ok := parseID(raw)
	if !ok {
		s.fail(ctx, errProductNotFound)
		return
	}
	var (
		on                 bool
		ceiling, window    int64
		hasCeil, hasWindow bool
	)
	fields := [...]field{
		boolField("on", &on),
		optional(intField("ceiling", &ceiling), &hasCeil),
		optional(intField("windowSeconds", &window), &hasWindow),
	}
	if err := decodeBody(ctx.PostBody(), s.cfg.MaxBodyBytes, fields[:]); err != nil {
		s.fail(ctx, err)
		return
	}
	if !hasWindow {
		window = int64(s.cfg.RoomWindow / time.Second)
	}
	switch {
	case ceiling < 0 || ceiling > maxRoomCeiling:
		s.fail(ctx, invalidArg("ceiling must be from 0 (none) to %d admissions per second", maxRoomCeiling))
		return
	case window < 1 || window > maxRoomWindow:
		s.fail(ctx, invalidArg("windowSeconds must be from 1 to %d", maxRoomWindow))
		return
	}
	shards, err := s.shardCount(productID)
	if err != nil {
		s.fail(ctx, err)
		return
	}
	if on && shards > 1 {
		s.fail(ctx, errRoomSharded)
		return
	}
	if err := s.setRoom(productID, lua.RoomSettings{On: on, Ceiling: float64(ceiling), Window: time.Duration(window) * time.Second}); err != nil {
		s.fail(ctx, err)
		return
	}
	// Audited after the change (it lives in Redis): a failed audit answers
	// 503, and sending the same settings again is harmless and audits them.
	change := map[string]any{"on": on, "ceiling": ceiling, "windowSeconds": window}
	sctx, cancel := s.callCtx(s.cfg.StoreTimeout)
	err = s.store.Audit(sctx, c.UserID, persistence.ActionRoom, productID, change)
	cancel()
	if err != nil {
		s.log.Error("waiting room set but not audited", append(adminAttrs(c), "productId", productID, "on", on, "err", err)...)
		s.fail(ctx, err)
		return
	}
	s.log.Info("waiting room set", append(adminAttrs(c), "productId", productID, "on", on, "ceiling", ceiling, "windowSeconds", window)...)
	s.writeJSON(ctx, fasthttp.StatusOK, map[string]any{"productId": productID, "on": on, "ceiling": ceiling, "windowSeconds": window})
}
