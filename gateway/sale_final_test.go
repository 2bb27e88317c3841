package gateway

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stampede-sh/stampede/lua"
)

// An ended sale is final: after POST …/end (or its planned end) a PATCH of
// saleEnd (null or later: it would reopen the sale) or saleStart is 409
// SALE_ENDED and changes nothing, in MySQL, Redis and the audit log; buyers
// still get 409 SALE_NOT_ACTIVE. The storefront text may still change.
func TestEndedSaleIsFinal(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	tok := token(t, adminID)
	pid := e.product(openSale(10))
	path := "/api/admin/products/" + strconv.FormatInt(pid, 10)
	if r := e.do("POST", path+"/end", tok, nil); r.status != 200 || productOf(t, r).State != StateEnded {
		t.Fatalf("end: %s", r)
	}
	before, _ := e.store.GetProduct(ctx, pid)
	redisEnd, _ := e.rdb.HGet(ctx, lua.ShardKeys(pid, 0).Stock(), "end").Result()
	audits := len(e.auditOf(pid))
	for _, b := range []string{
		`{"saleEnd":null}`,
		`{"saleEnd":"` + time.Now().Add(time.Hour).UTC().Format(time.RFC3339) + `"}`,
		`{"saleEnd":"2020-01-01T00:00:00Z"}`,
		`{"saleStart":"` + time.Now().Add(-2*time.Hour).UTC().Format(time.RFC3339) + `"}`,
		`{"name":"renamed","saleEnd":null}`,
	} {
		msg := e.do("PATCH", path, tok, b).wantError(t, 409, CodeSaleEnded)
		if !strings.Contains(msg, "final") {
			t.Fatalf("%s: %q", b, msg)
		}
	}
	if after, _ := e.store.GetProduct(ctx, pid); after != before {
		t.Fatalf("a refused PATCH changed the product: %+v → %+v", before, after)
	}
	if got, _ := e.rdb.HGet(ctx, lua.ShardKeys(pid, 0).Stock(), "end").Result(); got != redisEnd {
		t.Fatalf("Redis end %s → %s", redisEnd, got)
	}
	if n := len(e.auditOf(pid)); n != audits {
		t.Fatalf("%d audit entries, want %d", n, audits)
	}
	e.buy(1, pid, 1, "after-end").wantError(t, 409, CodeSaleNotActive)
	// The stored saleEnd again is no change; so is ending it again.
	r := e.do("PATCH", path, tok, `{"saleEnd":"`+before.SaleEnd.UTC().Format(time.RFC3339Nano)+`"}`)
	if r.status != 200 || productOf(t, r).State != StateEnded {
		t.Fatalf("same saleEnd: %s", r)
	}
	if r := e.do("POST", path+"/end", tok, nil); r.status != 200 || !productOf(t, r).SaleEnd.Equal(before.SaleEnd) {
		t.Fatalf("end again: %s", r)
	}
	// Text fields may still change.
	r = e.do("PATCH", path, tok, `{"name":"Past sale","description":"sold in 2026"}`)
	if p := productOf(t, r); r.status != 200 || p.Name != "Past sale" || p.State != StateEnded {
		t.Fatalf("rename ended: %s", r)
	}
	e.buy(1, pid, 1, "after-rename").wantError(t, 409, CodeSaleNotActive)
}

// Names empty after trimming whitespace or holding a control character, and
// descriptions holding a control character other than newline and tab, are
// refused with a 400 naming the field, on creation and PATCH; nothing is
// stored.
func TestProductNameAndDescriptionText(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	tok := token(t, adminID)
	for _, tc := range []struct{ body, field string }{
		{`{"name":"a\u0000b","price":1,"stock":1}`, "name"},
		{`{"name":"   ","price":1,"stock":1}`, "name"},
		{`{"name":"\t\n","price":1,"stock":1}`, "name"},
		{`{"name":"\u00a0\u3000","price":1,"stock":1}`, "name"}, // Unicode spaces only
		{`{"name":"tab\there","price":1,"stock":1}`, "name"},
		{`{"name":"c1\u0085","price":1,"stock":1}`, "name"},
		{`{"name":"del\u007f","price":1,"stock":1}`, "name"},
		{`{"name":"ok","price":1,"stock":1,"description":"a\u0000b"}`, "description"},
		{`{"name":"ok","price":1,"stock":1,"description":"cr\r\nlf"}`, "description"},
		{`{"name":"ok","price":1,"stock":1,"description":"c1\u009b"}`, "description"},
	} {
		r := e.do("POST", "/api/admin/products", tok, tc.body)
		r.wantError(t, 400, CodeInvalidArgument)
		if f := fieldsOf(t, r); len(f) != 1 || f[tc.field] == "" {
			t.Fatalf("%s: %s", tc.body, r.body)
		}
	}
	if ps, _ := e.store.ListProducts(ctx); len(ps) != 0 {
		t.Fatalf("%d products stored", len(ps))
	}
	// Newline and tab stay allowed in a description; inner spaces in a name.
	r := e.do("POST", "/api/admin/products", tok, `{"name":" Flash  widget ","price":1,"stock":1,"description":"line 1\n\tline 2"}`)
	if r.status != 201 {
		t.Fatalf("valid text: %s", r)
	}
	p := productOf(t, r)
	path := "/api/admin/products/" + strconv.FormatInt(p.ID, 10)
	for _, tc := range []struct{ body, field string }{
		{`{"name":"a\u0000b"}`, "name"},
		{`{"name":"  "}`, "name"},
		{`{"description":"bell\u0007"}`, "description"},
	} {
		r := e.do("PATCH", path, tok, tc.body)
		r.wantError(t, 400, CodeInvalidArgument)
		if f := fieldsOf(t, r); len(f) != 1 || f[tc.field] == "" {
			t.Fatalf("PATCH %s: %s", tc.body, r.body)
		}
	}
	if got, _ := e.store.GetProduct(ctx, p.ID); got.Name != " Flash  widget " || got.Description != "line 1\n\tline 2" {
		t.Fatalf("stored %+v", got)
	}
}
