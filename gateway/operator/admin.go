package operator

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/valyala/fasthttp"

	"github.com/stampede-sh/stampede/auth"
	"github.com/stampede-sh/stampede/gateway/httpapi"
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
	// maxPrice is the largest price, in minor units (cents): 10^12 cents
	// (10^10 of the currency). With maxOrderQty it keeps an order's amount
	// (price × quantity ≤ 10^15) inside int64 and inside JavaScript's safe
	// integers (2^53 − 1 ≈ 9.007 × 10^15), which clients parse amounts as.
	maxPrice = 1_000_000_000_000
	// maxOrderQty is the largest maxPerOrder (units of one order).
	maxOrderQty = 1_000
	// maxStock is the largest stock of a product, and of its total after
	// stock adjustments (persistence.MaxUnits), and the largest perUserLimit.
	maxStock = persistence.MaxUnits
	// adminBodyBytes is the body limit of product creation: a description
	// of maxDescChars, each \uXXXX-escaped, and an image URL fit.
	adminBodyBytes = 16 << 10
)

// createProduct is POST /api/admin/products
//
//	{"name", "price", "stock" (required), "saleStart" (optional, default now),
//	 "saleEnd" (optional: absent or null = open until sold out), "perUserLimit"
//	 (optional, default 0 = no limit), "shards" (optional, 1…16, default 1: see
//	 lua/shards.go), "maxPerOrder" (optional, default min(perUserLimit or 10,
//	 10)), "imageUrl" (optional: an absolute http or https URL of at most 2048
//	 bytes), "description" (optional: at most 2000 characters of text),
//	 "waitingRoom" (optional bool)}
//
// It stores the product and its stock row in MySQL (with an admin_audit
// entry "create"), then loads each stock shard into Redis with its share of
// the stock (split evenly, the remainder to the first shards) and registers
// the shard's intake stream for the writers. 201 product with Location:
// /api/products/{id}; 400 INVALID_ARGUMENT with details listing every
// problem of the body (a sale whose saleEnd is not in the future is one);
// 413 PAYLOAD_TOO_LARGE over 16 KiB; 401; 403; 409 STOCK_CONFLICT, nothing
// stored, when Redis holds stock of an earlier product with the new id (a
// MySQL restored from a backup, another database's products: checkUnused).
// If Redis fails after MySQL
// stored the product the answer is 503 and the product exists unloaded: the
// sweeper's reconcile reports it, and a retry of the load is safe (load.lua
// never overwrites available).
func (s *API) createProduct(ctx *fasthttp.RequestCtx, c auth.Claims) {
	p, room, aerr := s.decodeNewProduct(ctx)
	if aerr != nil {
		s.ans.Fail(ctx, aerr)
		return
	}
	p, err := s.storeProduct(c, p, room)
	if err != nil {
		s.ans.Fail(ctx, err)
		return
	}
	s.log.Info("product created", append(httpapi.AdminAttrs(c), "productId", p.ID, "stock", p.Total, "shards", p.Shards, "waitingRoom", room)...)
	pj := httpapi.ToProductJSON(p, p.Total)
	pj.WaitingRoom = room
	ctx.Response.Header.Set("Location", "/api/products/"+strconv.FormatInt(p.ID, 10))
	s.ans.JSON(ctx, fasthttp.StatusCreated, pj)
}

// decodeNewProduct reads a POST /api/admin/products body into the product
// to create, its defaults filled in, and whether its waiting room is on;
// 400 INVALID_ARGUMENT listing every problem.
func (s *API) decodeNewProduct(ctx *fasthttp.RequestCtx) (p persistence.Product, room bool, aerr *httpapi.APIError) {
	var (
		stock, limit, shards int64
		maxPer               int64
		hasStart, hasEnd     bool
		hasShards, hasMax    bool
		endNull              bool
	)
	fields := [...]httpapi.Field{
		httpapi.StringField("name", &p.Name),
		httpapi.IntField("price", &p.Price),
		httpapi.IntField("stock", &stock),
		httpapi.Optional(httpapi.TimeField("saleStart", &p.SaleStart), &hasStart),
		httpapi.Nullable(httpapi.TimeField("saleEnd", &p.SaleEnd), &hasEnd, &endNull),
		httpapi.Optional(httpapi.IntField("perUserLimit", &limit), nil),
		httpapi.Optional(httpapi.IntField("shards", &shards), &hasShards),
		httpapi.Optional(httpapi.IntField("maxPerOrder", &maxPer), &hasMax),
		httpapi.Optional(httpapi.StringField("imageUrl", &p.ImageURL), nil),
		httpapi.Optional(httpapi.StringField("description", &p.Description), nil),
		httpapi.Optional(httpapi.BoolField("waitingRoom", &room), nil),
	}
	var errs []httpapi.FieldError
	if err := httpapi.DecodeBodyAll(ctx.PostBody(), max(s.cfg.MaxBodyBytes, adminBodyBytes), fields[:], &errs); err != nil {
		return p, false, err
	}
	now := time.Now().UTC().Truncate(time.Millisecond)
	if !hasShards {
		shards = 1
	}
	if !hasMax {
		maxPer = defaultMaxPerOrder
		if limit > 0 {
			maxPer = min(limit, defaultMaxPerOrder)
		}
	}
	if !hasStart {
		p.SaleStart = now
	}
	if !hasEnd {
		p.SaleEnd = persistence.OpenEnd
	}
	normalizeWindow(&p)
	p.Total, p.PerUserLimit, p.Shards, p.MaxPerOrder = stock, limit, int(shards), maxPer
	errs = mergeFieldErrors(errs, validateProduct(p, now, true))
	if len(errs) > 0 {
		return p, false, httpapi.InvalidFields(errs)
	}
	return p, room, nil
}

// normalizeWindow puts p's sale window in UTC milliseconds (DATETIME(3) and
// unix ms in Redis), an end beyond OpenEnd at OpenEnd.
func normalizeWindow(p *persistence.Product) {
	p.SaleStart = p.SaleStart.UTC().Truncate(time.Millisecond)
	p.SaleEnd = p.SaleEnd.UTC().Truncate(time.Millisecond)
	if p.SaleEnd.After(persistence.OpenEnd) {
		p.SaleEnd = persistence.OpenEnd
	}
}

// storeProduct stores p in MySQL (409 STOCK_CONFLICT when Redis holds stock
// of an earlier product with its id), loads its stock into Redis and, with
// room, turns its waiting room on (fifo). It returns p as stored; after
// MySQL stored it, an error leaves the product stored (logged).
func (s *API) storeProduct(c auth.Claims, p persistence.Product, room bool) (persistence.Product, error) {
	sctx, cancel := s.callCtx(s.cfg.StoreTimeout)
	p, err := s.store.CreateProductChecked(sctx, c.UserID, p, s.checkUnused)
	cancel()
	if errors.Is(err, lua.ErrIncarnation) {
		s.log.Error("product creation refused: Redis holds stock of an earlier product with this id", append(httpapi.AdminAttrs(c), "productId", p.ID, "err", err)...)
	}
	if err != nil {
		return p, err
	}
	s.products.Invalidate()
	if err := s.loadProduct(p); err != nil {
		s.log.Error("product stored in MySQL but not loaded into Redis", append(httpapi.AdminAttrs(c), "productId", p.ID, "err", err)...)
		return p, err
	}
	if room {
		// The create entry of admin_audit records waitingRoom: no room entry of its own.
		t := persistence.RoomTerms{ProductID: p.ID, On: true, Mode: string(lua.ModeFIFO), Window: s.cfg.RoomWindow}
		if _, err := s.saveRoom(0, t, p.Shards); err != nil {
			s.log.Error("product stored and loaded but its waiting room not turned on", append(httpapi.AdminAttrs(c), "productId", p.ID, "err", err)...)
			return p, err
		}
	}
	return p, nil
}

// mergeFieldErrors appends the problems of more whose field has none in
// errs yet: a field that could not be decoded is not validated again.
func mergeFieldErrors(errs, more []httpapi.FieldError) []httpapi.FieldError {
	had := make(map[string]bool, len(errs))
	for _, e := range errs {
		had[e.Field] = true
	}
	for _, e := range more {
		if !had[e.Field] {
			errs = append(errs, e)
		}
	}
	return errs
}

// validateProduct lists every problem of p's terms (p.Total is the stock).
// With future, a sale whose end is not after now is one (creation refuses a
// sale wholly in the past).
func validateProduct(p persistence.Product, now time.Time, future bool) []httpapi.FieldError {
	var errs []httpapi.FieldError
	add := func(f, format string, args ...any) {
		errs = append(errs, httpapi.FieldError{Field: f, Message: fmt.Sprintf(format, args...)})
	}
	switch n := utf8.RuneCountInString(p.Name); {
	case strings.TrimSpace(p.Name) == "":
		add("name", "name must not be empty or only whitespace")
	case n > maxNameChars:
		add("name", "name must be at most %d characters", maxNameChars)
	case strings.ContainsFunc(p.Name, unicode.IsControl):
		add("name", "name must not contain control characters (such as NUL, tab or newline)")
	}
	if msg := validateImageURL(p.ImageURL); msg != "" {
		add("imageUrl", "%s", msg)
	}
	if msg := validateDescription(p.Description); msg != "" {
		add("description", "%s", msg)
	}
	if p.Price < 0 || p.Price > maxPrice {
		add("price", "price must be from 0 to %d (minor units, e.g. cents)", maxPrice)
	}
	if p.Total < 0 || p.Total > maxStock {
		add("stock", "stock must be from 0 to %d units", maxStock)
	}
	limitOK := p.PerUserLimit >= 0 && p.PerUserLimit <= maxStock
	if !limitOK {
		add("perUserLimit", "perUserLimit must be from 0 (no limit) to %d", maxStock)
	}
	if p.Shards < 1 || p.Shards > maxShards {
		add("shards", "shards must be from 1 to %d", maxShards)
	}
	switch {
	case p.MaxPerOrder < 1 || p.MaxPerOrder > maxOrderQty:
		add("maxPerOrder", "maxPerOrder must be from 1 to %d", maxOrderQty)
	case limitOK && p.PerUserLimit > 0 && p.MaxPerOrder > p.PerUserLimit: // such an order could never be accepted
		add("maxPerOrder", "maxPerOrder (%d) must not exceed perUserLimit (%d)", p.MaxPerOrder, p.PerUserLimit)
	}
	switch {
	case p.SaleStart.Year() < 1970 || p.SaleStart.Year() > 9999:
		add("saleStart", "saleStart must lie between 1970 and 9999")
	case p.SaleEnd.Year() < 1970:
		add("saleEnd", "saleEnd must lie between 1970 and 9999")
	case !p.SaleEnd.After(p.SaleStart):
		add("saleEnd", "saleEnd must be after saleStart")
	case future && !p.SaleEnd.After(now):
		add("saleEnd", "saleEnd must be in the future: the sale would be wholly in the past")
	}
	return errs
}

// validateImageURL checks a product's imageUrl ("" = none; message "" = ok):
// absolute http or https with a host, no credentials, printable ASCII
// (browsers send nothing else; a space or quote would be ambiguous in HTML),
// at most maxImageURLBytes.
func validateImageURL(imageURL string) string {
	if imageURL == "" {
		return ""
	}
	if len(imageURL) > maxImageURLBytes {
		return fmt.Sprintf("imageUrl must be at most %d bytes", maxImageURLBytes)
	}
	for i := 0; i < len(imageURL); i++ {
		if c := imageURL[i]; c <= ' ' || c >= 0x7f || c == '"' || c == '\'' || c == '<' || c == '>' || c == '\\' {
			return "imageUrl must be a URL without spaces, quotes or non-ASCII characters (percent-encode them)"
		}
	}
	u, err := url.Parse(imageURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Opaque != "" {
		return "imageUrl must be an absolute http:// or https:// URL"
	}
	if u.User != nil {
		return "imageUrl must not carry a user name or password"
	}
	return ""
}

// validateDescription checks a product's description (message "" = ok): at
// most maxDescChars characters without control characters (unicode.IsControl:
// C0, DEL and C1) other than newline and tab.
func validateDescription(desc string) string {
	if n := utf8.RuneCountInString(desc); n > maxDescChars {
		return fmt.Sprintf("description must be at most %d characters", maxDescChars)
	}
	if strings.ContainsFunc(desc, func(r rune) bool { return unicode.IsControl(r) && r != '\n' && r != '\t' }) {
		return "description must be plain text (no control characters other than newline and tab)"
	}
	return ""
}

// checkUnused runs inside the product's creating transaction: Redis must
// hold no stock of an earlier product with p's id (lua.CheckUnused), else
// the creation is rolled back and answered 409 STOCK_CONFLICT (logged by
// storeProduct, with the admin); the stock found is left untouched.
func (s *API) checkUnused(_ context.Context, p persistence.Product) error {
	return s.stock.Do(func(ctx context.Context) error { return lua.CheckUnused(ctx, s.rdb, p.ID, p.Incarnation) })
}

// loadProduct creates the Redis stock hash of every shard of p and registers
// the shards' intake streams and the product (lua.Sharded.LoadProduct).
// Idempotent.
func (s *API) loadProduct(p persistence.Product) error {
	err := s.stock.LoadProduct(lua.Product{
		ID: p.ID, Incarnation: p.Incarnation, Total: p.Total, Shards: p.Shards, Price: p.Price, PerUserLimit: p.PerUserLimit,
		MaxPerOrder: p.MaxPerOrder, SaleStart: p.SaleStart, SaleEnd: p.SaleEnd,
	})
	if err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	return nil
}
