package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stampede-sh/stampede/lua"
)

type productBody struct {
	ID           int64
	Name         string
	Price        int64
	Total        int64
	Available    int64
	SaleStart    time.Time
	SaleEnd      time.Time
	PerUserLimit int64
	SoldOut      bool
}

func TestProducts(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.ProductCacheTTL = time.Hour })
	a := e.product(openSale(5))
	spec := openSale(100)
	spec.Name, spec.Shards, spec.PerUserLimit = "Second", 1, 4
	b := e.product(spec)
	e.accepted(1, a, 2, "r")

	r := e.do("GET", "/api/products", "", nil)
	var list []productBody
	if err := json.Unmarshal(r.body, &list); err != nil || r.status != 200 {
		t.Fatalf("list: %s", r)
	}
	if len(list) != 2 || list[0].ID != a || list[1].ID != b {
		t.Fatalf("list %s", r.body)
	}
	if p := list[0]; p.Available != 3 || p.Total != 5 || p.Price != 1999 || p.SoldOut || p.Name != "Flash widget" {
		t.Fatalf("product a %+v", p)
	}
	if p := list[1]; p.Available != 100 || p.PerUserLimit != 4 || p.SaleEnd.Sub(p.SaleStart) != 2*time.Hour {
		t.Fatalf("product b %+v", p)
	}
	var fields []map[string]any
	json.Unmarshal(r.body, &fields)
	if len(fields[0]) != 14 || fields[0]["state"] != "live" || fields[0]["shards"] != 1.0 || fields[0]["paused"] != false || !strings.HasSuffix(fields[0]["saleStart"].(string), "Z") {
		t.Fatalf("shape %s", r.body)
	}

	// available is live from Redis even though rows are cached for an hour.
	e.accepted(2, a, 3, "r")
	r = e.do("GET", "/api/products/"+strconv.FormatInt(a, 10), "", nil)
	var one productBody
	if err := json.Unmarshal(r.body, &one); err != nil || r.status != 200 || one.Available != 0 || !one.SoldOut {
		t.Fatalf("get a: %s", r)
	}
	// available is read from the shard's Redis hash.
	if err := e.rdb.HIncrBy(context.Background(), lua.ShardKeys(b, 0).Stock(), "available", -33).Err(); err != nil {
		t.Fatal(err)
	}
	r = e.do("GET", fmt.Sprintf("/api/products/%d", b), "", nil)
	if err := json.Unmarshal(r.body, &one); err != nil || one.Available != 67 {
		t.Fatalf("get b: %s", r)
	}
	e.do("GET", "/api/products/999999", "", nil).wantError(t, 404, CodeProductNotFound)
	for _, id := range []string{"0", "-1", "abc", "99999999999999999999"} { // not productIds
		e.do("GET", "/api/products/"+id, "", malformed(nil)).wantError(t, 404, CodeProductNotFound)
	}
}

func TestProductCacheRefresh(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.ProductCacheTTL = 50 * time.Millisecond })
	if r := e.do("GET", "/api/products", "", nil); r.status != 200 || string(r.body) != "[]" {
		t.Fatalf("empty list: %s", r)
	}
	// A product created elsewhere (another gateway) shows after the TTL.
	p := openSale(1)
	p.Name = "elsewhere"
	other, err := New(baseConfig(), e.rdb, e.store, nil)
	if err != nil {
		t.Fatal(err)
	}
	hc, _ := serveInMemory(t, other)
	if r := doHTTP(t, hc, "POST", "/api/admin/products", token(t, adminID), p); r.status != 201 {
		t.Fatalf("create on the other gateway: %s", r)
	}
	time.Sleep(60 * time.Millisecond)
	if r := e.do("GET", "/api/products", "", nil); !strings.Contains(string(r.body), "elsewhere") {
		t.Fatalf("after TTL: %s", r)
	}
}
