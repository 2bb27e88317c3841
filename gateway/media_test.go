package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
)

// A product's imageUrl and description (issue 15) are stored, shown in the
// product JSON (absent when empty) and validated: 400 INVALID_ARGUMENT naming
// the field.
func TestProductMedia(t *testing.T) {
	e := newEnv(t)
	tok := token(t, adminID)
	start := time.Now().Add(-time.Minute).UTC().Format(time.RFC3339)
	end := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	body := func(extra string) string {
		return `{"name":"Sneaker","price":1999,"stock":5,"saleStart":"` + start + `","saleEnd":"` + end + `","perUserLimit":0` + extra + `}`
	}
	desc := strings.Repeat("Ünïcode ", 248) + "\nlast line\tend!!" // 2000 characters, more bytes
	descJSON, _ := json.Marshal(desc)
	url := "https://cdn.shop.test/img/sneaker%20red.png?w=640"
	r := e.do("POST", "/api/admin/products", tok, body(`,"imageUrl":"`+url+`","description":`+string(descJSON)))
	if r.status != 201 {
		t.Fatalf("create: %s", r)
	}
	m := r.json(t)
	if m["imageUrl"] != url || m["description"] != desc {
		t.Fatalf("201 body %s", r.body)
	}
	id, _ := m["id"].(json.Number).Int64()
	p, err := e.store.GetProduct(context.Background(), id)
	if err != nil || p.ImageURL != url || p.Description != desc {
		t.Fatalf("stored %+v %v", p, err)
	}
	got := e.do("GET", fmt.Sprintf("/api/products/%d", id), "", nil).json(t)
	if got["imageUrl"] != url || got["description"] != desc {
		t.Fatalf("GET product %v", got)
	}

	// Without them the fields are absent; null is the same as absent.
	r = e.do("POST", "/api/admin/products", tok, body(`,"imageUrl":null`))
	if m := r.json(t); r.status != 201 || m["imageUrl"] != nil || m["description"] != nil {
		t.Fatalf("plain product: %s", r)
	}

	long := "https://cdn.shop.test/" + strings.Repeat("a", 2048-len("https://cdn.shop.test/")+1)
	for _, tc := range []struct{ extra, field string }{
		{`,"imageUrl":"javascript:alert(1)"`, "imageUrl"},
		{`,"imageUrl":"data:image/png;base64,AAAA"`, "imageUrl"},
		{`,"imageUrl":"/img/local.png"`, "imageUrl"},
		{`,"imageUrl":"https://"`, "imageUrl"},
		{`,"imageUrl":"ftp://cdn.shop.test/a.png"`, "imageUrl"},
		{`,"imageUrl":"https://user:pw@cdn.shop.test/a.png"`, "imageUrl"},
		{`,"imageUrl":"https://cdn.shop.test/a b.png"`, "imageUrl"},
		{`,"imageUrl":"https://cdn.shop.test/\"onerror=\"x"`, "imageUrl"},
		{`,"imageUrl":"https://cdn.shop.test/é.png"`, "imageUrl"},
		{`,"imageUrl":"` + long + `"`, "imageUrl"},
		{`,"imageUrl":7`, "imageUrl"},
		{`,"description":"` + strings.Repeat("x", 2001) + `"`, "description"},
		{`,"description":"bell\u0007"`, "description"},
		{`,"description":5`, "description"},
	} {
		msg := e.do("POST", "/api/admin/products", tok, malformed(body(tc.extra))).wantError(t, 400, CodeInvalidArgument)
		if !strings.Contains(msg, tc.field) {
			t.Errorf("%.80s: message %q does not name %s", tc.extra, msg, tc.field)
		}
	}
	if ps, _ := e.store.ListProducts(context.Background()); len(ps) != 2 {
		t.Fatalf("%d products stored, want 2", len(ps))
	}
}
