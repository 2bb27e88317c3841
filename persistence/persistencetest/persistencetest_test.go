package persistencetest

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stampede-sh/stampede/persistence"
)

// product stores a product in s.
func product(t *testing.T, s *persistence.Store) {
	t.Helper()
	now := time.Now()
	if _, err := s.CreateProduct(context.Background(), persistence.Product{Name: "p", Price: 1, Total: 1, MaxPerOrder: 1,
		SaleStart: now, SaleEnd: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
}

// databases lists the server's databases.
func databases(t *testing.T, db *sql.DB) []string {
	t.Helper()
	rows, err := db.Query(`SELECT schema_name FROM information_schema.schemata`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		out = append(out, n)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// dropPooled makes the databases pooled in test t dropped when it ends: the
// test forces the pool (STAMPEDE_TEST_OWNED) on a server that may be a
// developer's.
func dropPooled(t *testing.T) {
	db := admin(t)
	t.Cleanup(func() {
		pool.mu.Lock()
		idle := pool.idle
		pool.idle = nil
		pool.mu.Unlock()
		for _, d := range idle {
			if _, err := db.Exec("DROP DATABASE IF EXISTS `" + d.Name + "`"); err != nil {
				t.Errorf("left behind: %v", err)
			}
		}
	})
}

func admin(t *testing.T) *sql.DB {
	t.Helper()
	db, err := server()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// On a server that is not the run's own, a test's database is dropped when
// the test ends; the developer's databases, and databases that only look
// like the tests' (an older fixed name, a recent one of another run), are
// never touched; a database of this naming older than Lease is dropped.
func TestExternalServerDropsOnlyWhatTheTestsCreated(t *testing.T) {
	t.Setenv("STAMPEDE_TEST_OWNED", "")
	db := admin(t)
	suffix := fmt.Sprintf("%06x", rand.Uint32()&0xffffff)
	mine := "mydev_keep_" + suffix
	fixed := "stampede_test_cmd_" + suffix // an older run's fixed name: not this naming
	recent := "stampede_test_other_" + time.Now().UTC().Format(nameTime) + suffix
	old := "stampede_test_old_" + time.Now().Add(-Lease-time.Hour).UTC().Format(nameTime) + suffix
	for _, n := range []string{mine, fixed, recent, old} {
		if _, err := db.Exec("CREATE DATABASE `" + n + "`"); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, n := range []string{mine, fixed, recent, old} {
			db.Exec("DROP DATABASE IF EXISTS `" + n + "`")
		}
	})
	if _, err := db.Exec("CREATE TABLE `" + mine + "`.keep (v INT)"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("INSERT INTO `" + mine + "`.keep VALUES (42)"); err != nil {
		t.Fatal(err)
	}

	if err := sweepLeftBehind(context.Background(), db, time.Now()); err != nil {
		t.Fatal(err)
	}
	var name string
	t.Run("test", func(t *testing.T) {
		s := New(t, "probe")
		name = Name(s)
		if !nameRE.MatchString(name) {
			t.Fatalf("database %q is not of this package's naming", name)
		}
		product(t, s)
	})
	have := databases(t, db)
	for _, n := range []string{mine, fixed, recent} {
		if !slices.Contains(have, n) {
			t.Errorf("database %s was dropped: the tests did not create it", n)
		}
	}
	if slices.Contains(have, old) {
		t.Errorf("database %s, left behind by a run more than %v ago, is still there", old, Lease)
	}
	if slices.Contains(have, name) {
		t.Errorf("the test's database %s is still there after the test", name)
	}
	var v int
	if err := db.QueryRow("SELECT v FROM `" + mine + "`.keep").Scan(&v); err != nil || v != 42 {
		t.Errorf("the developer's row: %d %v", v, err)
	}
}

// On the run's own server the databases are pooled: the next test gets the
// last one's database, migrated and empty, without creating another — also
// when the last one left a pinned connection holding an advisory lock and an
// open transaction (a test that failed before its cleanup), which would
// block the truncation and keep the lock from the next test's sweepers.
func TestOwnedServerPoolsDatabases(t *testing.T) {
	t.Setenv("STAMPEDE_TEST_OWNED", serverAddr())
	dropPooled(t)
	var first, second string
	t.Run("first", func(t *testing.T) {
		s := New(t, "pool")
		first = Name(s)
		product(t, s)
		ctx := context.Background()
		if _, ok, err := s.TryLock(ctx, "sweeper.close"); !ok || err != nil {
			t.Fatalf("lock: %v %v", ok, err)
		}
		tx, err := s.DB.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(`UPDATE product SET name = 'held'`); err != nil {
			t.Fatal(err)
		}
		// Neither the lock nor the transaction is ever released.
	})
	t.Run("second", func(t *testing.T) {
		s := New(t, "pool")
		second = Name(s)
		var n int
		if err := s.DB.QueryRow(`SELECT COUNT(*) FROM product`).Scan(&n); err != nil || n != 0 {
			t.Fatalf("pooled database holds %d products (%v), want none", n, err)
		}
		l, ok, err := s.TryLock(context.Background(), "sweeper.close")
		if !ok || err != nil {
			t.Fatalf("the last test's lock is still held: %v %v", ok, err)
		}
		l.Release()
	})
	if first != second {
		t.Fatalf("second test got %s, want the pooled %s", second, first)
	}
}

// Databases held at once are distinct, whether acquired at once (parallel
// tests) or from the pool, and two labels of one test are two databases.
func TestHeldDatabasesNeverShared(t *testing.T) {
	t.Setenv("STAMPEDE_TEST_OWNED", serverAddr()) // the pool in play
	dropPooled(t)
	ctx := context.Background()
	held := make([]*Database, 6)
	errs := make([]error, len(held))
	var wg sync.WaitGroup
	for i := range held {
		wg.Add(1)
		go func() {
			defer wg.Done()
			held[i], errs[i] = Acquire(ctx, "shared_label")
		}()
	}
	wg.Wait()
	seen := map[string]bool{}
	for i, d := range held {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if seen[d.Name] {
			t.Errorf("database %s held twice at once", d.Name)
		}
		seen[d.Name] = true
	}
	for _, d := range held {
		if err := d.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	t.Run("two labels", func(t *testing.T) {
		if a, b := Name(New(t, "one")), Name(New(t, "two")); a == b {
			t.Fatalf("labels one and two share %s", a)
		}
	})
}
