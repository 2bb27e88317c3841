package gateway

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
)

// FuzzCreateOrder feeds arbitrary bodies to POST /api/orders through the
// real handler, Redis and MySQL. Whatever the body: no panic, no 5xx, a JSON
// answer, and a 400 reserves nothing. The seeds run as a normal test.
//
//	go test -run '^$' -fuzz FuzzCreateOrder -fuzztime 60s -parallel 1 ./gateway/
//
// -parallel 1: every fuzz worker process sets up the same Redis database and
// MySQL schema, so two workers would see each other's reservations.
func FuzzCreateOrder(f *testing.F) {
	e := newEnv(f)
	spec := openSale(maxStock) // never sold out
	spec.MaxPerOrder = 10
	pid := e.product(spec)
	if pid != 1 {
		f.Fatalf("product id %d: the seeds assume 1", pid)
	}
	for _, seed := range []string{
		`{"productId":1,"quantity":1,"requestId":"seed-1"}`,
		`{"productId":1,"quantity":1,"requestId":"seed-1"}`, // replay
		`{"productId":1,"quantity":2,"requestId":"seed-1"}`, // key reused
		`{"productId":2,"quantity":1,"requestId":"seed-2"}`, // unknown product
		`{"productId":1,"quantity":11,"requestId":"seed-3"}`,
		`{"productId":1,"quantity":1,"requestId":"seed-4","x":1}`,
		`{"productId":1,"quantity":1,"quantity":1,"requestId":"seed-5"}`,
		`{"productId":1,"quantity":1,"Quantity":1,"requestId":"seed-6"}`,
		`{"productId":1,"quantity":1.5,"requestId":"seed-7"}`,
		`{"productId":1,"quantity":1e2,"requestId":"seed-8"}`,
		`{"productId":1,"quantity":"7","requestId":"seed-9"}`,
		`{"productId":9223372036854775808,"quantity":1,"requestId":"seed-10"}`,
		`{"productId":1,"quantity":-1,"requestId":"seed-11"}`,
		`{"productId":1,"quantity":1}`,
		`{"productId":1,"quantity":1,"requestId":"bad id"}`,
		`{"productId":1,"quantity":1,"requestId":"` + strings.Repeat("a", 65) + `"}`,
		`{"productId":1,"quantity":1,"requestId":"seed-12"} garbage`,
		`{"productId":1,"quantity":1,"requestId":"\u0073eed-13"}`,
		`{"productId":1,"quantity":1,"requestId":"\ud800"}`,
		"{\"productId\":1,\"quantity\":1,\"requestId\":\"\xff\"}",
		`{"productId":1,"quantity":1,"requestId":"` + strings.Repeat("b", 5000) + `"}`,
		``, `{}`, `[]`, `null`, `{"`, `{"productId":`, `{"productId":1,`,
	} {
		f.Add([]byte(seed))
	}
	tok := token(f, 5)
	handler := e.srv.Handler()
	f.Fuzz(func(t *testing.T, body []byte) {
		e := *e // the env's helpers must report to t, not to f
		e.t = t
		avail, intake := e.available(pid, 0), e.intake(pid)
		var req fasthttp.Request
		req.Header.SetMethod(fasthttp.MethodPost)
		req.SetRequestURI("/api/orders")
		req.Header.Set(fasthttp.HeaderAuthorization, "Bearer "+tok)
		req.SetBody(body)
		var ctx fasthttp.RequestCtx
		ctx.Init(&req, nil, nil)
		handler(&ctx)

		status, out := ctx.Response.StatusCode(), ctx.Response.Body()
		if status >= 500 {
			t.Fatalf("%q → %d %s", body, status, out)
		}
		var m map[string]any
		if err := json.Unmarshal(out, &m); err != nil {
			t.Fatalf("%q → %d, body not JSON: %q", body, status, out)
		}
		switch status {
		case 202:
			if e.intake(pid) != intake+1 || m["orderNo"] == nil {
				t.Fatalf("%q → 202 %s but intake %d → %d", body, out, intake, e.intake(pid))
			}
		case 200:
			if m["orderNo"] == nil {
				t.Fatalf("%q → 200 %s", body, out)
			}
			fallthrough
		default:
			if a, n := e.available(pid, 0), e.intake(pid); a != avail || n != intake {
				t.Fatalf("%q → %d %s but available %d → %d, intake %d → %d", body, status, out, avail, a, intake, n)
			}
		}
		if status == 400 && !strings.Contains(string(out), `"INVALID_ARGUMENT"`) {
			t.Fatalf("%q → 400 %s", body, out)
		}
	})
}
