package pipeline_test

// Issue 14: an admin pauses a running sale on one of two gateways; within the
// bound (none: from the moment the pause answered) neither gateway accepts a
// reservation, resume re-opens it on both, and every accepted order ends
// WAITING_PAY with the docs/spec.md §5 audit passing.

import (
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stampede-sh/stampede/gateway"
	"github.com/stampede-sh/stampede/order"
	"github.com/stampede-sh/stampede/pipeline"
)

func TestPauseDuringSaleTwoGateways(t *testing.T) {
	e := newEnv(t)
	startPipeline(e, pipeline.ConsumerConfig{})
	g1 := startGateway(e)
	g2 := startGateway(e, func(c *gateway.Config) { c.NodeID = 10 }) // its own orderNos
	pid := g1.product(100_000, 3)                                    // sharded: every shard must see the pause
	path := "/api/admin/products/" + strconv.FormatInt(pid, 10)
	gws := []*gw{g1, g2}

	// pausedAt: unix ns when the pause answered 200; resumeSent: when the
	// resume was sent.
	var pausedAt, resumeSent atomic.Int64
	type result struct {
		sent   time.Time
		done   time.Time
		gw     int
		status int
		code   string
		no     string
	}
	var mu sync.Mutex
	var results []result
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 6 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				g := w % 2
				sent := time.Now()
				a := gws[g].buy(int64(1000+w*100_000+i), pid, fmt.Sprintf("w%d-%d", w, i))
				mu.Lock()
				results = append(results, result{sent, time.Now(), g, a.status, a.code(), a.str("orderNo")})
				mu.Unlock()
			}
		})
	}
	time.Sleep(300 * time.Millisecond)
	for range 2 { // idempotent
		if a := g1.do("POST", path+"/pause", gwAdmin, nil); a.status != 200 || a.body["state"] != "paused" {
			t.Fatalf("pause: %d %s", a.status, a.raw)
		}
		if pausedAt.Load() == 0 {
			pausedAt.Store(time.Now().UnixNano())
		}
	}
	// The other gateway's product JSON shows the pause within its product
	// cache TTL (1 s).
	deadline := time.Now().Add(1500 * time.Millisecond)
	for g2.do("GET", "/api/products/"+strconv.FormatInt(pid, 10), 0, nil).body["state"] != "paused" {
		if time.Now().After(deadline) {
			t.Fatal("gateway 2 does not show the pause after 1.5 s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond)
	resumeSent.Store(time.Now().UnixNano())
	if a := g2.do("POST", path+"/resume", gwAdmin, nil); a.status != 200 || a.body["state"] != "live" {
		t.Fatalf("resume: %d %s", a.status, a.raw)
	}
	time.Sleep(300 * time.Millisecond)
	close(stop)
	wg.Wait()

	p0, r0 := time.Unix(0, pausedAt.Load()), time.Unix(0, resumeSent.Load())
	var accepted []string
	var before, during, after, pausedAnswers [2]int
	for _, r := range results {
		switch {
		case r.status == 202:
			accepted = append(accepted, r.no)
			switch {
			case r.sent.After(p0) && r.done.Before(r0):
				// Sent after the pause answered, answered before the resume
				// was sent: must not be accepted.
				during[r.gw]++
			case r.sent.Before(p0):
				before[r.gw]++
			default:
				after[r.gw]++
			}
		case r.status == 409 && r.code == "SALE_PAUSED":
			pausedAnswers[r.gw]++
		default:
			t.Fatalf("answer %d %s on gateway %d", r.status, r.code, r.gw+1)
		}
	}
	t.Logf("accepted before the pause %v, while paused %v, after the resume %v; SALE_PAUSED answers %v", before, during, after, pausedAnswers)
	for g := range 2 {
		if during[g] != 0 {
			t.Errorf("gateway %d accepted %d reservations sent after the pause answered", g+1, during[g])
		}
		if before[g] == 0 || after[g] == 0 || pausedAnswers[g] == 0 {
			t.Errorf("gateway %d: accepted before %d, after %d, paused answers %d: want all > 0", g+1, before[g], after[g], pausedAnswers[g])
		}
	}
	// None lost: every 202 is an order, and the audit of docs/spec.md §5 passes.
	rep := e.waitIdle(pid)
	for _, pa := range rep.Products {
		if pa.ProductID == pid && pa.Orders[order.WaitingPay][0] != int64(len(accepted)) {
			t.Fatalf("%d WAITING_PAY orders, %d accepted", pa.Orders[order.WaitingPay][0], len(accepted))
		}
	}
	for _, no := range accepted {
		if st := e.status(no); st != order.WaitingPay {
			t.Fatalf("order %s is %s", no, st)
		}
	}
	// The audit: the pause once (the second changed nothing), the resume once.
	if n := e.count(`SELECT COUNT(*) FROM admin_audit WHERE product_id = ? AND action = 'pause'`, pid); n != 1 {
		t.Fatalf("%d pause entries", n)
	}
	if n := e.count(`SELECT COUNT(*) FROM admin_audit WHERE product_id = ? AND action = 'resume' AND admin_id = ?`, pid, gwAdmin); n != 1 {
		t.Fatalf("%d resume entries", n)
	}
}
