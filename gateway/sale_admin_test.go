package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stampede-sh/stampede/gateway/httpapi"
	"github.com/stampede-sh/stampede/lua"
	"github.com/stampede-sh/stampede/persistence"
)

// details returns the details of an error answer.
func details(t testing.TB, r resp) []httpapi.FieldError {
	t.Helper()
	var b struct {
		Error struct {
			Details []httpapi.FieldError `json:"details"`
		} `json:"error"`
	}
	if err := json.Unmarshal(r.body, &b); err != nil {
		t.Fatalf("response %s: %v", r, err)
	}
	return b.Error.Details
}

// productOf decodes a product answer.
func productOf(t testing.TB, r resp) httpapi.ProductJSON {
	t.Helper()
	var p httpapi.ProductJSON
	if err := json.Unmarshal(r.body, &p); err != nil {
		t.Fatalf("product %s: %v", r, err)
	}
	return p
}

// A product needs only name, price and stock: the sale opens now, runs until
// sold out (saleEnd null, stored as persistence.OpenEnd) and has no per-user
// limit.
func TestCreateProductDefaults(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	before := time.Now().UTC().Truncate(time.Millisecond)
	r := e.do("POST", "/api/admin/products", token(t, adminID), `{"name":"Plain","price":500,"stock":60}`)
	if r.status != 201 {
		t.Fatalf("create: %s", r)
	}
	p := productOf(t, r)
	if loc := r.header.Get("Location"); loc != "/api/products/"+strconv.FormatInt(p.ID, 10) {
		t.Fatalf("Location %q for %d", loc, p.ID)
	}
	if p.SaleEnd != nil || p.PerUserLimit != 0 || p.MaxPerOrder != 10 || p.Shards != 1 || p.State != StateLive ||
		p.Paused || p.Total != 60 || p.Available != 60 || p.SaleStart.Before(before) || p.SaleStart.After(time.Now()) {
		t.Fatalf("defaults %s", r.body)
	}
	if !strings.Contains(string(r.body), `"saleEnd":null`) {
		t.Fatalf("saleEnd not null: %s", r.body)
	}
	row, err := e.store.GetProduct(ctx, p.ID)
	if err != nil || !row.OpenEnded() || row.PerUserLimit != 0 {
		t.Fatalf("stored %+v %v", row, err)
	}
	end, err := e.rdb.HGet(ctx, lua.ShardKeys(p.ID, 0).Stock(), "end").Int64()
	if err != nil || end != persistence.OpenEnd.UnixMilli() {
		t.Fatalf("Redis end %d %v", end, err)
	}
	// No per-user limit: one buyer takes all 60 units, 10 per order.
	for i := range 6 {
		e.accepted(1, p.ID, 10, "all-"+strconv.Itoa(i))
	}
	e.buy(1, p.ID, 1, "more").wantError(t, 409, CodeSoldOut)
	g := productOf(t, e.do("GET", "/api/products/"+strconv.FormatInt(p.ID, 10), "", nil))
	if g.SaleEnd != nil || g.State != StateSoldOut || g.Available != 0 || !g.SoldOut {
		t.Fatalf("after selling out: %+v", g)
	}
}

// Every problem of a creation body is in the one 400's details; nothing is stored.
func TestCreateProductAllProblemsAtOnce(t *testing.T) {
	e := newEnv(t)
	body := `{"name":"","price":-1,"stock":"ten","saleStart":"2020-01-01T00:00:00Z","saleEnd":"2020-01-02T00:00:00Z",` +
		`"perUserLimit":-2,"shards":99,"imageUrl":"ftp://x","colour":"red"}`
	r := e.do("POST", "/api/admin/products", token(t, adminID), malformed(body))
	r.wantError(t, 400, CodeInvalidArgument)
	got := map[string]bool{}
	for _, d := range details(t, r) {
		if d.Message == "" || got[d.Field] {
			t.Fatalf("detail %+v (repeated or empty) in %s", d, r.body)
		}
		got[d.Field] = true
	}
	for _, f := range []string{"name", "price", "stock", "saleEnd", "perUserLimit", "shards", "imageUrl", "colour"} {
		if !got[f] {
			t.Errorf("no detail for %s: %s", f, r.body)
		}
	}
	if len(got) != 8 {
		t.Errorf("details %v, want exactly 8 fields", got)
	}
	if ps, _ := e.store.ListProducts(context.Background()); len(ps) != 0 {
		t.Fatalf("%d products stored", len(ps))
	}
}

// A creation body over the admin limit is 413 PAYLOAD_TOO_LARGE, both the
// ones the decoder reads and refuses and the ones fasthttp refuses while
// reading.
func TestCreateProductTooLarge(t *testing.T) {
	e := newEnv(t)
	body := `{"name":"x","price":1,"stock":1,"description":"` + strings.Repeat("d", adminBodyBytes) + `"}`
	msg := e.do("POST", "/api/admin/products", token(t, adminID), malformed(body)).wantError(t, 413, CodePayloadTooLarge)
	if !strings.Contains(msg, "exceeds 16384 bytes") {
		t.Fatalf("413 message %q", msg)
	}
	// Far over fasthttp's limit: refused while reading, 413 JSON as well.
	c, err := e.ln.Dial()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST /api/admin/products HTTP/1.1\r\nHost: gateway\r\nAuthorization: Bearer %s\r\nContent-Length: %d\r\n\r\n", token(t, adminID), 1<<20)
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode != 413 || !strings.Contains(string(b), `"PAYLOAD_TOO_LARGE"`) {
		t.Fatalf("1 MiB body: %d %s", res.StatusCode, b)
	}
	if ps, _ := e.store.ListProducts(context.Background()); len(ps) != 0 {
		t.Fatalf("%d products stored", len(ps))
	}
}

// total includes stock adjustments: available never exceeds it.
func TestProductTotalAfterAdjustment(t *testing.T) {
	e := newEnv(t)
	pid := e.product(openSale(100))
	path := "/api/admin/products/" + strconv.FormatInt(pid, 10)
	e.accepted(1, pid, 2, "a")
	if r := e.do("POST", path+"/stock", token(t, adminID), `{"delta":49,"repairNo":"found-49","reason":"found a pallet"}`); r.status != 200 {
		t.Fatalf("adjust: %s", r)
	}
	p := productOf(t, e.do("GET", "/api/products/"+strconv.FormatInt(pid, 10), "", nil))
	if p.Total != 149 || p.Available != 147 || p.State != StateLive {
		t.Fatalf("after +49: total %d available %d state %s", p.Total, p.Available, p.State)
	}
	if r := e.do("POST", path+"/stock", token(t, adminID), `{"delta":-147,"repairNo":"lost-all"}`); r.status != 200 {
		t.Fatalf("adjust: %s", r)
	}
	var list []httpapi.ProductJSON
	if err := json.Unmarshal(e.do("GET", "/api/products", "", nil).body, &list); err != nil || len(list) != 1 {
		t.Fatalf("list %v %v", list, err)
	}
	if p := list[0]; p.Total != 2 || p.Available != 0 || p.State != StateSoldOut {
		t.Fatalf("after -147: total %d available %d state %s", p.Total, p.Available, p.State)
	}
	// docs/spec.md §5.3 still holds: MySQL's stock adds up to the total shown.
	st, err := e.store.GetStock(context.Background(), pid)
	if err != nil || st.Available+st.Locked+st.Sold != 2 { // the 2 reserved units are still available in MySQL (no writer here)
		t.Fatalf("stock %+v %v", st, err)
	}
}

func TestSaleState(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	p := persistence.Product{SaleStart: now.Add(-time.Hour), SaleEnd: now.Add(time.Hour)}
	for _, tc := range []struct {
		mod   func(*persistence.Product)
		avail int64
		want  string
	}{
		{func(*persistence.Product) {}, 1, StateLive},
		{func(*persistence.Product) {}, 0, StateSoldOut},
		{func(p *persistence.Product) { p.SaleStart = now.Add(time.Minute) }, 1, StateUpcoming},
		{func(p *persistence.Product) { p.SaleStart = now.Add(time.Minute) }, 0, StateUpcoming},
		{func(p *persistence.Product) { p.Paused = true }, 1, StatePaused},
		{func(p *persistence.Product) { p.Paused = true }, 0, StatePaused},
		{func(p *persistence.Product) { p.SaleEnd = now }, 1, StateEnded},
		{func(p *persistence.Product) { p.SaleEnd, p.Paused = now, true }, 1, StateEnded},
		{func(p *persistence.Product) { p.SaleEnd = persistence.OpenEnd }, 1, StateLive},
	} {
		q := p
		tc.mod(&q)
		if got := httpapi.SaleState(q, tc.avail, now); got != tc.want {
			t.Errorf("%+v avail %d: %s, want %s", q, tc.avail, got, tc.want)
		}
	}
}

// Every lifecycle route: 401 without a token, 403 for a buyer.
func TestSaleAdminRoutesAuthorization(t *testing.T) {
	e := newEnv(t)
	id := e.product(openSale(5))
	pid := strconv.FormatInt(id, 10)
	for _, rt := range [][2]string{
		{"GET", "/api/admin/products"}, {"PATCH", "/api/admin/products/" + pid},
		{"POST", "/api/admin/products/" + pid + "/pause"}, {"POST", "/api/admin/products/" + pid + "/resume"},
		{"POST", "/api/admin/products/" + pid + "/end"}, {"GET", "/api/admin/audit"},
	} {
		var body any
		if rt[0] == "PATCH" {
			body = `{"name":"x"}`
		}
		e.do(rt[0], rt[1], "", body).wantError(t, 401, CodeUnauthenticated)
		e.do(rt[0], rt[1], token(t, 1), body).wantError(t, 403, CodeForbidden)
	}
	p, err := e.store.GetProduct(context.Background(), id)
	if err != nil || p.Name != "Flash widget" || p.Paused || p.SaleVersion != 0 {
		t.Fatalf("a refused call changed the product: %+v %v", p, err)
	}
	e.do("POST", "/api/admin/products/999999/pause", token(t, adminID), nil).wantError(t, 404, CodeProductNotFound)
	e.do("PATCH", "/api/admin/products/999999", token(t, adminID), `{"name":"x"}`).wantError(t, 404, CodeProductNotFound)
}

// auditOf lists the audit entries of pid, newest first.
func (e *env) auditOf(pid int64) []auditEntryJSON {
	e.t.Helper()
	r := e.do("GET", "/api/admin/audit?productId="+strconv.FormatInt(pid, 10), token(e.t, adminID), nil)
	var out auditListJSON
	if err := json.Unmarshal(r.body, &out); err != nil || r.status != 200 {
		e.t.Fatalf("audit: %s", r)
	}
	return out.Entries
}

// Pause, resume and end on one gateway: orders refused with SALE_PAUSED
// while paused and SALE_NOT_ACTIVE once ended; each call idempotent (the
// second changes nothing and writes no audit entry); the product JSON and
// Redis follow; every shard sees the pause.
func TestPauseResumeEnd(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	spec := openSale(40)
	spec.Shards = 3
	pid := e.product(spec)
	path := "/api/admin/products/" + strconv.FormatInt(pid, 10)
	tok := token(t, adminID)
	e.accepted(1, pid, 1, "before")

	for range 2 {
		r := e.do("POST", path+"/pause", tok, nil)
		if p := productOf(t, r); r.status != 200 || !p.Paused || p.State != StatePaused {
			t.Fatalf("pause: %s", r)
		}
	}
	for sh := range 3 {
		if v, _ := e.rdb.HGet(ctx, lua.ShardKeys(pid, sh).Stock(), "paused").Result(); v != "1" {
			t.Fatalf("shard %d paused = %q", sh, v)
		}
	}
	for u := int64(10); u < 20; u++ { // users of every home shard
		e.buy(u, pid, 1, "paused").wantError(t, 409, CodeSalePaused)
	}
	// A replay of an intent accepted before the pause still answers its order.
	if r := e.buy(1, pid, 1, "before"); r.status != 200 {
		t.Fatalf("replay while paused: %s", r)
	}
	if g := productOf(t, e.do("GET", "/api/products/"+strconv.FormatInt(pid, 10), "", nil)); g.State != StatePaused || !g.Paused {
		t.Fatalf("public product while paused: %+v", g)
	}
	for range 2 {
		r := e.do("POST", path+"/resume", tok, nil)
		if p := productOf(t, r); r.status != 200 || p.Paused || p.State != StateLive {
			t.Fatalf("resume: %s", r)
		}
	}
	for u := int64(10); u < 20; u++ {
		e.accepted(u, pid, 1, "resumed")
	}
	var ended time.Time
	for i := range 2 {
		r := e.do("POST", path+"/end", tok, nil)
		p := productOf(t, r)
		if r.status != 200 || p.State != StateEnded || p.SaleEnd == nil || p.SaleEnd.After(time.Now()) {
			t.Fatalf("end: %s", r)
		}
		if i == 1 && !p.SaleEnd.Equal(ended) {
			t.Fatalf("second end moved saleEnd from %v to %v", ended, p.SaleEnd)
		}
		ended = *p.SaleEnd
	}
	e.buy(30, pid, 1, "ended").wantError(t, 409, CodeSaleNotActive)
	for sh := range 3 {
		if v, _ := e.rdb.HGet(ctx, lua.ShardKeys(pid, sh).Stock(), "end").Int64(); v != ended.UnixMilli() {
			t.Fatalf("shard %d end %d, want %d", sh, v, ended.UnixMilli())
		}
	}
	row, _ := e.store.GetProduct(ctx, pid)
	if !row.SaleEnd.Equal(ended) || row.Paused || row.SaleVersion != 3 {
		t.Fatalf("stored %+v", row)
	}
	// One entry per change, newest first, naming the admin.
	entries := e.auditOf(pid)
	var actions []string
	for _, en := range entries {
		actions = append(actions, en.Action)
		if en.AdminID != adminID || en.ProductID == nil || *en.ProductID != pid || en.At.IsZero() || len(en.Change) < 2 {
			t.Fatalf("entry %+v", en)
		}
	}
	if got := strings.Join(actions, ","); got != "end,resume,pause,create" {
		t.Fatalf("audit actions %s", got)
	}
	var ch map[string]persistence.FromTo
	if err := json.Unmarshal(entries[2].Change, &ch); err != nil || ch["paused"].From != false || ch["paused"].To != true {
		t.Fatalf("pause change %s %v", entries[2].Change, err)
	}
}

// PATCH: before opening everything may change; after, only name, imageUrl,
// description, perUserLimit and a later saleEnd (or now) — anything else
// is 409 SALE_STARTED and changes nothing; the same body twice is one change.
func TestPatchProductRules(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	tok := token(t, adminID)
	now := time.Now().UTC()
	up := openSale(10)
	up.SaleStart, up.SaleEnd = now.Add(time.Hour).Format(time.RFC3339), now.Add(2*time.Hour).Format(time.RFC3339)
	upcoming := e.product(up)
	path := "/api/admin/products/" + strconv.FormatInt(upcoming, 10)

	newStart := now.Add(30 * time.Minute).Truncate(time.Second)
	body := `{"name":"Renamed","price":2500,"saleStart":"` + newStart.Format(time.RFC3339) + `","saleEnd":null,"perUserLimit":3,"maxPerOrder":2,"description":"new"}`
	for i := range 2 {
		r := e.do("PATCH", path, tok, body)
		p := productOf(t, r)
		if r.status != 200 || p.Name != "Renamed" || p.Price != 2500 || !p.SaleStart.Equal(newStart) || p.SaleEnd != nil ||
			p.PerUserLimit != 3 || p.MaxPerOrder != 2 || p.Description != "new" || p.State != StateUpcoming {
			t.Fatalf("patch %d: %s", i, r)
		}
	}
	h, _ := e.rdb.HGetAll(ctx, lua.ShardKeys(upcoming, 0).Stock()).Result()
	if h["price"] != "2500" || h["limit"] != "3" || h["maxq"] != "2" || h["start"] != strconv.FormatInt(newStart.UnixMilli(), 10) ||
		h["end"] != strconv.FormatInt(persistence.OpenEnd.UnixMilli(), 10) {
		t.Fatalf("Redis terms %v", h)
	}
	if n := len(e.auditOf(upcoming)); n != 2 { // create + one patch
		t.Fatalf("%d audit entries, want 2", n)
	}
	// Bad values: every problem in one 400, nothing changed.
	r := e.do("PATCH", path, tok, malformed(`{"name":"","price":-5,"saleEnd":"2020-01-01T00:00:00Z","bogus":1}`))
	r.wantError(t, 400, CodeInvalidArgument)
	if d := details(t, r); len(d) != 1 || d[0].Field != "bogus" {
		t.Fatalf("decode problems first: %+v", d)
	}
	r = e.do("PATCH", path, tok, malformed(`{"name":"","price":-5,"saleEnd":"`+now.Add(10*time.Minute).Format(time.RFC3339)+`"}`))
	r.wantError(t, 400, CodeInvalidArgument)
	fields := map[string]bool{}
	for _, d := range details(t, r) {
		fields[d.Field] = true
	}
	if !fields["name"] || !fields["price"] || !fields["saleEnd"] || len(fields) != 3 {
		t.Fatalf("details %s", r.body)
	}

	// An open sale.
	live := e.product(openSale(10))
	lpath := "/api/admin/products/" + strconv.FormatInt(live, 10)
	before, _ := e.store.GetProduct(ctx, live)
	for _, b := range []string{
		`{"price":1}`, `{"maxPerOrder":3}`, `{"saleStart":"` + now.Format(time.RFC3339) + `"}`,
		`{"saleEnd":"` + now.Add(30*time.Minute).Format(time.RFC3339) + `"}`, // earlier, still future
		`{"name":"ok","price":1}`,
	} {
		msg := e.do("PATCH", lpath, tok, b).wantError(t, 409, CodeSaleStarted)
		if !strings.Contains(msg, "can no longer change") {
			t.Fatalf("%s: %q", b, msg)
		}
	}
	if after, _ := e.store.GetProduct(ctx, live); after != before {
		t.Fatalf("a refused PATCH changed the product: %+v → %+v", before, after)
	}
	// The same value as stored is no change, so allowed.
	if r := e.do("PATCH", lpath, tok, `{"price":1999}`); r.status != 200 {
		t.Fatalf("same price: %s", r)
	}
	later := before.SaleEnd.Add(time.Hour)
	r = e.do("PATCH", lpath, tok, `{"name":"Live v2","perUserLimit":12,"saleEnd":"`+later.Format(time.RFC3339)+`","imageUrl":"https://img.example/a.png"}`)
	if p := productOf(t, r); r.status != 200 || p.Name != "Live v2" || p.PerUserLimit != 12 || !p.SaleEnd.Equal(later) || p.ImageURL == "" {
		t.Fatalf("allowed patch: %s", r)
	}
	// perUserLimit below maxPerOrder (10) cannot be: maxPerOrder is fixed now.
	r = e.do("PATCH", lpath, tok, `{"perUserLimit":2}`)
	if d := details(t, r); r.status != 400 || len(d) != 1 || d[0].Field != "perUserLimit" {
		t.Fatalf("limit below maxPerOrder: %s", r)
	}
	// saleEnd in the past is a 400 (POST …/end ends a sale now); nothing changes.
	before, _ = e.store.GetProduct(ctx, live)
	for _, past := range []string{"2020-01-01T00:00:00Z", time.Now().Add(-5 * time.Second).UTC().Format(time.RFC3339Nano)} {
		r = e.do("PATCH", lpath, tok, `{"name":"not stored","saleEnd":"`+past+`"}`)
		r.wantError(t, 400, CodeInvalidArgument)
		if d := details(t, r); len(d) != 1 || d[0].Field != "saleEnd" || !strings.Contains(d[0].Message, "/end") {
			t.Fatalf("past saleEnd %s: %s", past, r)
		}
	}
	if after, _ := e.store.GetProduct(ctx, live); after != before {
		t.Fatalf("a refused PATCH changed the product: %+v → %+v", before, after)
	}
	// saleEnd now ends the sale; the same body again changes nothing.
	past := time.Now().UTC().Format(time.RFC3339Nano)
	var endedAt time.Time
	for i := range 2 {
		r := e.do("PATCH", lpath, tok, `{"saleEnd":"`+past+`"}`)
		p := productOf(t, r)
		if r.status != 200 || p.State != StateEnded || p.SaleEnd == nil || (i == 1 && !p.SaleEnd.Equal(endedAt)) {
			t.Fatalf("end by PATCH %d: %s", i, r)
		}
		endedAt = *p.SaleEnd
	}
	e.buy(1, live, 1, "late").wantError(t, 409, CodeSaleNotActive)
	entries := e.auditOf(live)
	if len(entries) != 3 || entries[0].Action != "patch" || entries[1].Action != "patch" || entries[2].Action != "create" {
		t.Fatalf("audit %+v", entries)
	}
	var ch map[string]persistence.FromTo
	if err := json.Unmarshal(entries[1].Change, &ch); err != nil || ch["name"].To != "Live v2" || ch["perUserLimit"].From != 0.0 {
		t.Fatalf("patch change %s", entries[1].Change)
	}
}

// GET /api/admin/products: newest first, filtered by state, keyset-paged.
func TestAdminListProducts(t *testing.T) {
	e := newEnv(t)
	tok := token(t, adminID)
	now := time.Now().UTC()
	var live, upcoming []int64
	for i := range 5 {
		live = append(live, e.product(openSale(int64(i+1))))
		up := openSale(3)
		up.SaleStart, up.SaleEnd = now.Add(time.Hour).Format(time.RFC3339), now.Add(2*time.Hour).Format(time.RFC3339)
		upcoming = append(upcoming, e.product(up))
	}
	paused := live[4]
	e.do("POST", "/api/admin/products/"+strconv.FormatInt(paused, 10)+"/pause", tok, nil)
	sold := live[0] // stock 1
	e.accepted(1, sold, 1, "all")

	list := func(q string) productListJSON {
		r := e.do("GET", "/api/admin/products"+q, tok, nil)
		var out productListJSON
		if err := json.Unmarshal(r.body, &out); err != nil || r.status != 200 {
			t.Fatalf("list %s: %s", q, r)
		}
		return out
	}
	all := list("")
	if len(all.Products) != 10 || all.NextCursor != "" || all.Products[0].ID != upcoming[4] || all.Products[9].ID != live[0] {
		t.Fatalf("all: %+v", all)
	}
	// Paging live products two at a time: live[3], live[2], then live[1].
	p1 := list("?state=live&limit=2")
	if len(p1.Products) != 2 || p1.Products[0].ID != live[3] || p1.Products[1].ID != live[2] || p1.NextCursor == "" {
		t.Fatalf("page 1: %+v", p1)
	}
	p2 := list("?state=live&limit=2&cursor=" + p1.NextCursor)
	if len(p2.Products) != 1 || p2.Products[0].ID != live[1] || p2.NextCursor != "" {
		t.Fatalf("page 2: %+v", p2)
	}
	for state, want := range map[string]int64{StatePaused: paused, StateSoldOut: sold} {
		got := list("?state=" + state)
		if len(got.Products) != 1 || got.Products[0].ID != want || got.Products[0].State != state {
			t.Fatalf("state %s: %+v", state, got)
		}
	}
	if got := list("?state=upcoming&limit=200"); len(got.Products) != 5 {
		t.Fatalf("upcoming: %d", len(got.Products))
	}
	r := e.do("GET", "/api/admin/products?state=gone&limit=0&cursor=zz", tok, malformed(nil))
	r.wantError(t, 400, CodeInvalidArgument)
	if d := details(t, r); len(d) != 3 {
		t.Fatalf("details %+v", d)
	}
	// The audit list pages the same way.
	a := e.do("GET", "/api/admin/audit?limit=4", tok, nil)
	var page auditListJSON
	if err := json.Unmarshal(a.body, &page); err != nil || len(page.Entries) != 4 || page.NextCursor == "" || page.Entries[0].Action != "pause" {
		t.Fatalf("audit page: %s", a)
	}
	a = e.do("GET", "/api/admin/audit?limit=200&cursor="+page.NextCursor, tok, nil)
	var page2 auditListJSON
	if err := json.Unmarshal(a.body, &page2); err != nil || len(page2.Entries) != 7 || page2.NextCursor != "" {
		t.Fatalf("audit page 2: %s", a)
	}
}

// auditEntryJSON decodes one entry of GET /api/admin/audit (the operator
// package's answer).
type auditEntryJSON struct {
	ID           int64           `json:"id"`
	At           time.Time       `json:"at"`
	AdminID      int64           `json:"adminId"`
	AdminIssuer  string          `json:"adminIssuer,omitempty"`
	AdminSubject string          `json:"adminSubject,omitempty"`
	Action       string          `json:"action"`
	ProductID    *int64          `json:"productId"`
	Change       json.RawMessage `json:"change"`
}

// auditListJSON decodes the answer of GET /api/admin/audit.
type auditListJSON struct {
	Entries    []auditEntryJSON `json:"entries"`
	NextCursor string           `json:"nextCursor,omitempty"`
}

// productListJSON decodes the answer of GET /api/admin/products.
type productListJSON struct {
	Products   []httpapi.ProductJSON `json:"products"`
	NextCursor string                `json:"nextCursor,omitempty"`
}
