package gateway

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/stampede-sh/stampede/lua"
	"github.com/stampede-sh/stampede/persistence"
)

// fieldsOf is the set of fields named in an error answer's details.
func fieldsOf(t testing.TB, r resp) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, d := range details(t, r) {
		out[d.Field] = d.Message
	}
	return out
}

// Money and stock bounds: price ≤ 10^12 cents, stock ≤ 10^9, perUserLimit ≤
// 10^9, maxPerOrder ≤ 1,000, so that price × quantity and every stock sum
// stay inside int64 and JavaScript's safe integers. Every violation is in
// the one 400's details; the largest allowed values work end to end.
func TestProductMoneyAndStockBounds(t *testing.T) {
	e := newEnv(t)
	tok := token(t, adminID)
	r := e.do("POST", "/api/admin/products", tok, malformed(fmt.Sprintf(
		`{"name":"ovf","price":%d,"stock":%d,"perUserLimit":%d,"maxPerOrder":1001}`, int64(math.MaxInt64), int64(math.MaxInt64), maxStock+1)))
	r.wantError(t, 400, CodeInvalidArgument)
	if f := fieldsOf(t, r); len(f) != 4 || f["price"] == "" || f["stock"] == "" || f["perUserLimit"] == "" || f["maxPerOrder"] == "" {
		t.Fatalf("details %s", r.body)
	}
	if ps, _ := e.store.ListProducts(context.Background()); len(ps) != 0 {
		t.Fatalf("%d products stored", len(ps))
	}
	for _, b := range []string{
		`{"name":"p","price":1000000000001,"stock":1}`,
		`{"name":"p","price":1,"stock":1000000001}`,
		`{"name":"p","price":1,"stock":1,"maxPerOrder":1001}`,
	} {
		e.do("POST", "/api/admin/products", tok, malformed(b)).wantError(t, 400, CodeInvalidArgument)
	}

	// The largest values: an order of 1,000 units at 10^12 cents is 10^15.
	r = e.do("POST", "/api/admin/products", tok, `{"name":"max","price":1000000000000,"stock":1000000000,"maxPerOrder":1000}`)
	if r.status != 201 {
		t.Fatalf("create at the bounds: %s", r)
	}
	pid := productOf(t, r).ID
	no := e.accepted(1, pid, 1000, "max")
	o := e.do("GET", "/api/orders/"+no, token(t, 1), nil).json(t)
	if amt, _ := o["amount"].(interface{ String() string }); amt == nil || amt.String() != "1000000000000000" {
		t.Fatalf("amount %v, want 10^15", o["amount"])
	}

	// Stock adjustments keep the total at most 10^9: 400 naming delta, not
	// 409 "negative".
	path := fmt.Sprintf("/api/admin/products/%d/stock", pid)
	r = e.do("POST", path, tok, `{"delta":1,"repairNo":"over-1"}`)
	r.wantError(t, 400, CodeInvalidArgument)
	if f := fieldsOf(t, r); f["delta"] == "" {
		t.Fatalf("details %s", r.body)
	}
	r = e.do("POST", path, tok, malformed(fmt.Sprintf(`{"delta":%d,"repairNo":"over-max"}`, int64(math.MaxInt64))))
	r.wantError(t, 400, CodeInvalidArgument)
	e.do("POST", path, tok, malformed(fmt.Sprintf(`{"delta":%d,"repairNo":"under-min"}`, int64(math.MinInt64)))).
		wantError(t, 400, CodeInvalidArgument)
	if r := e.do("POST", path, tok, `{"delta":-5,"repairNo":"minus-5"}`); r.status != 200 {
		t.Fatalf("remove 5: %s", r)
	}
	if r := e.do("POST", path, tok, `{"delta":5,"repairNo":"plus-5"}`); r.status != 200 {
		t.Fatalf("add 5 back: %s", r)
	}
	e.do("POST", path, tok, `{"delta":1,"repairNo":"over-2"}`).wantError(t, 400, CodeInvalidArgument)
	st, err := e.store.GetStock(context.Background(), pid)
	if err != nil || st.Available+st.Locked+st.Sold != maxStock {
		t.Fatalf("stock %+v %v", st, err)
	}
	if got := e.available(pid, 0); got != maxStock-1000 {
		t.Fatalf("Redis available %d", got)
	}
	// Straight to persistence as well: ErrTooManyUnits, nothing written.
	if _, err := e.store.AdjustStock(context.Background(), pid, "direct", 1, ""); err == nil {
		t.Fatal("AdjustStock over MaxUnits succeeded")
	}

	// PATCH gets the same bounds.
	up := openSale(3)
	up.SaleStart, up.SaleEnd = time.Now().Add(time.Hour).UTC().Format(time.RFC3339), time.Now().Add(2*time.Hour).UTC().Format(time.RFC3339)
	upath := "/api/admin/products/" + strconv.FormatInt(e.product(up), 10)
	r = e.do("PATCH", upath, tok, malformed(`{"price":1000000000001,"maxPerOrder":1001,"perUserLimit":1000000001}`))
	r.wantError(t, 400, CodeInvalidArgument)
	if f := fieldsOf(t, r); len(f) != 3 || f["price"] == "" || f["maxPerOrder"] == "" || f["perUserLimit"] == "" {
		t.Fatalf("patch details %s", r.body)
	}
}

// A product stored before the bounds (straight into MySQL and Redis) with a
// price near 2^63: reserve.lua refuses any order whose amount would pass
// 2^53 − 1 with 400 INVALID_ARGUMENT and takes nothing; a wrong (negative)
// amount is never computed.
func TestOrderAmountOverflowRefused(t *testing.T) {
	e := newEnv(t)
	now := time.Now().UTC().Truncate(time.Millisecond)
	legacy := func(price, maxq int64) int64 {
		p, err := e.store.CreateProduct(context.Background(), persistence.Product{Name: "legacy", Price: price, Total: 100_000,
			MaxPerOrder: maxq, SaleStart: now.Add(-time.Minute), SaleEnd: now.Add(time.Hour)})
		if err != nil {
			t.Fatal(err)
		}
		err = e.srv.intake.Stock().LoadProduct(lua.Product{ID: p.ID, Incarnation: p.Incarnation, Total: p.Total, Shards: p.Shards,
			Price: p.Price, PerUserLimit: p.PerUserLimit, MaxPerOrder: p.MaxPerOrder, SaleStart: p.SaleStart, SaleEnd: p.SaleEnd})
		if err != nil {
			t.Fatal(err)
		}
		return p.ID
	}
	huge := legacy(math.MaxInt64, 10)
	for _, q := range []int64{1, 2, 10} {
		msg := e.buy(1, huge, q, "q"+strconv.FormatInt(q, 10)).wantError(t, 400, CodeInvalidArgument)
		if msg == "" {
			t.Fatal("no message")
		}
	}
	if got := e.available(huge, 0); got != 100_000 {
		t.Fatalf("available %d after refused orders", got)
	}
	// 10^13 cents: 900 units are 9×10^15 < 2^53 − 1, 901 are not.
	big := legacy(10_000_000_000_000, 10_000)
	e.buy(2, big, 901, "over").wantError(t, 400, CodeInvalidArgument)
	no := e.accepted(2, big, 900, "under")
	o := e.do("GET", "/api/orders/"+no, token(t, 2), nil).json(t)
	if amt, _ := o["amount"].(interface{ String() string }); amt == nil || amt.String() != "9000000000000000" {
		t.Fatalf("amount %v", o["amount"])
	}
}
