package pipeline_test

import (
	"bytes"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stampede-sh/stampede/order"
	"github.com/stampede-sh/stampede/persistence"
	"github.com/stampede-sh/stampede/persistence/persistencetest"
	"github.com/stampede-sh/stampede/pipeline"
)

// TestCloseThroughput measures the close path alone, with 1, 2 and 4 close
// workers: orders of one product fall due at STAMPEDE_CLOSE_PERF_RATE
// orders/s (default 6000) for 5 s, as a drain at that rate with nobody
// paying makes them, and one sweeper closes them. It reports the close rate
// (orders / (last close − first deadline)) and the delay of each close past
// its deadline (updated_at − pay_deadline, MySQL clock). A measurement, not
// a check: it runs only with STAMPEDE_CLOSE_PERF=1 (under the bench lock:
// `flock /tmp/bench.lock go test -run TestCloseThroughput -v ./pipeline/`).
func TestCloseThroughput(t *testing.T) {
	if os.Getenv("STAMPEDE_CLOSE_PERF") != "1" {
		t.Skip("a measurement: set STAMPEDE_CLOSE_PERF=1")
	}
	rate := 6000.0
	if v, err := strconv.ParseFloat(os.Getenv("STAMPEDE_CLOSE_PERF_RATE"), 64); err == nil && v > 0 {
		rate = v
	}
	for _, workers := range []int{1, 2, 4} {
		store := persistencetest.New(t, "closeperf")
		gen, err := order.NewNoGenerator(13)
		if err != nil {
			t.Fatal(err)
		}
		n := int(rate * 5)
		p, _ := lockedOrders(t, store, gen, int64(n), n, time.Hour)
		// Deadlines from 1 s from now on, in id order, rate per second.
		if _, err := store.DB.Exec(`UPDATE order_info o JOIN (SELECT MIN(id) m FROM order_info WHERE product_id = ?) f
			SET o.pay_deadline = NOW(3) + INTERVAL 1 SECOND + INTERVAL ROUND((o.id - f.m) * 1000000 / ?) MICROSECOND
			WHERE o.product_id = ?`, p.ID, rate, p.ID); err != nil {
			t.Fatal(err)
		}
		s, err := pipeline.NewSweeper(store, pipeline.SweeperConfig{Workers: workers, Metrics: pipeline.NewMetrics(prometheus.NewRegistry())})
		if err != nil {
			t.Fatal(err)
		}
		cpu0 := mysqlCPU()
		stop := run(t, "sweeper", s.Run)
		deadline := time.Now().Add(5*time.Second + 2*time.Minute)
		for countQ(t, store, `SELECT COUNT(*) FROM order_info WHERE product_id = ? AND status = 'WAITING_PAY'`, p.ID) > 0 {
			if time.Now().After(deadline) {
				t.Fatal("orders still WAITING_PAY after 2 minutes")
			}
			time.Sleep(100 * time.Millisecond)
		}
		stop()
		cpu := mysqlCPU() - cpu0
		delays, span := closeDelays(t, store, p.ID)
		q := func(f float64) time.Duration { return delays[min(len(delays)-1, int(f*float64(len(delays))))] }
		t.Logf("workers %d: %d orders falling due at %.0f/s closed at %.0f orders/s; past the deadline p50 %s p95 %s p99 %s max %s; MySQL server CPU %.0f µs per order",
			workers, n, rate, float64(n)/span.Seconds(), q(0.5), q(0.95), q(0.99), delays[len(delays)-1], cpu.Seconds()*1e6/float64(n))
	}
}

// mysqlCPU is the test MySQL server's user + system CPU time so far, from
// /proc of the pid in STAMPEDE_TEST_MYSQL_PIDFILE (scripts/testservices.sh
// sets it); 0 when unknown. It includes whatever else the server does.
func mysqlCPU() time.Duration {
	raw, err := os.ReadFile(os.Getenv("STAMPEDE_TEST_MYSQL_PIDFILE"))
	if err != nil {
		return 0
	}
	stat, err := os.ReadFile("/proc/" + strings.TrimSpace(string(raw)) + "/stat")
	if err != nil {
		return 0
	}
	i := bytes.LastIndexByte(stat, ')')
	f := strings.Fields(string(stat[i+1:]))
	if i < 0 || len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond // USER_HZ 100
}

// closeDelays returns the sorted close delays of pid's CANCELLED orders and
// the span from the first deadline to the last close.
func closeDelays(t *testing.T, store *persistence.Store, pid int64) ([]time.Duration, time.Duration) {
	t.Helper()
	rows, err := store.DB.Query(`SELECT GREATEST(0, TIMESTAMPDIFF(MICROSECOND, pay_deadline, updated_at)) FROM order_info
		WHERE product_id = ? AND status = 'CANCELLED'`, pid)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []time.Duration
	for rows.Next() {
		var us int64
		if err := rows.Scan(&us); err != nil {
			t.Fatal(err)
		}
		out = append(out, time.Duration(us)*time.Microsecond)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	var spanUS int64
	if err := store.DB.QueryRow(`SELECT TIMESTAMPDIFF(MICROSECOND, MIN(pay_deadline), MAX(updated_at)) FROM order_info WHERE product_id = ?`, pid).Scan(&spanUS); err != nil {
		t.Fatal(err)
	}
	return out, time.Duration(spanUS) * time.Microsecond
}
