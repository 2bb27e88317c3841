package gateway

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stampede-sh/stampede/lua"
	"github.com/stampede-sh/stampede/persistence"
)

// details returns the details of an error answer.
func details(t testing.TB, r resp) []fieldError {
	t.Helper()
	var b struct {
		Error struct {
			Details []fieldError `json:"details"`
		} `json:"error"`
	}
	if err := json.Unmarshal(r.body, &b); err != nil {
		t.Fatalf("response %s: %v", r, err)
	}
	return b.Error.Details
}

// productOf decodes a product answer.
func productOf(t testing.TB, r resp) productJSON {
	t.Helper()
	var p productJSON
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
	r := e.do("POST", "/api/admin/products", token(t, adminID), body)
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
	for _, n := range []int{adminBodyBytes, 100 << 10} {
		body := `{"name":"x","price":1,"stock":1,"description":"` + strings.Repeat("d", n) + `"}`
		msg := e.do("POST", "/api/admin/products", token(t, adminID), body).wantError(t, 413, CodePayloadTooLarge)
		if !strings.Contains(msg, "exceeds") {
			t.Fatalf("413 message %q", msg)
		}
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
	var list []productJSON
	if err := json.Unmarshal(e.do("GET", "/api/products", "", nil).body, &list); err != nil || len(list) != 1 {
		t.Fatalf("list %v %v", list, err)
	}
	if p := list[0]; p.Total != 2 || p.Available != 0 || p.State != StateSoldOut {
		t.Fatalf("after -147: total %d available %d state %s", p.Total, p.Available, p.State)
	}
	// SPEC §5.3 still holds: MySQL's stock adds up to the total shown.
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
		if got := saleState(q, tc.avail, now); got != tc.want {
			t.Errorf("%+v avail %d: %s, want %s", q, tc.avail, got, tc.want)
		}
	}
}
