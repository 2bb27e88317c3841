package gateway

import (
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// BenchmarkOrderHandler is the cost of POST /api/orders through the whole
// handler (routing, metrics, token, decode, Redis) for the answers of a sale,
// with allocations per request (issue 19). Requests come from 32 goroutines
// at once, as under load, from 1,000 buyers whose tokens repeat:
//
//	soldout    a fresh intent for a product the sold-out cache holds: 409
//	replay     an accepted intent re-sent while the product is on sale: 200
//	replay-so  an accepted intent re-sent after the sell-out: 200
//	*-pipe     the same with Config.LookupPipeline and ReservePipeline 64
//
// The others run the test configuration (baseConfig: LookupPipeline 64, the
// binary's default; ReservePipeline off).
//
//	accepted   a fresh intent that takes a unit: 202
//
// The request bodies are built without allocating, so allocs/op is the
// handler's. Run with
//
//	go test -run '^$' -bench OrderHandler -benchmem -benchtime 20000x ./gateway/
func BenchmarkOrderHandler(b *testing.B) {
	const users = 1000
	auths := make([]string, users)
	for i := range auths {
		auths[i] = "Bearer " + token(b, int64(20_000+i))
	}
	withCache := func(c *Config) { c.SoldOutTTL = time.Hour }
	// body appends {"productId":pid,"quantity":1,"requestId":"<prefix><n>"}.
	body := func(dst []byte, pid int64, prefix string, n int64) []byte {
		dst = append(dst, `{"productId":`...)
		dst = strconv.AppendInt(dst, pid, 10)
		dst = append(dst, `,"quantity":1,"requestId":"`...)
		dst = append(dst, prefix...)
		dst = strconv.AppendInt(dst, n, 10)
		return append(dst, `"}`...)
	}

	withPipe := func(c *Config) { c.LookupPipeline, c.ReservePipeline = 64, 64 }
	soldout := func(b *testing.B, mods ...func(*Config)) {
		e := newEnv(b, append(mods, withCache)...)
		pid := e.product(openSale(1))
		e.accepted(1, pid, 1, "first")
		e.buy(2, pid, 1, "second").wantError(b, 409, CodeSoldOut)
		runHandlerBench(b, e.srv.Handler(), auths, 409, func(dst []byte, i int64) []byte { return body(dst, pid, "s-", i) })
	}
	b.Run("soldout", func(b *testing.B) { soldout(b) })
	b.Run("soldout-pipe", func(b *testing.B) { soldout(b, withPipe) })
	replay := func(b *testing.B, soldOut bool, mods ...func(*Config)) {
		e := newEnv(b, append(mods, withCache)...)
		stock := int64(users)
		if !soldOut {
			stock *= 2
		}
		pid := e.product(openSale(stock))
		for i := range users {
			e.accepted(int64(20_000+i), pid, 1, "r-"+strconv.Itoa(i))
		}
		if soldOut {
			e.buy(2, pid, 1, "late").wantError(b, 409, CodeSoldOut)
		}
		runHandlerBench(b, e.srv.Handler(), auths, 200, func(dst []byte, i int64) []byte { return body(dst, pid, "r-", i%users) })
	}
	b.Run("replay", func(b *testing.B) { replay(b, false) })
	b.Run("replay-pipe", func(b *testing.B) { replay(b, false, withPipe) })
	b.Run("replay-so", func(b *testing.B) { replay(b, true) })
	b.Run("replay-so-pipe", func(b *testing.B) { replay(b, true, withPipe) })
	accepted := func(b *testing.B, mods ...func(*Config)) {
		e := newEnv(b, append(mods, withCache)...)
		pid := e.product(openSale(10_000_000))
		runHandlerBench(b, e.srv.Handler(), auths, 202, func(dst []byte, i int64) []byte { return body(dst, pid, "a-", i) })
	}
	b.Run("accepted", func(b *testing.B) { accepted(b) })
	b.Run("accepted-pipe", func(b *testing.B) { accepted(b, withPipe) })
}

// runHandlerBench runs h from 32 goroutines per CPU: request i is sent by
// buyer i mod len(auths) with the body body(i) and must answer want.
func runHandlerBench(b *testing.B, h fasthttp.RequestHandler, auths []string, want int, body func(dst []byte, i int64) []byte) {
	var seq atomic.Int64
	b.ReportAllocs()
	b.SetParallelism(32)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		var ctx fasthttp.RequestCtx
		buf := make([]byte, 0, 128)
		for pb.Next() {
			i := seq.Add(1) - 1
			ctx.Request.Reset()
			ctx.Response.Reset()
			ctx.Request.Header.SetMethod("POST")
			ctx.Request.SetRequestURI("/api/orders")
			ctx.Request.Header.Set("Authorization", auths[i%int64(len(auths))])
			buf = body(buf[:0], i)
			ctx.Request.SetBody(buf)
			h(&ctx)
			if ctx.Response.StatusCode() != want {
				panic(fmt.Sprintf("status %d: %s; want %d", ctx.Response.StatusCode(), ctx.Response.Body(), want))
			}
		}
	})
}

// BenchmarkTicketHandler is the cost of POST /api/products/{id}/queue
// through the whole handler (routing, metrics, token, one Redis call) for a
// new ticket of a new buyer each request (new), and for a buyer asking for
// its ticket again (again); *-pipe with Config.RoomPipeline 64. Run with
//
//	go test -run '^$' -bench TicketHandler -benchmem -benchtime 20000x ./gateway/
func BenchmarkTicketHandler(b *testing.B) {
	const users = 20_000
	auths := make([]string, users)
	for i := range auths {
		auths[i] = "Bearer " + token(b, int64(50_000+i))
	}
	run := func(b *testing.B, again bool, mods ...func(*Config)) {
		e := newEnv(b, mods...)
		pid := e.roomProduct(1_000_000)
		path := "/api/products/" + strconv.FormatInt(pid, 10) + "/queue"
		if again {
			for i := range 1000 {
				e.place(int64(50_000+i), pid)
			}
		}
		var seq atomic.Int64
		h := e.srv.Handler()
		b.ReportAllocs()
		b.SetParallelism(32)
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			var ctx fasthttp.RequestCtx
			for pb.Next() {
				i := seq.Add(1) - 1
				if again {
					i %= 1000
				}
				ctx.Request.Reset()
				ctx.Response.Reset()
				ctx.Request.Header.SetMethod("POST")
				ctx.Request.SetRequestURI(path)
				ctx.Request.Header.Set("Authorization", auths[i%users])
				h(&ctx)
				if ctx.Response.StatusCode() != 200 {
					panic(fmt.Sprintf("status %d: %s", ctx.Response.StatusCode(), ctx.Response.Body()))
				}
			}
		})
	}
	pipe := func(c *Config) { c.RoomPipeline = 64 }
	b.Run("new", func(b *testing.B) { run(b, false) })
	b.Run("new-pipe", func(b *testing.B) { run(b, false, pipe) })
	b.Run("again", func(b *testing.B) { run(b, true) })
	b.Run("again-pipe", func(b *testing.B) { run(b, true, pipe) })
}
