package bench

import (
	"context"
	"strings"
	"testing"

	"github.com/stampede-sh/stampede/persistence/persistencetest"
)

// TestMySQLCeiling inserts the ceiling's rows into a real MariaDB: every
// transaction commits (no error, a rate for all the orders), the private
// tables are gone afterwards, and the summary row gives each design's drain
// as a ratio.
func TestMySQLCeiling(t *testing.T) {
	store := persistencetest.New(t, "benchceiling")
	c := measureMySQLCeiling(context.Background(), store.DB, 1)
	if c.err != nil {
		t.Fatal(c.err)
	}
	if c.orders != mysqlCeilingMinRun || c.ordersPerSec <= 0 {
		t.Errorf("ceiling %+v, want %d orders at a positive rate", c, mysqlCeilingMinRun)
	}
	var left int
	if err := store.DB.QueryRow(`SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name LIKE 'bench\_ceiling\_%'`).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != 0 {
		t.Errorf("%d ceiling tables left behind", left)
	}
	s := &ScenarioResult{Scenario: Drain}
	s.figure("MySQL ceiling", 20000, "orders/s")
	s.figure("writer: drain / MySQL ceiling", 0.391, "×")
	s.figure("batch: drain / MySQL ceiling", 0.07, "×")
	var b strings.Builder
	(&Report{Results: []*ScenarioResult{s}}).mysqlCeilingRows(&b)
	if want := "20,000 orders/s; drain / ceiling: writer 0.39×, batch 0.07×"; !strings.Contains(b.String(), want) {
		t.Errorf("summary row %q lacks %q", b.String(), want)
	}
}
