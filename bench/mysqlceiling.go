package bench

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// MySQL ceiling of the drain: what this MySQL accepts of the rows one order
// minimally needs to be WAITING_PAY (its order_info row, its order_item row
// and its LOCK stock_flow row), inserted with plain multi-row INSERTs,
// mysqlCeilingPerTx orders per transaction from mysqlCeilingConns
// connections, into private copies of the three tables (CREATE TABLE … LIKE:
// the same columns and indexes), without any Stampede code. No drain design
// can beat it on the same MySQL; the drain is reported as a ratio to it.
const (
	mysqlCeilingPerTx  = 500
	mysqlCeilingConns  = 4
	mysqlCeilingMinRun = 20_000 // orders inserted at least, so that the run outlasts start-up
)

// mysqlCeiling is one measurement of the MySQL ceiling.
type mysqlCeiling struct {
	orders       int64
	elapsed      time.Duration
	ordersPerSec float64
	err          error
}

// measureMySQLCeiling inserts max(orders, mysqlCeilingMinRun) orders' rows
// into private tables "bench_ceiling_<run>_{order,item,flow}" created for it
// and dropped afterwards. Errors: the tables could not be created (a MySQL
// user without CREATE), an insert failed.
func measureMySQLCeiling(ctx context.Context, db *sql.DB, orders int64) mysqlCeiling {
	prefix := "bench_ceiling_" + newRunID() + "_"
	tables := [][2]string{{prefix + "order", "order_info"}, {prefix + "item", "order_item"}, {prefix + "flow", "stock_flow"}}
	defer func() {
		for _, t := range tables {
			_, _ = db.ExecContext(context.WithoutCancel(ctx), "DROP TABLE IF EXISTS "+t[0])
		}
	}()
	for _, t := range tables {
		if _, err := db.ExecContext(ctx, "CREATE TABLE "+t[0]+" LIKE "+t[1]); err != nil {
			return mysqlCeiling{err: fmt.Errorf("create %s: %w", t[0], err)}
		}
	}
	orders = max(orders, mysqlCeilingMinRun)
	var next atomic.Int64 // orders handed out, in transactions of mysqlCeilingPerTx
	var firstErr error
	var once sync.Once
	var wg sync.WaitGroup
	start := time.Now()
	for range mysqlCeilingConns {
		wg.Go(func() {
			for {
				lo := next.Add(mysqlCeilingPerTx) - mysqlCeilingPerTx
				if lo >= orders || ctx.Err() != nil {
					return
				}
				if err := insertCeilingTx(ctx, db, prefix, lo, min(orders, lo+mysqlCeilingPerTx)); err != nil {
					once.Do(func() { firstErr = err })
					return
				}
			}
		})
	}
	wg.Wait()
	c := mysqlCeiling{orders: orders, elapsed: time.Since(start), err: firstErr}
	if c.err == nil {
		c.ordersPerSec = float64(orders) / c.elapsed.Seconds()
	}
	return c
}

// insertCeilingTx inserts orders lo…hi−1 (order, item and LOCK flow rows,
// as a WAITING_PAY order has them) in one transaction: three multi-row
// INSERTs and a COMMIT.
func insertCeilingTx(ctx context.Context, db *sql.DB, prefix string, lo, hi int64) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() // after Commit: a no-op
	now := time.Now().UTC()
	n := int(hi - lo)
	var oa, ia, fa []any
	for i := lo; i < hi; i++ {
		no := fmt.Sprintf("C%018d", i)
		oa = append(oa, no, i%100_000+1, fmt.Sprintf("req-%d", i), 1, 1, 1999, "WAITING_PAY", 2, now.Add(15*time.Minute), now, now)
		ia = append(ia, no, 1, "ceiling", 1999, 1, 1999)
		fa = append(fa, "LOCK", no, 1, 1)
	}
	stmts := []struct {
		sql  string
		row  string
		args []any
	}{
		{"INSERT INTO " + prefix + "order (order_no, user_id, request_id, product_id, quantity, amount, status, version, pay_deadline, created_at, updated_at) VALUES ",
			"(?,?,?,?,?,?,?,?,?,?,?)", oa},
		{"INSERT INTO " + prefix + "item (order_no, product_id, product_name, unit_price, quantity, amount) VALUES ", "(?,?,?,?,?,?)", ia},
		{"INSERT INTO " + prefix + "flow (biz_type, biz_no, product_id, quantity) VALUES ", "(?,?,?,?)", fa},
	}
	for _, st := range stmts {
		q := st.sql + strings.TrimSuffix(strings.Repeat(st.row+",", n), ",")
		if _, err := tx.ExecContext(ctx, q, st.args...); err != nil {
			return fmt.Errorf("mysql ceiling insert: %w", err)
		}
	}
	return tx.Commit()
}

// addMySQLCeiling measures the MySQL ceiling after the drain's designs ran
// (same run, same MySQL, same data already in it), with the pipeline roles
// stopped first so that no release, relay or close competes with the
// inserts (runDrain starts them again at its end), and adds to s a table with
// the ceiling and each design's drain as a ratio to it, and the figures
// "MySQL ceiling" (orders/s) and "<design>: drain / MySQL ceiling". A
// ceiling that could not be measured is a note, not a failure of the drain.
func (r *run) addMySQLCeiling(ctx context.Context, s *ScenarioResult, runs []*drainRun) {
	orders := r.p.DrainOrders
	r.env.Pipeline.Stop()
	r.logf("   MySQL ceiling: inserting %d orders' rows (order, item, flow), %d per transaction, %d connections",
		max(orders, mysqlCeilingMinRun), mysqlCeilingPerTx, mysqlCeilingConns)
	c := measureMySQLCeiling(ctx, r.env.Store.DB, orders)
	if c.err != nil {
		s.Notes = append(s.Notes, "MySQL ceiling not measured: "+c.err.Error())
		return
	}
	r.logf("   MySQL ceiling: %s orders/s (%d orders in %s)", fmtNum(c.ordersPerSec), c.orders, c.elapsed.Round(time.Millisecond))
	tbl := Table{Title: fmt.Sprintf("MySQL ceiling: plain multi-row INSERTs of the rows one WAITING_PAY order needs (order_info, order_item, stock_flow LOCK; copies of the tables with their indexes), %d orders per transaction, %d connections, no Stampede code, measured after the designs in this run with the pipeline roles stopped",
		mysqlCeilingPerTx, mysqlCeilingConns),
		Header: []string{"what", "orders", "orders/s", "drain / ceiling"}}
	tbl.Rows = append(tbl.Rows, []string{"MySQL ceiling", fmt.Sprint(c.orders), fmtNum(c.ordersPerSec), "1"})
	s.figure("MySQL ceiling", c.ordersPerSec, "orders/s")
	for _, dr := range runs {
		ratio := dr.rate / c.ordersPerSec
		tbl.Rows = append(tbl.Rows, []string{dr.label() + " drain (10–90 %)", fmt.Sprint(dr.accepted), fmtNum(dr.rate), fmt.Sprintf("%.2f×", ratio)})
		s.figure(dr.label()+": drain / MySQL ceiling", ratio, "×")
	}
	s.Tables = append(s.Tables, tbl)
}
