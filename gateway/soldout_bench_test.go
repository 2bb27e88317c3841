package gateway

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// BenchmarkSoldOutAnswer compares the cost of a 409 SOLD_OUT answer through
// the handler: "script" runs reserve.lua (no cache), "cache" answers from the
// sold-out cache after one GET of the request record. Run with
//
//	go test -run '^$' -bench SoldOutAnswer -benchtime 20000x ./gateway/
func BenchmarkSoldOutAnswer(b *testing.B) {
	for _, tc := range []struct {
		name string
		ttl  time.Duration
	}{{"script", 0}, {"cache", time.Hour}} {
		b.Run(tc.name, func(b *testing.B) {
			e := newEnv(b, func(c *Config) { c.SoldOutTTL = tc.ttl })
			pid := e.product(openSale(1))
			e.accepted(1, pid, 1, "first")
			e.buy(2, pid, 1, "second").wantError(b, 409, CodeSoldOut)
			h := e.srv.Handler()
			auth := "Bearer " + token(b, 3)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				var ctx fasthttp.RequestCtx
				i := 0
				for pb.Next() {
					ctx.Request.Reset()
					ctx.Response.Reset()
					ctx.Request.Header.SetMethod("POST")
					ctx.Request.SetRequestURI("/api/orders")
					ctx.Request.Header.Set("Authorization", auth)
					ctx.Request.SetBodyString(fmt.Sprintf(`{"productId":%d,"quantity":1,"requestId":"b-%d"}`, pid, i))
					h(&ctx)
					if ctx.Response.StatusCode() != 409 {
						b.Fatalf("status %d: %s", ctx.Response.StatusCode(), ctx.Response.Body())
					}
					i++
				}
			})
		})
	}
}

// BenchmarkCreateOrderAccepted is the handler cost of a 202 (reserve.lua
// taking a unit and appending to the intake stream), for profiling:
//
//	go test -run '^$' -bench CreateOrderAccepted -benchtime 20000x -cpuprofile cpu.out ./gateway/
func BenchmarkCreateOrderAccepted(b *testing.B) {
	for _, n := range []int{0, 64} {
		b.Run(fmt.Sprintf("pipeline=%d", n), func(b *testing.B) { benchmarkAccepted(b, n) })
	}
}

func benchmarkAccepted(b *testing.B, pipeline int) {
	e := newEnv(b, func(c *Config) { c.ReservePipeline = pipeline })
	pid := e.product(openSale(10_000_000))
	h := e.srv.Handler()
	auths := make([]string, 1000)
	for i := range auths {
		auths[i] = "Bearer " + token(b, int64(10_000+i))
	}
	var seq atomic.Int64
	b.SetParallelism(32) // concurrent requests, as under load
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		var ctx fasthttp.RequestCtx
		for pb.Next() {
			i := seq.Add(1)
			ctx.Request.Reset()
			ctx.Response.Reset()
			ctx.Request.Header.SetMethod("POST")
			ctx.Request.SetRequestURI("/api/orders")
			ctx.Request.Header.Set("Authorization", auths[i%int64(len(auths))])
			ctx.Request.SetBodyString(fmt.Sprintf(`{"productId":%d,"quantity":1,"requestId":"a-%d"}`, pid, i))
			h(&ctx)
			if ctx.Response.StatusCode() != 202 {
				b.Fatalf("status %d: %s", ctx.Response.StatusCode(), ctx.Response.Body())
			}
		}
	})
}
