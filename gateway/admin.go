package gateway

import (
	"fmt"
	"math"
	"net/url"
	"time"
	"unicode/utf8"

	"github.com/valyala/fasthttp"

	"github.com/stampede-sh/stampede/auth"
	"github.com/stampede-sh/stampede/lua"
	"github.com/stampede-sh/stampede/persistence"
)

// Limits of admin product fields.
const (
	maxShards          = lua.MaxShards // stock shards per product (hot-SKU sharding, lua/shards.go)
	maxNameChars       = 200           // product.name is VARCHAR(200)
	defaultMaxPerOrder = 10
	maxImageURLBytes   = 2048 // product.image_url is VARCHAR(2048), ASCII after validation
	maxDescChars       = 2000 // product.description is VARCHAR(2000)
	// adminBodyBytes is the body limit of product creation: a description
	// of maxDescChars, each \uXXXX-escaped, and an image URL fit.
	adminBodyBytes = 16 << 10
)

// createProduct is POST /api/admin/products
//
//	{"name", "price", "stock", "saleStart", "saleEnd", "perUserLimit",
//	 "shards" (optional, 1…16, default 1: see lua/shards.go), "maxPerOrder" (optional, default
//	 min(perUserLimit or 10, 10)), "imageUrl" (optional: an absolute http or
//	 https URL of at most 2048 bytes), "description" (optional: at most 2000
//	 characters of text)}
//
// It stores the product and its stock row in MySQL, then loads each stock
// shard into Redis with its share of the stock (split evenly, the remainder
// to the first shards) and registers the shard's intake stream for the
// writers. 201 product; 400; 401; 403. If Redis fails after MySQL stored the
// product the answer is 503 and the product exists unloaded: the sweeper's
// reconcile reports it, and a retry of the load is safe (load.lua never
// overwrites available).
func (s *Server) createProduct(ctx *fasthttp.RequestCtx, _ auth.Claims) {
	var (
		p                    persistence.Product
		stock, limit, shards int64
		maxPer               int64
		hasShards, hasMax    bool
		room, hasRoom        bool
	)
	fields := [...]field{
		stringField("name", &p.Name),
		intField("price", &p.Price),
		intField("stock", &stock),
		timeField("saleStart", &p.SaleStart),
		timeField("saleEnd", &p.SaleEnd),
		intField("perUserLimit", &limit),
		optional(intField("shards", &shards), &hasShards),
		optional(intField("maxPerOrder", &maxPer), &hasMax),
		optional(stringField("imageUrl", &p.ImageURL), nil),
		optional(stringField("description", &p.Description), nil),
		optional(boolField("waitingRoom", &room), &hasRoom),
	}
	if err := decodeBody(ctx.PostBody(), max(s.cfg.MaxBodyBytes, adminBodyBytes), fields[:]); err != nil {
		s.fail(ctx, err)
		return
	}
	if !hasShards {
		shards = 1
	}
	if !hasMax {
		maxPer = defaultMaxPerOrder
		if limit > 0 {
			maxPer = min(limit, defaultMaxPerOrder)
		}
	}
	p.SaleStart = p.SaleStart.UTC().Truncate(time.Millisecond) // DATETIME(3) and unix ms in Redis
	p.SaleEnd = p.SaleEnd.UTC().Truncate(time.Millisecond)
	if err := validateProduct(p, stock, limit, shards, maxPer); err != nil {
		s.fail(ctx, err)
		return
	}
	if room && shards > 1 {
		s.fail(ctx, errRoomSharded)
		return
	}
	p.Total, p.PerUserLimit, p.Shards, p.MaxPerOrder = stock, limit, int(shards), maxPer

	sctx, cancel := s.callCtx(s.cfg.StoreTimeout)
	p, err := s.store.CreateProduct(sctx, p)
	cancel()
	if err != nil {
		s.fail(ctx, err)
		return
	}
	s.products.invalidate()
	if err := s.loadProduct(p); err != nil {
		s.log.Error("product stored in MySQL but not loaded into Redis", "productId", p.ID, "err", err)
		s.fail(ctx, err)
		return
	}
	if room {
		if err := s.setRoom(p.ID, lua.RoomSettings{On: true, Window: s.cfg.RoomWindow}); err != nil {
			s.log.Error("product stored and loaded but its waiting room not turned on", "productId", p.ID, "err", err)
			s.fail(ctx, err)
			return
		}
	}
	s.log.Info("product created", "productId", p.ID, "stock", p.Total, "shards", p.Shards, "waitingRoom", room)
	pj := toProductJSON(p, p.Total)
	pj.WaitingRoom = room
	s.writeJSON(ctx, fasthttp.StatusCreated, pj)
}

func validateProduct(p persistence.Product, stock, limit, shards, maxPer int64) error {
	switch n := utf8.RuneCountInString(p.Name); {
	case n == 0:
		return invalidArg("name must not be empty")
	case n > maxNameChars:
		return invalidArg("name must be at most %d characters", maxNameChars)
	}
	if err := validateMedia(p.ImageURL, p.Description); err != nil {
		return err
	}
	switch {
	case p.Price < 0:
		return invalidArg("price must not be negative")
	case stock < 0:
		return invalidArg("stock must not be negative")
	case limit < 0 || limit > math.MaxInt32:
		return invalidArg("perUserLimit must be from 0 (no limit) to %d", math.MaxInt32)
	case shards < 1 || shards > maxShards:
		return invalidArg("shards must be from 1 to %d", maxShards)
	case maxPer < 1 || maxPer > math.MaxInt32:
		return invalidArg("maxPerOrder must be from 1 to %d", math.MaxInt32)
	case limit > 0 && maxPer > limit: // such an order could never be accepted
		return invalidArg("maxPerOrder must not exceed perUserLimit")
	case p.SaleStart.Year() < 1970 || p.SaleEnd.Year() > 9999:
		return invalidArg("saleStart and saleEnd must lie between 1970 and 9999")
	case !p.SaleEnd.After(p.SaleStart):
		return invalidArg("saleEnd must be after saleStart")
	}
	return nil
}

// validateMedia checks a product's imageUrl and description: the URL absolute
// http or https with a host, no credentials, printable ASCII (browsers send
// nothing else; a space or quote would be ambiguous in HTML), at most
// maxImageURLBytes; the description at most maxDescChars characters without
// control characters other than newline and tab.
func validateMedia(imageURL, desc string) error {
	if imageURL != "" {
		if len(imageURL) > maxImageURLBytes {
			return invalidArg("imageUrl must be at most %d bytes", maxImageURLBytes)
		}
		for i := 0; i < len(imageURL); i++ {
			if c := imageURL[i]; c <= ' ' || c >= 0x7f || c == '"' || c == '\'' || c == '<' || c == '>' || c == '\\' {
				return invalidArg("imageUrl must be a URL without spaces, quotes or non-ASCII characters (percent-encode them)")
			}
		}
		u, err := url.Parse(imageURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Opaque != "" {
			return invalidArg("imageUrl must be an absolute http:// or https:// URL")
		}
		if u.User != nil {
			return invalidArg("imageUrl must not carry a user name or password")
		}
	}
	if n := utf8.RuneCountInString(desc); n > maxDescChars {
		return invalidArg("description must be at most %d characters", maxDescChars)
	}
	for _, r := range desc {
		if (r < ' ' && r != '\n' && r != '\t') || r == 0x7f {
			return invalidArg("description must be plain text (no control characters)")
		}
	}
	return nil
}

// loadProduct creates the Redis stock hash of every shard of p and registers
// the shards' intake streams and the product (lua.Sharded.LoadProduct).
// Idempotent.
func (s *Server) loadProduct(p persistence.Product) error {
	err := s.stock.LoadProduct(lua.Product{
		ID: p.ID, Total: p.Total, Shards: p.Shards, Price: p.Price, PerUserLimit: p.PerUserLimit,
		MaxPerOrder: p.MaxPerOrder, SaleStart: p.SaleStart, SaleEnd: p.SaleEnd,
	})
	if err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	return nil
}
