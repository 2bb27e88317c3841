package operator

import (
	"context"
	"errors"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/stampede-sh/stampede/auth"
	"github.com/stampede-sh/stampede/drop"
	"github.com/stampede-sh/stampede/gateway/httpapi"
	"github.com/stampede-sh/stampede/gateway/room"
	"github.com/stampede-sh/stampede/lua"
	"github.com/stampede-sh/stampede/persistence"
)

// A room's terms (issue 28): the admin settings (POST/GET
// /api/admin/products/{id}/waiting-room), stored in MySQL and written to
// Redis. The room itself — tickets, the public record, the admission on the
// order path — is package room's.

// Limits of the admin room settings.
const (
	maxRoomCeiling  = 1_000_000  // admissions per second
	maxRoomWindow   = 3600       // seconds
	maxRoomPreQueue = 30 * 86400 // seconds
	maxRoomReserve  = 1_000_000  // entries
	maxRoomPowCost  = 10_000_000 // maxnumber: about 5 million SHA-256 on average
)

// roomTermsJSON is the answer of POST /api/admin/products/{id}/waiting-room.
type roomTermsJSON struct {
	ProductID       int64  `json:"productId"`
	On              bool   `json:"on"`
	Mode            string `json:"mode"`
	Ceiling         int64  `json:"ceiling"`
	WindowSeconds   int64  `json:"windowSeconds"`
	PreQueueSeconds int64  `json:"preQueueSeconds"`
	Reserve         int64  `json:"reserve"`
	PowCost         int64  `json:"powCost"`
	Commitment      string `json:"commitment"`
}

func toRoomTermsJSON(t persistence.RoomTerms) roomTermsJSON {
	return roomTermsJSON{ProductID: t.ProductID, On: t.On, Mode: t.Mode, Ceiling: t.Ceiling,
		WindowSeconds: int64(t.Window / time.Second), PreQueueSeconds: int64(t.PreQueue / time.Second),
		Reserve: t.Reserve, PowCost: t.PowCost, Commitment: t.Commitment}
}

// RoomSettings are the Redis side (lua.SetRoom) of a product's stored room
// terms, shards being the product's stock shards: what the admin endpoint
// writes, and what a reload into an emptied Redis DB writes again
// (`stampede redis-takeover`).
func RoomSettings(t persistence.RoomTerms, shards int) lua.RoomSettings {
	return lua.RoomSettings{On: t.On, Ceiling: float64(t.Ceiling), Window: t.Window, Mode: lua.RoomMode(t.Mode),
		PreQueue: t.PreQueue, Reserve: t.Reserve, PowCost: t.PowCost, Commitment: t.Commitment, Shards: shards}
}

// saveRoom stores t (drawing the room's seed if it has none: the stored
// one never changes) and writes it to Redis, shards being the product's
// stock shards. It returns the stored terms, with their commitment.
func (s *API) saveRoom(adminID int64, t persistence.RoomTerms, shards int) (persistence.RoomTerms, error) {
	seed, err := drop.NewSeed()
	if err != nil {
		return t, err
	}
	t.Seed, t.Commitment = seed.Hex(), seed.Commitment()
	sctx, cancel := s.callCtx(s.cfg.StoreTimeout)
	t, err = s.store.SaveRoom(sctx, adminID, t)
	cancel()
	if err != nil {
		return t, err
	}
	rs := RoomSettings(t, shards)
	err = s.redisCall(func(rctx context.Context) error { return lua.SetRoom(rctx, s.rdb, t.ProductID, rs) })
	if err == nil {
		s.room.Seen(t.ProductID, t.On)
	}
	return t, err
}

// adminWaitingRoom is POST /api/admin/products/{id}/waiting-room
//
//	{"on": true|false (required), "ceiling" (admissions per second, 0 = the pacer's own
//	 ceiling only), "windowSeconds" (1…3600: how long an admission, or a draw's win, lasts),
//	 "mode" ("fifo" | "random" | "draw"), "preQueueSeconds" (0…2592000: how long before the
//	 sale's start tickets can be taken; 0 = any time), "reserve" (draw: reserve list length,
//	 0…1000000), "powCost" (proof-of-work per new ticket, the challenges' maxnumber, 0…10000000;
//	 0 = none)}
//
// Fields left out keep their stored value (defaults: ceiling 0, window Config.RoomWindow, fifo,
// 0, 0, 0). 200 {"productId","on","mode","ceiling","windowSeconds","preQueueSeconds","reserve",
// "powCost","commitment"}: the commitment (hex SHA-256 of the room's secret seed, drawn the
// first time, never changed) is public at once, the seed at the opening. 400 (a draw needs
// maxPerOrder 1); 403; 404; 409 ROOM_STARTED (mode, preQueueSeconds or reserve changed once
// the pre-queue has a ticket or the room opened). Turning the room off lets every buyer order
// directly; the line is kept and is used again if the room is turned back on. Other gateways
// learn of a room turned on from their next order request for the product (ROOM_ON, answered
// again with the admission check).
func (s *API) adminWaitingRoom(ctx *fasthttp.RequestCtx, c auth.Claims) {
	productID, ok := s.room.ProductID(ctx)
	if !ok {
		return
	}
	var (
		on                                   bool
		ceiling, window, pq, reserve, pow    int64
		hasCeil, hasWin, hasPQ, hasRes, hasP bool
		mode                                 string
		hasMode                              bool
	)
	fields := [...]httpapi.Field{
		httpapi.BoolField("on", &on),
		httpapi.Optional(httpapi.IntField("ceiling", &ceiling), &hasCeil),
		httpapi.Optional(httpapi.IntField("windowSeconds", &window), &hasWin),
		httpapi.Optional(httpapi.StringField("mode", &mode), &hasMode),
		httpapi.Optional(httpapi.IntField("preQueueSeconds", &pq), &hasPQ),
		httpapi.Optional(httpapi.IntField("reserve", &reserve), &hasRes),
		httpapi.Optional(httpapi.IntField("powCost", &pow), &hasP),
	}
	if err := httpapi.DecodeBody(ctx.PostBody(), s.cfg.MaxBodyBytes, fields[:]); err != nil {
		s.ans.Fail(ctx, err)
		return
	}
	shards, err := s.shardCount(productID)
	if err != nil {
		s.ans.Fail(ctx, err)
		return
	}
	sctx, cancel := s.callCtx(s.cfg.StoreTimeout)
	t, err := s.store.Room(sctx, productID)
	cancel()
	switch {
	case errors.Is(err, persistence.ErrNotFound):
		t = persistence.RoomTerms{ProductID: productID, Mode: string(lua.ModeFIFO), Window: s.cfg.RoomWindow}
	case err != nil:
		s.ans.Fail(ctx, err)
		return
	}
	t.On = on
	if hasCeil {
		t.Ceiling = ceiling
	}
	if hasWin {
		t.Window = time.Duration(window) * time.Second
	}
	if hasMode {
		t.Mode = mode
	}
	if hasPQ {
		t.PreQueue = time.Duration(pq) * time.Second
	}
	if hasRes {
		t.Reserve = reserve
	}
	if hasP {
		t.PowCost = pow
	}
	if err := s.checkRoomTerms(productID, t); err != nil {
		s.ans.Fail(ctx, err)
		return
	}
	if t, err = s.saveRoom(c.UserID, t, shards); err != nil {
		s.ans.Fail(ctx, err)
		return
	}
	s.log.Info("waiting room set", append(httpapi.AdminAttrs(c), "productId", productID, "on", t.On, "mode", t.Mode, "ceiling", t.Ceiling,
		"window", t.Window, "preQueue", t.PreQueue, "reserve", t.Reserve, "powCost", t.PowCost)...)
	s.ans.JSON(ctx, fasthttp.StatusOK, toRoomTermsJSON(t))
}

// checkRoomTerms validates t for productID: bounds and (ROOM_STARTED) no
// change of mode, pre-queue or reserve once a ticket exists. A draw's
// maxPerOrder is checked by the store (persistence.ErrDrawOnePerOrder).
func (s *API) checkRoomTerms(productID int64, t persistence.RoomTerms) error {
	window := int64(t.Window / time.Second)
	pq := int64(t.PreQueue / time.Second)
	switch {
	case t.Ceiling < 0 || t.Ceiling > maxRoomCeiling:
		return httpapi.InvalidArg("ceiling must be from 0 (none) to %d admissions per second", maxRoomCeiling)
	case window < 1 || window > maxRoomWindow:
		return httpapi.InvalidArg("windowSeconds must be from 1 to %d", maxRoomWindow)
	case !lua.ValidMode(lua.RoomMode(t.Mode)):
		return httpapi.InvalidArg("mode must be fifo, random or draw")
	case pq < 0 || pq > maxRoomPreQueue:
		return httpapi.InvalidArg("preQueueSeconds must be from 0 (any time before the opening) to %d", maxRoomPreQueue)
	case t.Reserve < 0 || t.Reserve > maxRoomReserve:
		return httpapi.InvalidArg("reserve must be from 0 to %d", maxRoomReserve)
	case t.PowCost < 0 || t.PowCost > maxRoomPowCost:
		return httpapi.InvalidArg("powCost must be from 0 (none) to %d", maxRoomPowCost)
	}
	st, err := s.room.Read(productID)
	if err != nil {
		return err
	}
	started := st.PreQueued > 0 || st.Closed || st.Issued > 0
	if started && (string(st.Mode) != t.Mode || st.PreQueue != t.PreQueue || st.Reserve != t.Reserve) {
		return lua.ErrRoomLocked
	}
	return nil
}

// roomStatusJSON is GET /api/admin/products/{id}/waiting-room: the terms,
// the public record and the live counters the console shows.
type roomStatusJSON struct {
	ProductID     int64         `json:"productId"`
	Terms         roomTermsJSON `json:"terms"`
	Drop          room.DropJSON `json:"drop"`
	Paused        bool          `json:"paused"`
	Available     int64         `json:"available"`     // units left (sharded: at the pacer's last step)
	Issued        int64         `json:"issued"`        // places given (pre-queued ones from the close)
	AdmittedUpTo  int64         `json:"admittedUpTo"`  // places up to it admitted or finished
	Admitted      int64         `json:"admitted"`      // admissions (a draw: wins) made
	Expired       int64         `json:"expired"`       // admissions not used in time: passed on
	Claimed       int64         `json:"claimed"`       // sharded: admissions claimed by an order and not given back
	Used          int64         `json:"used"`          // sharded: claims that led to a reservation (lua/admission.go)
	Live          int64         `json:"live"`          // admissions not yet used or expired
	Waiting       int64         `json:"waiting"`       // tickets not yet admitted (a draw: reserve list left)
	Cutoff        int64         `json:"cutoff"`        // draw: last place that can still win
	RatePerSecond float64       `json:"ratePerSecond"` // the pacer's last step
}

// adminRoomStatus is GET /api/admin/products/{id}/waiting-room: the room's
// terms, its public record and its counters (403 for a buyer; 404; 409
// WAITING_ROOM_OFF for a product that never had a room). The seed shows only
// once published.
func (s *API) adminRoomStatus(ctx *fasthttp.RequestCtx, _ auth.Claims) {
	productID, ok := s.room.ProductID(ctx)
	if !ok {
		return
	}
	st, err := s.room.Read(productID)
	if err != nil {
		s.ans.Fail(ctx, err)
		return
	}
	sctx, cancel := s.callCtx(s.cfg.StoreTimeout)
	t, err := s.store.Room(sctx, productID)
	cancel()
	if errors.Is(err, persistence.ErrNotFound) {
		if !st.On {
			s.ans.Fail(ctx, lua.ErrRoomOff)
			return
		}
		// A room turned on before its terms were stored (issue 17).
		t = persistence.RoomTerms{ProductID: productID, Mode: string(st.Mode), Window: st.Window, Commitment: st.Commitment}
	} else if err != nil {
		s.ans.Fail(ctx, err)
		return
	}
	t.On = st.On
	out := roomStatusJSON{ProductID: productID, Terms: toRoomTermsJSON(t), Drop: room.ToDropJSON(productID, st, time.Now()),
		Paused: st.Paused, Available: st.Available, Issued: st.Issued, AdmittedUpTo: st.UpTo, Admitted: st.Admitted,
		Expired: st.Expired, Claimed: st.Claimed, Used: st.Used, Live: st.Live, Waiting: st.Waiting(), Cutoff: st.Cutoff, RatePerSecond: st.Rate}
	s.ans.JSON(ctx, fasthttp.StatusOK, out)
}
