package room

import (
	"context"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/stampede-sh/stampede/drop"
	"github.com/stampede-sh/stampede/gateway/httpapi"
	"github.com/stampede-sh/stampede/lua"
)

// A room's public record (issue 28): what any buyer reads to check the
// shuffle (GET /api/products/{id}/drop and …/drop/tickets). The admin
// settings (POST/GET /api/admin/products/{id}/waiting-room) are the
// operator's (gateway/operator/room.go).

// dropState names where a room stands: OFF, PRE_QUEUE (before the
// opening), SHUFFLING (the opening passed, the shuffle is not published
// yet), OPEN (published).
func dropState(st lua.RoomStatus, now time.Time) string {
	switch {
	case !st.On && !st.Shuffled:
		return "OFF"
	case st.Shuffled:
		return "OPEN"
	case now.Before(st.Start) && !st.Closed:
		return "PRE_QUEUE"
	}
	return "SHUFFLING"
}

// DropJSON is GET /api/products/{id}/drop: the public record of a room's
// shuffle, everything a buyer needs to recompute its position.
type DropJSON struct {
	ProductID       int64      `json:"productId"`
	On              bool       `json:"on"`
	Mode            string     `json:"mode"`
	State           string     `json:"state"`
	Rule            string     `json:"rule"`
	Commitment      string     `json:"commitment"`
	PreQueueOpensAt *time.Time `json:"preQueueOpensAt"` // null: open whenever the room is on
	OpensAt         time.Time  `json:"opensAt"`
	PreQueued       int64      `json:"preQueued"`
	Seed            *string    `json:"seed"`
	ListHash        *string    `json:"listHash"`
	ShuffledAt      *time.Time `json:"shuffledAt"`
	ListURL         string     `json:"listUrl"`
	PowCost         int64      `json:"powCost"`
	Winners         *int64     `json:"winners"` // draw, after the close
	Reserve         int64      `json:"reserve"`
}

func ToDropJSON(productID int64, st lua.RoomStatus, now time.Time) DropJSON {
	d := DropJSON{ProductID: productID, On: st.On, Mode: string(st.Mode), State: dropState(st, now), Rule: drop.Rule,
		Commitment: st.Commitment, OpensAt: st.Start, PreQueued: st.PreQueued, PowCost: st.PowCost, Reserve: st.Reserve,
		ListURL: "/api/products/" + strconv.FormatInt(productID, 10) + "/drop/tickets"}
	if st.PreQueue > 0 {
		at := st.Start.Add(-st.PreQueue)
		d.PreQueueOpensAt = &at
	}
	if st.Shuffled {
		seed, lh, at := st.Seed, st.ListHash, st.ShuffledAt
		d.Seed, d.ListHash, d.ShuffledAt = &seed, &lh, &at
		if st.Mode == lua.ModeDraw {
			w := st.Winners
			d.Winners = &w
		}
	}
	return d
}

// dropInfo is GET /api/products/{id}/drop (no auth): the room's public
// record. Before the opening it shows the commitment; from the shuffle on
// also the seed, the list's hash and when it was published.
//
//	200 DropJSON; 404 PRODUCT_NOT_FOUND; 409 WAITING_ROOM_OFF (the product never had a room)
func (s *Room) dropInfo(ctx *fasthttp.RequestCtx) {
	productID, ok := s.ProductID(ctx)
	if !ok {
		return
	}
	st, err := s.Read(productID)
	if err != nil {
		s.ans.Fail(ctx, err)
		return
	}
	if !st.On && st.Commitment == "" {
		s.ans.Fail(ctx, lua.ErrRoomOff)
		return
	}
	s.ans.JSON(ctx, fasthttp.StatusOK, ToDropJSON(productID, st, time.Now()))
}

// Read reads productID's room (404 for an unknown product).
func (s *Room) Read(productID int64) (lua.RoomStatus, error) {
	if _, err := s.shardCount(productID); err != nil {
		return lua.RoomStatus{}, err
	}
	var st lua.RoomStatus
	err := s.redisCall(func(rctx context.Context) (err error) {
		st, err = lua.ReadRoom(rctx, s.rdb, productID)
		return err
	})
	return st, err
}

// dropTickets is GET /api/products/{id}/drop/tickets (no auth): the
// published pre-queue list, text/plain, the ticket ids sorted ascending one
// per line (each ended by "\n"); its SHA-256 is the drop's listHash. It
// never changes once published (this gateway keeps it in memory).
//
//	200 text/plain; 404 PRODUCT_NOT_FOUND; 409 WAITING_ROOM_OFF; 409 SHUFFLE_NOT_PUBLISHED
func (s *Room) dropTickets(ctx *fasthttp.RequestCtx) {
	productID, ok := s.ProductID(ctx)
	if !ok {
		return
	}
	if v, ok := s.lists.Load(productID); ok {
		writeList(ctx, v.([]byte))
		return
	}
	st, err := s.Read(productID)
	if err != nil {
		s.ans.Fail(ctx, err)
		return
	}
	switch {
	case !st.On && st.Commitment == "":
		s.ans.Fail(ctx, lua.ErrRoomOff)
		return
	case !st.Shuffled:
		s.ans.Fail(ctx, httpapi.ErrNotShuffled)
		return
	}
	var list []byte
	err = s.redisCall(func(rctx context.Context) (err error) {
		list, err = lua.PublishedList(rctx, s.rdb, productID)
		return err
	})
	if err != nil {
		s.ans.Fail(ctx, err)
		return
	}
	s.lists.Store(productID, list)
	writeList(ctx, list)
}

func writeList(ctx *fasthttp.RequestCtx, list []byte) {
	ctx.SetStatusCode(fasthttp.StatusOK)
	ctx.SetContentType("text/plain; charset=utf-8")
	ctx.Response.Header.Set("Cache-Control", "public, max-age=300")
	ctx.Response.Header.Set("X-Content-Type-Options", "nosniff")
	ctx.Response.SetBody(list)
}
