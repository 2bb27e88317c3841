package buyer

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"
	"github.com/valyala/fasthttp"

	"github.com/stampede-sh/stampede/gateway/httpapi"
	"github.com/stampede-sh/stampede/gateway/rediscall"
	"github.com/stampede-sh/stampede/lua"
	"github.com/stampede-sh/stampede/persistence"
)

// listProducts is GET /api/products: every product, oldest first.
func (s *API) listProducts(ctx *fasthttp.RequestCtx) {
	snap, err := s.products.Get(s.cfg.StoreTimeout)
	if err != nil {
		s.ans.Fail(ctx, err)
		return
	}
	avail, rooms, err := s.Available(snap.List)
	if err != nil {
		s.ans.Fail(ctx, err)
		return
	}
	out := make([]httpapi.ProductJSON, len(snap.List))
	for i, p := range snap.List {
		out[i] = httpapi.ToProductJSON(p, avail[i])
		out[i].WaitingRoom = rooms[i]
	}
	s.ans.JSON(ctx, fasthttp.StatusOK, out)
}

// getProduct is GET /api/products/{id}; 404 PRODUCT_NOT_FOUND.
func (s *API) getProduct(ctx *fasthttp.RequestCtx) {
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
	avail, rooms, err := s.Available(snap.List[i : i+1])
	if err != nil {
		s.ans.Fail(ctx, err)
		return
	}
	pj := httpapi.ToProductJSON(snap.List[i], avail[0])
	pj.WaitingRoom = rooms[0]
	s.ans.JSON(ctx, fasthttp.StatusOK, pj)
}

// Available reads, in one pipelined round trip, the Redis available count of
// every shard of ps and returns the sum per product, and whether the
// product's waiting room is on (shard 0's room field). A shard whose stock
// hash is missing counts 0.
func (s *API) Available(ps []persistence.Product) ([]int64, []bool, error) {
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
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) && rediscall.IsConnError(err) {
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
				s.intake.StockCorrupt(p.ID, &lua.CorruptError{Key: lua.ShardKeys(p.ID, 0).Tag(), Detail: "available: " + err.Error()})
				n = 0
			}
			out[i] += n
		}
	}
	return out, rooms, nil
}
