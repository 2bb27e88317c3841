package gateway

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/valyala/fasthttp"

	"github.com/stampede-sh/stampede/gateway/httpapi"
	"github.com/stampede-sh/stampede/lua"
	"github.com/stampede-sh/stampede/persistence"
)

// productJSON is the API shape of a product (SPEC §3). available is the sum
// of the Redis counts of the product's stock shards; total is the units the
// sale started with plus every stock adjustment since (so available ≤ total);
// saleEnd is null for a sale open until sold out.
type productJSON struct {
	ID           int64      `json:"id"`
	Name         string     `json:"name"`
	Price        int64      `json:"price"`
	Total        int64      `json:"total"`
	Available    int64      `json:"available"`
	SaleStart    time.Time  `json:"saleStart"`
	SaleEnd      *time.Time `json:"saleEnd"`
	PerUserLimit int64      `json:"perUserLimit"` // 0 = no limit
	MaxPerOrder  int64      `json:"maxPerOrder"`  // largest quantity of one order
	Shards       int        `json:"shards"`       // Redis stock shards (lua/shards.go)
	State        string     `json:"state"`        // saleState
	Paused       bool       `json:"paused"`       // an admin paused the sale (sale_admin.go)
	SoldOut      bool       `json:"soldOut"`
	ImageURL     string     `json:"imageUrl,omitempty"`    // absolute http(s) URL; absent = none
	Description  string     `json:"description,omitempty"` // plain text; absent = none
	// WaitingRoom: buyers take a place in line first (waitingroom.go).
	WaitingRoom bool `json:"waitingRoom"`
}

// Sale states of the product JSON's state.
const (
	StateUpcoming = "upcoming" // before saleStart
	StateLive     = "live"     // in the window, not paused, stock left
	StatePaused   = "paused"   // in (or before) the window, paused by an admin
	StateEnded    = "ended"    // at or after saleEnd (ended by an admin: saleEnd = that time)
	StateSoldOut  = "soldOut"  // in the window, nothing available
)

// saleState is p's state at now with available units left: ended first,
// then paused, upcoming, soldOut, live.
func saleState(p persistence.Product, available int64, now time.Time) string {
	switch {
	case !now.Before(p.SaleEnd):
		return StateEnded
	case p.Paused:
		return StatePaused
	case now.Before(p.SaleStart):
		return StateUpcoming
	case available <= 0:
		return StateSoldOut
	}
	return StateLive
}

func toProductJSON(p persistence.Product, available int64) productJSON {
	pj := productJSON{
		ID: p.ID, Name: p.Name, Price: p.Price, Total: p.Units(), Available: available,
		SaleStart: p.SaleStart.UTC(), PerUserLimit: p.PerUserLimit, MaxPerOrder: p.MaxPerOrder,
		Shards: max(p.Shards, 1), State: saleState(p, available, time.Now()), Paused: p.Paused,
		SoldOut: available <= 0, ImageURL: p.ImageURL, Description: p.Description,
	}
	if !p.OpenEnded() {
		end := p.SaleEnd.UTC()
		pj.SaleEnd = &end
	}
	return pj
}

// listProducts is GET /api/products: every product, oldest first.
func (s *Server) listProducts(ctx *fasthttp.RequestCtx) {
	snap, err := s.products.Get(s.cfg.StoreTimeout)
	if err != nil {
		s.ans.Fail(ctx, err)
		return
	}
	avail, rooms, err := s.available(snap.List)
	if err != nil {
		s.ans.Fail(ctx, err)
		return
	}
	out := make([]productJSON, len(snap.List))
	for i, p := range snap.List {
		out[i] = toProductJSON(p, avail[i])
		out[i].WaitingRoom = rooms[i]
	}
	s.ans.JSON(ctx, fasthttp.StatusOK, out)
}

// getProduct is GET /api/products/{id}; 404 PRODUCT_NOT_FOUND.
func (s *Server) getProduct(ctx *fasthttp.RequestCtx) {
	raw, _ := ctx.UserValue("id").(string)
	id, ok := httpapi.ParseID(raw)
	if !ok {
		s.ans.Fail(ctx, httpapi.ErrProductNotFound)
		return
	}
	snap, err := s.products.Get(s.cfg.StoreTimeout)
	if err != nil {
		s.ans.Fail(ctx, err)
		return
	}
	i, ok := snap.ByID[id]
	if !ok {
		s.ans.Fail(ctx, httpapi.ErrProductNotFound)
		return
	}
	avail, rooms, err := s.available(snap.List[i : i+1])
	if err != nil {
		s.ans.Fail(ctx, err)
		return
	}
	pj := toProductJSON(snap.List[i], avail[0])
	pj.WaitingRoom = rooms[0]
	s.ans.JSON(ctx, fasthttp.StatusOK, pj)
}

// available reads, in one pipelined round trip, the Redis available count of
// every shard of ps and returns the sum per product, and whether the
// product's waiting room is on (shard 0's room field). A shard whose stock
// hash is missing counts 0.
func (s *Server) available(ps []persistence.Product) ([]int64, []bool, error) {
	out := make([]int64, len(ps))
	rooms := make([]bool, len(ps))
	if len(ps) == 0 {
		return out, rooms, nil
	}
	var cmds []*redis.StringCmd
	roomCmds := make([]*redis.StringCmd, len(ps))
	err := s.redisCall(func(ctx context.Context) error {
		pipe := s.rdb.Pipeline()
		for i, p := range ps {
			for sh := range max(p.Shards, 1) {
				cmds = append(cmds, pipe.HGet(ctx, lua.ShardKeys(p.ID, sh).Stock(), "available"))
			}
			roomCmds[i] = pipe.HGet(ctx, lua.Room(p.ID).Stock(), "room")
		}
		// An error reply of one command (WRONGTYPE) is about its key,
		// handled below per product; only a failed round trip fails all.
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) && isConnError(err) {
			return err
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	next := 0
	for i, p := range ps {
		rooms[i] = roomCmds[i].Val() == "1"
		for range max(p.Shards, 1) {
			n, err := cmds[next].Int64()
			next++
			if err != nil && !errors.Is(err, redis.Nil) {
				// The pipeline went through, so this is about the key: not
				// an integer, or not a hash. That product's data is corrupt:
				// show it with nothing available rather than fail the list
				// for every product.
				s.stockCorrupt(p.ID, &lua.CorruptError{Key: lua.ShardKeys(p.ID, 0).Tag(), Detail: "available: " + err.Error()})
				n = 0
			}
			out[i] += n
		}
	}
	return out, rooms, nil
}
