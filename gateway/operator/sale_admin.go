package operator

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/stampede-sh/stampede/auth"
	"github.com/stampede-sh/stampede/gateway/httpapi"
	"github.com/stampede-sh/stampede/lua"
	"github.com/stampede-sh/stampede/persistence"
)

// The sale lifecycle for admins: list products by state, change a sale's
// terms (PATCH), pause, resume and end it, and read the audit of every admin
// change. Each change is one MySQL transaction (persistence.ChangeProduct:
// the row locked, the new terms, sale_version + 1 and an admin_audit entry),
// then the terms are written to every Redis stock shard (lua.Sharded.UpdateSale,
// sale.lua), where reserve.lua reads them atomically with the stock: once a
// pause has answered 200, no gateway accepts a reservation of the product.
// The product JSON on other gateways follows within ProductCacheTTL (1 s).
// A change that changes nothing (pausing a paused sale, the same PATCH
// again) answers 200 with the product, writes no audit entry and writes the
// stored terms to Redis again (completing a write an earlier call lost).

// Paging of every admin list (products, audit, orders, refunds): ?limit=
// (1…200, default 50) and ?cursor= (the previous page's nextCursor).
const (
	defaultPageSize = 50
	maxPageSize     = 200
)

// errSaleStarted is the 409 SALE_STARTED of a PATCH changing a field that is
// fixed once the sale opened.
func errSaleStarted(fields []string) *httpapi.APIError {
	return &httpapi.APIError{Status: fasthttp.StatusConflict, Code: httpapi.CodeSaleStarted,
		Message: "the sale has opened: " + strings.Join(fields, ", ") + " can no longer change " +
			"(once a sale opened only name, imageUrl, description, perUserLimit and saleEnd may: saleEnd to a later time, null, or now)"}
}

// errSaleEnded is the 409 SALE_ENDED of a PATCH moving the window of an
// ended sale: an ended sale is final.
func errSaleEnded(fields []string) *httpapi.APIError {
	return &httpapi.APIError{Status: fasthttp.StatusConflict, Code: httpapi.CodeSaleEnded,
		Message: "the sale has ended and an ended sale is final: " + strings.Join(fields, ", ") + " can no longer change " +
			"(name, imageUrl, description and perUserLimit still may; create a new product for a new sale)"}
}

// endSkew is how far in the past a PATCH's saleEnd may lie and still mean
// "now" (the admin's clock a little behind ours); earlier is refused.
const endSkew = time.Second

// productID is the route's {id}, or errProductNotFound.
func productID(ctx *fasthttp.RequestCtx) (int64, error) {
	raw, _ := ctx.UserValue("id").(string)
	id, ok := httpapi.ParseID(raw)
	if !ok {
		return 0, httpapi.ErrProductNotFound
	}
	return id, nil
}

// pageQuery reads ?limit= and ?cursor= (a cursor of kind, see pageCursor):
// the page size and the id bound (0: first page). Problems are added to errs.
func pageQuery(ctx *fasthttp.RequestCtx, kind string, errs *[]httpapi.FieldError) (limit int, before int64) {
	args := ctx.QueryArgs()
	limit, msg := pageLimit(args)
	if msg != "" {
		*errs = append(*errs, httpapi.FieldError{Field: "limit", Message: msg})
	}
	if raw := string(args.Peek("cursor")); raw != "" {
		b, err := base64.RawURLEncoding.DecodeString(raw)
		id, ok := httpapi.ParseID(strings.TrimPrefix(string(b), kind+":"))
		if err != nil || !strings.HasPrefix(string(b), kind+":") || !ok {
			*errs = append(*errs, httpapi.FieldError{Field: "cursor", Message: "cursor must be a nextCursor of this list"})
		} else {
			before = id
		}
	}
	return limit, before
}

// pageLimit reads ?limit= of an admin list: defaultPageSize when absent;
// msg says what is wrong with a value that is not an integer from 1 to
// maxPageSize ("" when it is fine).
func pageLimit(args *fasthttp.Args) (limit int, msg string) {
	raw := args.Peek("limit")
	if raw == nil {
		return defaultPageSize, ""
	}
	n, err := strconv.Atoi(string(raw))
	if err != nil || n < 1 || n > maxPageSize {
		return defaultPageSize, fmt.Sprintf("limit must be an integer from 1 to %d", maxPageSize)
	}
	return n, ""
}

// pageCursor is the opaque cursor of a list of kind continuing below id.
func pageCursor(kind string, id int64) string {
	return base64.RawURLEncoding.EncodeToString([]byte(kind + ":" + strconv.FormatInt(id, 10)))
}

// productListJSON is the answer of GET /api/admin/products.
type productListJSON struct {
	Products   []httpapi.ProductJSON `json:"products"`
	NextCursor string                `json:"nextCursor,omitempty"` // absent: last page
}

// adminListProducts is GET /api/admin/products?state=&limit=&cursor=: the
// products newest first, only those in state (upcoming, live, paused,
// ended, soldOut) when given, read from MySQL (not the product cache) and
// Redis. 200 {"products": [...], "nextCursor"}; 400 for a bad state, limit
// or cursor.
func (s *API) adminListProducts(ctx *fasthttp.RequestCtx, _ auth.Claims) {
	var errs []httpapi.FieldError
	limit, before := pageQuery(ctx, "p", &errs)
	state := string(ctx.QueryArgs().Peek("state"))
	switch state {
	case "", httpapi.StateUpcoming, httpapi.StateLive, httpapi.StatePaused, httpapi.StateEnded, httpapi.StateSoldOut:
	default:
		errs = append(errs, httpapi.FieldError{Field: "state", Message: "state must be one of upcoming, live, paused, ended, soldOut"})
	}
	if len(errs) > 0 {
		s.ans.Fail(ctx, httpapi.InvalidFields(errs))
		return
	}
	out := productListJSON{Products: []httpapi.ProductJSON{}}
	// Read in chunks until limit+1 matches (the one more tells a next page
	// exists) or no product is left.
	for {
		sctx, cancel := s.callCtx(s.cfg.StoreTimeout)
		rows, err := s.store.ListProductsBefore(sctx, before, maxPageSize)
		cancel()
		if err != nil {
			s.ans.Fail(ctx, err)
			return
		}
		if len(rows) == 0 {
			break
		}
		avail, rooms, err := s.available(rows)
		if err != nil {
			s.ans.Fail(ctx, err)
			return
		}
		for i, p := range rows {
			pj := httpapi.ToProductJSON(p, avail[i])
			pj.WaitingRoom = rooms[i]
			if state == "" || pj.State == state {
				out.Products = append(out.Products, pj)
			}
		}
		before = rows[len(rows)-1].ID
		if len(out.Products) > limit || len(rows) < maxPageSize {
			break
		}
	}
	if len(out.Products) > limit {
		out.Products = out.Products[:limit]
		out.NextCursor = pageCursor("p", out.Products[limit-1].ID)
	}
	s.ans.JSON(ctx, fasthttp.StatusOK, out)
}

// adminPatchProduct is PATCH /api/admin/products/{id}
//
//	any of {"name", "price", "saleStart", "saleEnd" (null: open until sold
//	out), "perUserLimit", "maxPerOrder", "imageUrl", "description"}
//
// Before the sale opens (now < saleStart) every field may change; the
// result must be a valid sale that ends in the future. Once it opened only
// name, imageUrl, description, perUserLimit (at least maxPerOrder, or 0)
// and saleEnd may: to a later time (null: open-ended), or to now (at most
// endSkew, 1 s, in the past counts as now: the sale ends now); a saleEnd
// further in the past is 400 (POST …/end ends a sale now). Once it ended
// (now ≥ saleEnd) it is final: saleStart and saleEnd no longer change (409
// SALE_ENDED); name, imageUrl, description and perUserLimit still may. A
// field sent with its current value is no change. 200 product; 400
// INVALID_ARGUMENT with details; 404 PRODUCT_NOT_FOUND; 409 SALE_STARTED
// naming the fields that may no longer change, or SALE_ENDED. The same
// body again answers the same product and changes nothing (a saleEnd of
// "now" again too: within endSkew of the stored end, it is no change).
func (s *API) adminPatchProduct(ctx *fasthttp.RequestCtx, c auth.Claims) {
	pid, err := productID(ctx)
	if err != nil {
		s.ans.Fail(ctx, err)
		return
	}
	p, aerr := s.decodeProductPatch(ctx)
	if aerr != nil {
		s.ans.Fail(ctx, aerr)
		return
	}
	s.changeSale(ctx, c, persistence.ActionPatch, pid, func(cur persistence.Product) (persistence.Product, map[string]any, error) {
		// A new maxPerOrder on a draw's product is refused by the store, under
		// the row's lock and after apply: a sale that opened answers 409
		// SALE_STARTED first (persistence.ErrDrawOnePerOrder).
		return p.apply(cur, time.Now().UTC().Truncate(time.Millisecond))
	})
}

// productPatch is a decoded PATCH /api/admin/products/{id} body: which
// fields it sent (has*, endNull: saleEnd null) and their values in in (the
// sale window in UTC milliseconds, saleEnd null or beyond as OpenEnd).
type productPatch struct {
	in                                       persistence.Product
	limit, maxPer                            int64
	hasName, hasPrice, hasStart, hasEnd      bool
	endNull, hasLimit, hasMax, hasImg, hasDe bool
}

// decodeProductPatch reads the PATCH body; 400 INVALID_ARGUMENT with
// details for malformed fields.
func (s *API) decodeProductPatch(ctx *fasthttp.RequestCtx) (*productPatch, *httpapi.APIError) {
	p := &productPatch{}
	in := &p.in
	fields := [...]httpapi.Field{
		httpapi.Optional(httpapi.StringField("name", &in.Name), &p.hasName),
		httpapi.Optional(httpapi.IntField("price", &in.Price), &p.hasPrice),
		httpapi.Optional(httpapi.TimeField("saleStart", &in.SaleStart), &p.hasStart),
		httpapi.Nullable(httpapi.TimeField("saleEnd", &in.SaleEnd), &p.hasEnd, &p.endNull),
		httpapi.Optional(httpapi.IntField("perUserLimit", &p.limit), &p.hasLimit),
		httpapi.Optional(httpapi.IntField("maxPerOrder", &p.maxPer), &p.hasMax),
		httpapi.Optional(httpapi.StringField("imageUrl", &in.ImageURL), &p.hasImg),
		httpapi.Optional(httpapi.StringField("description", &in.Description), &p.hasDe),
	}
	var errs []httpapi.FieldError
	if err := httpapi.DecodeBodyAll(ctx.PostBody(), max(s.cfg.MaxBodyBytes, adminBodyBytes), fields[:], &errs); err != nil {
		return nil, err
	}
	if len(errs) > 0 {
		return nil, httpapi.InvalidFields(errs)
	}
	p.hasEnd = p.hasEnd || p.endNull
	if p.endNull {
		in.SaleEnd = persistence.OpenEnd
	}
	normalizeWindow(in)
	return p, nil
}

// patchChange is what a PATCH makes of the stored product cur at now: the
// product next, the audit's change (field → FromTo) and what it may not do.
type patchChange struct {
	cur, next     persistence.Product
	now           time.Time
	opened, ended bool // now ≥ saleStart, now ≥ saleEnd
	change        map[string]any
	fixed         []string // fields that may no longer change
	final         []string // window fields of an ended sale
	endPast       bool     // a saleEnd before now − endSkew on an open sale
}

// note records a change of field name; one not allowed after the sale
// opened (mayAfterOpening false) is fixed once it has.
func (pc *patchChange) note(name string, from, to any, mayAfterOpening bool) {
	pc.change[name] = persistence.FromTo{From: from, To: to}
	if pc.opened && !mayAfterOpening {
		pc.fixed = append(pc.fixed, name)
	}
}

// apply is the changeSale step of the PATCH: the next product and its
// change, or cur and nil when nothing changes, or the error to answer
// (409 SALE_ENDED, 409 SALE_STARTED, 400 INVALID_ARGUMENT).
func (p *productPatch) apply(cur persistence.Product, now time.Time) (persistence.Product, map[string]any, error) {
	pc := &patchChange{cur: cur, next: cur, now: now, change: map[string]any{},
		opened: !now.Before(cur.SaleStart), ended: !now.Before(cur.SaleEnd)}
	p.applyDetails(pc)
	p.applyWindow(pc)
	if err := pc.refusal(); err != nil {
		return cur, nil, err
	}
	if len(pc.change) == 0 {
		return cur, nil, nil
	}
	if err := pc.invalid(); err != nil {
		return cur, nil, err
	}
	return pc.next, pc.change, nil
}

// applyDetails applies the fields other than the sale window.
func (p *productPatch) applyDetails(pc *patchChange) {
	patchField(pc, p.hasName, "name", &pc.next.Name, p.in.Name, true)
	patchField(pc, p.hasImg, "imageUrl", &pc.next.ImageURL, p.in.ImageURL, true)
	patchField(pc, p.hasDe, "description", &pc.next.Description, p.in.Description, true)
	patchField(pc, p.hasPrice, "price", &pc.next.Price, p.in.Price, false)
	patchField(pc, p.hasMax, "maxPerOrder", &pc.next.MaxPerOrder, p.maxPer, false)
	patchField(pc, p.hasLimit, "perUserLimit", &pc.next.PerUserLimit, p.limit, true)
}

// patchField sets the field of pc.next at next (still cur's value) to to,
// if the PATCH sent it and it differs, and notes the change.
func patchField[T comparable](pc *patchChange, sent bool, name string, next *T, to T, mayAfterOpening bool) {
	if !sent || to == *next {
		return
	}
	from := *next
	*next = to
	pc.note(name, from, to, mayAfterOpening)
}

// applyWindow applies saleStart and saleEnd (see adminPatchProduct for
// what each may become before opening, while open and once ended).
func (p *productPatch) applyWindow(pc *patchChange) {
	in, cur, now := &p.in, &pc.cur, pc.now
	if p.hasStart && !in.SaleStart.Equal(cur.SaleStart) {
		pc.next.SaleStart = in.SaleStart
		pc.note("saleStart", cur.SaleStart.UTC(), in.SaleStart, false)
		if pc.ended {
			pc.final = append(pc.final, "saleStart")
		}
	}
	if !p.hasEnd || in.SaleEnd.Equal(cur.SaleEnd) {
		return
	}
	switch end := in.SaleEnd; {
	case pc.ended && !end.After(now) && !end.Before(cur.SaleEnd.Add(-endSkew)):
		// The replay of the PATCH that ended it with saleEnd "now"
		// (stored as the server's now, up to endSkew later): no change.
	case pc.ended: // final: no other time (a later one or null would reopen the sale)
		pc.final = append(pc.final, "saleEnd")
	case !pc.opened || end.After(cur.SaleEnd): // before opening: anything (validated below); later: always
		pc.next.SaleEnd = end
		pc.note("saleEnd", endJSON(*cur), endJSONOf(end), true)
	case end.Before(now.Add(-endSkew)): // in the past: a mistake more likely than "end now"
		pc.endPast = true
	case !end.After(now): // now (within endSkew): the sale ends now
		pc.next.SaleEnd = now
		pc.note("saleEnd", endJSON(*cur), now, true)
	default: // earlier than now planned, but still in the future
		pc.note("saleEnd", endJSON(*cur), endJSONOf(end), false)
	}
}

// refusal is the error of a change the sale's state forbids: 409
// SALE_ENDED, 409 SALE_STARTED, or 400 for a saleEnd in the past.
func (pc *patchChange) refusal() error {
	if len(pc.final) > 0 {
		return errSaleEnded(pc.final)
	}
	if len(pc.fixed) > 0 {
		return errSaleStarted(pc.fixed)
	}
	if pc.endPast {
		return httpapi.InvalidFields([]httpapi.FieldError{{Field: "saleEnd", Message: fmt.Sprintf(
			"saleEnd must be now or later; use POST /api/admin/products/%d/end to end the sale now", pc.cur.ID)}})
	}
	return nil
}

// invalid is 400 INVALID_ARGUMENT if next is not a valid sale (one that
// has not opened must end in the future), naming only the fields this
// PATCH sent: the stored ones are valid.
func (pc *patchChange) invalid() error {
	var mine []httpapi.FieldError
	for _, p := range validateProduct(pc.next, pc.now, !pc.opened) {
		if _, sent := pc.change[p.Field]; sent {
			mine = append(mine, p)
		} else if p.Field == "maxPerOrder" {
			mine = append(mine, httpapi.FieldError{Field: "perUserLimit", Message: fmt.Sprintf("perUserLimit must be 0 (no limit) or at least maxPerOrder (%d)", pc.next.MaxPerOrder)})
		}
	}
	if len(mine) > 0 {
		return httpapi.InvalidFields(mine)
	}
	return nil
}

// endJSON is p's saleEnd as the audit records it: nil when open-ended.
func endJSON(p persistence.Product) any { return endJSONOf(p.SaleEnd) }

func endJSONOf(t time.Time) any {
	if !t.Before(persistence.OpenEnd) {
		return nil
	}
	return t.UTC()
}

// adminPauseProduct is POST /api/admin/products/{id}/pause: reserve.lua
// refuses the product's orders (409 SALE_PAUSED) on every gateway from the
// moment this answers. 200 product (also when already paused); 404.
func (s *API) adminPauseProduct(ctx *fasthttp.RequestCtx, c auth.Claims) {
	s.setPaused(ctx, c, true)
}

// adminResumeProduct is POST /api/admin/products/{id}/resume: the pause is
// lifted on every gateway from the moment this answers. 200 product (also
// when not paused); 404.
func (s *API) adminResumeProduct(ctx *fasthttp.RequestCtx, c auth.Claims) {
	s.setPaused(ctx, c, false)
}

func (s *API) setPaused(ctx *fasthttp.RequestCtx, c auth.Claims, paused bool) {
	pid, err := productID(ctx)
	if err != nil {
		s.ans.Fail(ctx, err)
		return
	}
	action := persistence.ActionResume
	if paused {
		action = persistence.ActionPause
	}
	s.changeSale(ctx, c, action, pid, func(cur persistence.Product) (persistence.Product, map[string]any, error) {
		if cur.Paused == paused {
			return cur, nil, nil
		}
		next := cur
		next.Paused = paused
		return next, map[string]any{"paused": persistence.FromTo{From: cur.Paused, To: paused}}, nil
	})
}

// adminEndProduct is POST /api/admin/products/{id}/end: saleEnd = now in
// MySQL and every Redis shard; the sale answers as ended (orders 409
// SALE_NOT_ACTIVE) from the moment this answers. 200 product (an ended
// sale keeps its saleEnd); 404.
func (s *API) adminEndProduct(ctx *fasthttp.RequestCtx, c auth.Claims) {
	pid, err := productID(ctx)
	if err != nil {
		s.ans.Fail(ctx, err)
		return
	}
	s.changeSale(ctx, c, persistence.ActionEnd, pid, func(cur persistence.Product) (persistence.Product, map[string]any, error) {
		now := time.Now().UTC().Truncate(time.Millisecond)
		if !now.Before(cur.SaleEnd) {
			return cur, nil, nil
		}
		next := cur
		next.SaleEnd = now
		return next, map[string]any{"saleEnd": persistence.FromTo{From: endJSON(cur), To: now}}, nil
	})
}

// changeSale runs one admin change of pid (persistence.ChangeProduct), then
// writes the stored terms to every Redis shard and answers 200 with the
// product. A Redis failure after the commit answers 503: the change is
// stored and audited, and sending the request again completes the Redis
// half (the MySQL half is then no change).
func (s *API) changeSale(ctx *fasthttp.RequestCtx, c auth.Claims, action string, pid int64, fn persistence.ChangeFunc) {
	sctx, cancel := s.callCtx(s.cfg.StoreTimeout)
	p, changed, err := s.store.ChangeProduct(sctx, c.UserID, action, pid, fn)
	cancel()
	if errors.Is(err, persistence.ErrNotFound) {
		s.ans.Fail(ctx, httpapi.ErrProductNotFound)
		return
	}
	if err != nil {
		s.ans.Fail(ctx, err)
		return
	}
	if changed {
		s.products.Invalidate()
	}
	err = s.stock.UpdateSale(lua.SaleTerms{
		ProductID: p.ID, Shards: max(p.Shards, 1), Version: p.SaleVersion, Price: p.Price, PerUserLimit: p.PerUserLimit,
		MaxPerOrder: p.MaxPerOrder, SaleStart: p.SaleStart, SaleEnd: p.SaleEnd, Paused: p.Paused,
	})
	if err != nil {
		s.log.Error("sale change stored in MySQL but not written to Redis; send it again", append(httpapi.AdminAttrs(c), "productId", pid,
			"action", action, "err", err)...)
		s.ans.Fail(ctx, err)
		return
	}
	if changed {
		s.log.Info("sale changed", append(httpapi.AdminAttrs(c), "productId", pid, "action", action, "version", p.SaleVersion)...)
	}
	avail, rooms, err := s.available([]persistence.Product{p})
	if err != nil {
		s.ans.Fail(ctx, err)
		return
	}
	pj := httpapi.ToProductJSON(p, avail[0])
	pj.WaitingRoom = rooms[0]
	s.ans.JSON(ctx, fasthttp.StatusOK, pj)
}

// auditEntryJSON is one entry of GET /api/admin/audit.
type auditEntryJSON struct {
	ID      int64     `json:"id"`
	At      time.Time `json:"at"`
	AdminID int64     `json:"adminId"`
	// AdminIssuer and AdminSubject name an identity provider's admin (absent
	// for an admin of the direct id range: HS256 tokens).
	AdminIssuer  string          `json:"adminIssuer,omitempty"`
	AdminSubject string          `json:"adminSubject,omitempty"`
	Action       string          `json:"action"` // create, patch, pause, resume, end, adjust, refund, room, replay
	ProductID    *int64          `json:"productId"`
	Change       json.RawMessage `json:"change"` // patch: {field: {from, to}}; create: the terms; adjust: {repairNo, delta, reason}
}

// auditListJSON is the answer of GET /api/admin/audit.
type auditListJSON struct {
	Entries    []auditEntryJSON `json:"entries"`
	NextCursor string           `json:"nextCursor,omitempty"` // absent: last page
}

// adminAudit is GET /api/admin/audit?productId=&limit=&cursor=: every admin
// change (product creation, PATCH, pause, resume, end, stock adjustment,
// refund, waiting-room setting, dead-letter replay), newest first; only
// productId's with productId. 200; 400.
func (s *API) adminAudit(ctx *fasthttp.RequestCtx, _ auth.Claims) {
	var errs []httpapi.FieldError
	limit, before := pageQuery(ctx, "a", &errs)
	var pid int64
	if raw := ctx.QueryArgs().Peek("productId"); raw != nil {
		n, ok := httpapi.ParseID(string(raw))
		if !ok {
			errs = append(errs, httpapi.FieldError{Field: "productId", Message: "productId must be a positive integer"})
		}
		pid = n
	}
	if len(errs) > 0 {
		s.ans.Fail(ctx, httpapi.InvalidFields(errs))
		return
	}
	sctx, cancel := s.callCtx(s.cfg.StoreTimeout)
	rows, err := s.store.ListAudit(sctx, pid, before, limit+1)
	cancel()
	if err != nil {
		s.ans.Fail(ctx, err)
		return
	}
	out := auditListJSON{Entries: make([]auditEntryJSON, 0, min(len(rows), limit))}
	for i, r := range rows {
		if i == limit {
			out.NextCursor = pageCursor("a", rows[limit-1].ID)
			break
		}
		e := auditEntryJSON{ID: r.ID, At: r.At, AdminID: r.AdminID, AdminIssuer: r.Admin.Issuer, AdminSubject: r.Admin.Subject,
			Action: r.Action, Change: r.Change}
		if r.ProductID > 0 {
			id := r.ProductID
			e.ProductID = &id
		}
		out.Entries = append(out.Entries, e)
	}
	s.ans.JSON(ctx, fasthttp.StatusOK, out)
}
