package gateway

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stampede-sh/stampede/lua"
)

func TestAdminCreateProduct(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	spec := openSale(100)
	spec.Shards, spec.PerUserLimit = 3, 4

	e.do("POST", "/api/admin/products", "", spec).wantError(t, 401, CodeUnauthenticated)
	e.do("POST", "/api/admin/products", token(t, 1), spec).wantError(t, 403, CodeForbidden)

	r := e.do("POST", "/api/admin/products", token(t, adminID), spec)
	if r.status != 201 {
		t.Fatalf("create: %s", r)
	}
	m := r.json(t)
	id, _ := m["id"].(json.Number).Int64()
	if id <= 0 || m["available"] != json.Number("100") || m["soldOut"] != false || len(m) != 14 || m["shards"] != json.Number("3") || m["state"] != "live" {
		t.Fatalf("201 body %s", r.body)
	}
	p, err := e.store.GetProduct(ctx, id)
	if err != nil || p.Total != 100 || p.Shards != 3 || p.PerUserLimit != 4 || p.MaxPerOrder != 4 {
		t.Fatalf("stored %+v %v", p, err)
	}
	for sh, want := range []int64{34, 33, 33} { // the remainder goes to the first shards
		k := lua.ShardKeys(id, sh)
		h, err := e.rdb.HGetAll(ctx, k.Stock()).Result()
		if err != nil || h["available"] != strconv.FormatInt(want, 10) || h["total"] != h["available"] ||
			h["price"] != "1999" || h["limit"] != "4" || h["maxq"] != "4" || h["start"] != strconv.FormatInt(p.SaleStart.UnixMilli(), 10) {
			t.Fatalf("shard %d hash %v %v", sh, h, err)
		}
		if ok, _ := e.rdb.SIsMember(ctx, lua.StreamsKey, k.Intake()).Result(); !ok {
			t.Fatalf("shard %d intake not registered", sh)
		}
	}
	if ok, _ := e.rdb.SIsMember(ctx, lua.ProductsKey, strconv.FormatInt(id, 10)).Result(); !ok {
		t.Fatal("product not registered")
	}

	// maxPerOrder defaults to min(perUserLimit or 10, 10) and can be set.
	for _, tc := range []struct{ limit, maxq, want int64 }{{0, 0, 10}, {50, 0, 10}, {2, 0, 2}, {0, 25, 25}} {
		s := openSale(1)
		s.PerUserLimit, s.MaxPerOrder = tc.limit, tc.maxq
		p, err := e.store.GetProduct(ctx, e.product(s))
		if err != nil || p.MaxPerOrder != tc.want || p.Shards != 1 {
			t.Fatalf("limit %d maxq %d: %+v %v", tc.limit, tc.maxq, p, err)
		}
	}
}

func TestAdminCreateProductValidation(t *testing.T) {
	e := newEnv(t)
	tok := token(t, adminID)
	start := time.Now().UTC().Format(time.RFC3339)
	end := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	good := `"name":"x","price":1,"stock":1,"saleStart":"` + start + `","saleEnd":"` + end + `","perUserLimit":0`
	past2 := time.Now().Add(-2 * time.Hour).UTC().Format(time.RFC3339)
	past1 := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)
	for _, tc := range []struct{ body, field string }{
		{`{` + good + `,"shards":0}`, "shards"},
		{`{` + good + `,"shards":17}`, "shards"},
		{`{` + good + `,"maxPerOrder":0}`, "maxPerOrder"},
		{`{"name":"x","price":1,"stock":1,"saleStart":"` + start + `","saleEnd":"` + end + `","perUserLimit":2,"maxPerOrder":3}`, "maxPerOrder"},
		{`{` + good + `,"extra":1}`, "extra"},
		{`{"name":"","price":1,"stock":1,"saleStart":"` + start + `","saleEnd":"` + end + `","perUserLimit":0}`, "name"},
		{`{"name":"` + strings.Repeat("é", 201) + `","price":1,"stock":1,"saleStart":"` + start + `","saleEnd":"` + end + `","perUserLimit":0}`, "name"},
		{`{"name":"x","price":-1,"stock":1,"saleStart":"` + start + `","saleEnd":"` + end + `","perUserLimit":0}`, "price"},
		{`{"name":"x","price":1,"stock":-1,"saleStart":"` + start + `","saleEnd":"` + end + `","perUserLimit":0}`, "stock"},
		{`{"name":"x","price":1,"stock":1,"saleStart":"` + start + `","saleEnd":"` + end + `","perUserLimit":-1}`, "perUserLimit"},
		{`{"name":"x","price":1,"stock":1,"saleStart":"` + end + `","saleEnd":"` + start + `","perUserLimit":0}`, "saleEnd"},
		{`{"name":"x","price":1,"stock":1,"saleStart":"` + start + `","saleEnd":"` + start + `","perUserLimit":0}`, "saleEnd"},
		{`{"name":"x","price":1,"stock":1,"saleStart":"tomorrow","saleEnd":"` + end + `","perUserLimit":0}`, "saleStart"},
		{`{"name":"x","price":1,"stock":1,"saleStart":"` + past2 + `","saleEnd":"` + past1 + `"}`, "saleEnd"}, // wholly in the past
		{`{"name":"x","price":1,"stock":1,"saleEnd":"` + past1 + `"}`, "saleEnd"},                             // ends before the default start (now)
		{`{"price":1,"stock":1}`, "name"},
		{`{"name":"x","price":1.5,"stock":1,"saleStart":"` + start + `","saleEnd":"` + end + `","perUserLimit":0}`, "price"},
	} {
		r := e.do("POST", "/api/admin/products", tok, malformed(tc.body))
		msg := r.wantError(t, 400, CodeInvalidArgument)
		if !strings.Contains(msg, tc.field) {
			t.Errorf("%s: message %q does not name %s", tc.body, msg, tc.field)
		}
		if d := details(t, r); len(d) != 1 || d[0].Field != tc.field || d[0].Message == "" {
			t.Errorf("%s: details %+v, want one of field %s", tc.body, d, tc.field)
		}
	}
	if ps, _ := e.store.ListProducts(context.Background()); len(ps) != 0 {
		t.Fatalf("%d products stored", len(ps))
	}
}
