package persistence_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/stampede-sh/stampede/bench/loadgen"
	"github.com/stampede-sh/stampede/order"
	"github.com/stampede-sh/stampede/persistence"
	"github.com/stampede-sh/stampede/persistence/persistencetest"
)

// BenchmarkLockStock measures the order-lock consumer's transaction
// (Store.LockStock: consume log row, PROCESSING → WAITING_PAY, the product's
// stock row available → locked, a stock flow and two outbox rows; one
// transaction per order) with 16 concurrent workers, the consumer's default
// concurrency × 2 consumers. Two cases in the same run:
//
//   - products=16, the baseline: the orders spread over 16 products, so the
//     transactions rarely wait for each other;
//   - products=1: every order of one product, so every transaction waits for
//     the row lock on that product's single stock row, held until the commit
//     of the one before — the hot-row limit of docs/scaling.md.
//
// It reports orders/s and the latency of one LockStock call (p50, p95, p99).
// Run with a fixed count, e.g.
//
//	go test -run '^$' -bench LockStock -benchtime 4000x ./persistence/
func BenchmarkLockStock(b *testing.B) {
	for _, products := range []int{16, 1} {
		b.Run(fmt.Sprintf("products=%d", products), func(b *testing.B) {
			benchLockStock(b, products, 16)
		})
	}
}

func benchLockStock(b *testing.B, products, workers int) {
	ctx := context.Background()
	s := persistencetest.New(b, "bench_lock")
	gen, _ := order.NewNoGenerator(3)
	var pids []int64
	names := map[int64]string{}
	for range products {
		p, err := s.CreateProduct(ctx, persistence.Product{Name: "bench", Price: 100, Total: int64(b.N), MaxPerOrder: 1,
			SaleStart: time.Now().Add(-time.Hour), SaleEnd: time.Now().Add(time.Hour)})
		if err != nil {
			b.Fatal(err)
		}
		pids = append(pids, p.ID)
		names[p.ID] = p.Name
	}
	nos := make([]string, b.N)
	for start := 0; start < b.N; start += 1000 {
		var batch []order.Reservation
		for i := start; i < min(start+1000, b.N); i++ {
			pid := pids[i%products]
			r := order.Reservation{OrderNo: gen.Next(pid, 0), UserID: int64(i + 1), RequestID: fmt.Sprintf("b%d", i),
				ProductID: pid, Quantity: 1, UnitPrice: 100, AcceptedAt: time.Now().UTC()}
			nos[i] = r.OrderNo
			batch = append(batch, r)
		}
		if _, err := s.InsertReservations(ctx, batch, names); err != nil {
			b.Fatal(err)
		}
	}

	hists := make([]*hdrhistogram.Histogram, workers)
	var next atomic.Int64
	var failed atomic.Value
	var wg sync.WaitGroup
	b.ResetTimer()
	t0 := time.Now()
	for w := range workers {
		h := loadgen.NewHistogram()
		hists[w] = h
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= b.N {
					return
				}
				t := time.Now()
				out, _, err := s.LockStock(ctx, order.CreatedEventID(nos[i]), nos[i], "order-lock", time.Hour)
				if err != nil || out != persistence.LockLocked {
					failed.Store(fmt.Sprintf("lock %s: %v %v", nos[i], out, err))
					return
				}
				loadgen.Record(h, time.Since(t))
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(t0)
	b.StopTimer()
	if msg := failed.Load(); msg != nil {
		b.Fatal(msg)
	}
	all := loadgen.NewHistogram()
	for _, h := range hists {
		all.Merge(h)
	}
	sum := loadgen.Summarize(all)
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "orders/s")
	b.ReportMetric(sum.P50, "p50-ms")
	b.ReportMetric(sum.P95, "p95-ms")
	b.ReportMetric(sum.P99, "p99-ms")
	b.ReportMetric(0, "ns/op")

	// Every order locked once: the stock rows add up.
	var locked int64
	if err := s.DB.QueryRow(`SELECT COALESCE(SUM(locked), 0) FROM stock`).Scan(&locked); err != nil || locked != int64(b.N) {
		b.Fatalf("locked %d, want %d (%v)", locked, b.N, err)
	}
}
