package gateway

import (
	"sync"
	"sync/atomic"
	"testing"
)

// TestReservePipeline: with pipelined reserve calls, 400 buyers for 100 units
// and one requestId sent 50 times at once still give exactly 100 orders and
// one orderNo.
func TestReservePipeline(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.ReservePipeline = 16 })
	pid := e.product(openSale(100))
	var accepted, soldOut atomic.Int64
	var wg sync.WaitGroup
	for u := range int64(400) {
		wg.Go(func() {
			switch r := e.buy(5000+u, pid, 1, "pipe"); r.status {
			case 202:
				accepted.Add(1)
			case 409:
				soldOut.Add(1)
			default:
				t.Errorf("buyer %d: %s", u, r)
			}
		})
	}
	wg.Wait()
	if accepted.Load() != 100 || soldOut.Load() != 300 || e.available(pid, 0) != 0 || e.intake(pid) != 100 {
		t.Fatalf("accepted %d, sold out %d, available %d, intake %d", accepted.Load(), soldOut.Load(), e.available(pid, 0), e.intake(pid))
	}

	pid2 := e.product(openSale(10))
	nos := make(chan string, 50)
	for range 50 {
		wg.Go(func() {
			r := e.buy(42, pid2, 1, "same")
			if r.status != 202 && r.status != 200 {
				t.Errorf("duplicate: %s", r)
				return
			}
			nos <- r.json(t)["orderNo"].(string)
		})
	}
	wg.Wait()
	close(nos)
	first := ""
	for no := range nos {
		if first == "" {
			first = no
		} else if no != first {
			t.Fatalf("orderNos %s and %s for one requestId", first, no)
		}
	}
	if a := e.available(pid2, 0); a != 9 {
		t.Fatalf("available %d; want 9", a)
	}
}
