// Package persistencetest gives tests a migrated MySQL database of their
// own: one the package created ("stampede_test_<label>_<UTC yymmddhhmm><6
// random hex digits>", short enough that a lock name scoped by it, such as
// "stampede.sweeper.close.<database>", stays within MySQL's 64 characters),
// emptied between uses, never one it did not create. Use it only from
// _test.go files.
//
// On the servers of the run's own (scripts/testservices.sh lists them in
// STAMPEDE_TEST_OWNED) the databases are pooled, as river's
// riverdbtest.TestSchema pools schemas: a test's database is truncated
// when the test ends and handed to the next test of the process, so each
// is created and migrated once; the server goes with the run. On any other
// server (a developer's own, STAMPEDE_TEST_MYSQL_DSN) each test's database
// is dropped when the test ends, and databases of this naming older than
// Lease (left by a run killed before its cleanup) are dropped by the next
// run; nothing else is ever touched.
package persistencetest

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/stampede-sh/stampede/persistence"
)

// ServerDSN is the DSN of the test MySQL server without a database, from
// STAMPEDE_TEST_MYSQL_DSN or the loopback default.
func ServerDSN() string {
	if dsn := os.Getenv("STAMPEDE_TEST_MYSQL_DSN"); dsn != "" {
		return dsn
	}
	return "root@tcp(127.0.0.1:3306)/"
}

// DSN returns the DSN of database name on the test server.
func DSN(name string) string {
	dsn := ServerDSN()
	i := strings.LastIndex(dsn, "/")
	rest := ""
	if q := strings.Index(dsn[i:], "?"); q >= 0 {
		rest = dsn[i+q:]
	}
	return dsn[:i+1] + name + rest
}

// Tables lists every table, in an order safe for truncation.
var Tables = []string{"user_identity", "admin_audit", "product_drop", "payment", "mq_consume_log", "mq_outbox", "stock_flow", "order_item", "order_info", "stock", "product"}

// Lease is the age after which a database of this naming on a server not
// the run's own counts as left behind (its run was killed before its
// cleanup) and is dropped by the next run. Longer than any test binary runs.
const Lease = 3 * time.Hour

// Owned reports whether the server at addr (host:port) belongs to this run:
// it is listed in STAMPEDE_TEST_OWNED (comma-separated host:port), which
// scripts/testservices.sh writes for the servers it starts.
func Owned(addr string) bool {
	return addr != "" && slices.Contains(strings.Split(os.Getenv("STAMPEDE_TEST_OWNED"), ","), addr)
}

// Database is a migrated database of the test server created by this
// package for one user at a time.
type Database struct {
	Name  string
	owned bool // the server is the run's own: pool it
}

// DSN is the database's DSN on the test server.
func (d *Database) DSN() string { return DSN(d.Name) }

var pool struct {
	mu     sync.Mutex
	idle   []*Database
	swept  bool // databases left behind by killed runs dropped (not owned)
	serial int
}

// nameRE matches the databases this package creates: label, creation time
// (UTC, to the minute), random suffix.
var nameRE = regexp.MustCompile(`^stampede_test_[a-z0-9_]*_(\d{10})[0-9a-f]{6}$`)

// nameTime is the layout of the creation time in a name.
const nameTime = "0601021504"

// newName is a fresh database name for label.
func newName(label string) string {
	clean := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_' {
			return r
		}
		if r >= 'A' && r <= 'Z' {
			return r + 'a' - 'A'
		}
		return '_'
	}, label)
	if len(clean) > 24 {
		clean = clean[:24]
	}
	return fmt.Sprintf("stampede_test_%s_%s%06x", clean, time.Now().UTC().Format(nameTime), rand.Uint32()&0xffffff)
}

// serverAddr is the host:port of the test server.
func serverAddr() string {
	cfg, err := mysql.ParseDSN(ServerDSN())
	if err != nil {
		return ""
	}
	return cfg.Addr
}

// server opens a connection pool to the test server without a database;
// the caller closes it (no pool outlives a call: goleak checks the tests).
func server() (*sql.DB, error) {
	cfg, err := persistence.NormalizeDSN(ServerDSN())
	if err != nil {
		return nil, err
	}
	cfg.DBName = ""
	return sql.Open("mysql", cfg.FormatDSN())
}

// Acquire returns an empty, migrated database of the caller's own (label
// names it, for whoever reads the server's list of databases): an idle one
// of the pool, or a new one. The caller calls Release when done.
func Acquire(ctx context.Context, label string) (*Database, error) {
	owned := Owned(serverAddr())
	pool.mu.Lock()
	if owned && len(pool.idle) > 0 {
		d := pool.idle[len(pool.idle)-1]
		pool.idle = pool.idle[:len(pool.idle)-1]
		pool.mu.Unlock()
		return d, nil
	}
	sweep := !owned && !pool.swept
	pool.swept = true
	pool.mu.Unlock()

	db, err := server()
	if err != nil {
		return nil, err
	}
	defer db.Close()
	if sweep {
		if err := sweepLeftBehind(ctx, db, time.Now()); err != nil {
			return nil, err
		}
	}
	d := &Database{Name: newName(label), owned: owned}
	// No IF NOT EXISTS: a database of that name that exists is not ours.
	if _, err := db.ExecContext(ctx, "CREATE DATABASE `"+d.Name+"` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"); err != nil {
		return nil, fmt.Errorf("persistencetest: create database %s: %w (is MariaDB running? `make test` starts servers of its own; scripts/testservices.sh)", d.Name, err)
	}
	s, err := persistence.Open(ctx, d.DSN())
	if err == nil {
		_, err = persistence.Migrate(ctx, s.DB)
		s.Close()
	}
	if err != nil {
		_, _ = db.ExecContext(ctx, "DROP DATABASE `"+d.Name+"`")
		return nil, fmt.Errorf("persistencetest: migrate %s: %w", d.Name, err)
	}
	return d, nil
}

// Release empties d and gives it back: on the run's own server it is
// truncated and pooled, on any other server dropped. Sessions still on d (a
// failed test's pinned connection holding an advisory lock or an open
// transaction, which would block the truncation and hold the lock for the
// next user) are killed first.
func (d *Database) Release(ctx context.Context) error {
	db, err := server()
	if err != nil {
		return err
	}
	defer db.Close()
	if err := killSessions(ctx, db, d.Name); err != nil {
		return err
	}
	if !d.owned {
		if _, err := db.ExecContext(ctx, "DROP DATABASE `"+d.Name+"`"); err != nil {
			return fmt.Errorf("persistencetest: drop %s: %w", d.Name, err)
		}
		return nil
	}
	if err := d.truncate(ctx); err != nil {
		return err
	}
	pool.mu.Lock()
	pool.idle = append(pool.idle, d)
	pool.mu.Unlock()
	return nil
}

// killSessions kills every session whose current database is name.
func killSessions(ctx context.Context, db *sql.DB, name string) error {
	rows, err := db.QueryContext(ctx, `SELECT id FROM information_schema.processlist WHERE db = ? AND id <> CONNECTION_ID()`, name)
	if err != nil {
		return fmt.Errorf("persistencetest: sessions on %s: %w", name, err)
	}
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return err
		}
		ids = append(ids, id)
	}
	err = rows.Err()
	rows.Close()
	if err != nil {
		return err
	}
	for _, id := range ids {
		// A session that ended meanwhile: "Unknown thread id", fine.
		_, _ = db.ExecContext(ctx, fmt.Sprintf("KILL %d", id))
	}
	return nil
}

// truncate empties every table of Tables in d.
func (d *Database) truncate(ctx context.Context) error {
	s, err := persistence.Open(ctx, d.DSN())
	if err != nil {
		return fmt.Errorf("persistencetest: open %s: %w", d.Name, err)
	}
	defer s.Close()
	conn, err := s.DB.Conn(ctx)
	if err != nil {
		return fmt.Errorf("persistencetest: open %s: %w", d.Name, err)
	}
	defer conn.Close()
	for _, tbl := range Tables {
		if _, err := conn.ExecContext(ctx, "TRUNCATE TABLE "+tbl); err != nil {
			return fmt.Errorf("persistencetest: truncate %s.%s: %w", d.Name, tbl, err)
		}
	}
	return nil
}

// sweepLeftBehind drops the databases of this package's naming created
// more than Lease before now.
func sweepLeftBehind(ctx context.Context, db *sql.DB, now time.Time) error {
	rows, err := db.QueryContext(ctx, `SELECT schema_name FROM information_schema.schemata WHERE schema_name LIKE 'stampede\_test\_%'`)
	if err != nil {
		return fmt.Errorf("persistencetest: list databases: %w", err)
	}
	var old []string
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			rows.Close()
			return err
		}
		if m := nameRE.FindStringSubmatch(name); m != nil {
			if at, err := time.Parse(nameTime, m[1]); err == nil && now.Sub(at) > Lease {
				old = append(old, name)
			}
		}
	}
	if err := rows.Err(); err != nil {
		rows.Close()
		return err
	}
	rows.Close()
	for _, name := range old {
		if _, err := db.ExecContext(ctx, "DROP DATABASE IF EXISTS `"+name+"`"); err != nil {
			return fmt.Errorf("persistencetest: drop %s, left behind: %w", name, err)
		}
	}
	return nil
}

var (
	testsMu sync.Mutex
	tests   = map[testing.TB]map[string]*Database{}
	stores  = map[*persistence.Store]string{}
)

// New returns a store on the test's database of label (calls with the same
// label in one test share a database), migrated and empty; the store is
// closed when the test ends, and the database emptied and given back
// (Release). Tests of any label may run in parallel. Name(store) or
// DSNFor(t, label) names the database, for a child process or a second pool.
func New(t testing.TB, label string) *persistence.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	d := database(t, label)
	if d == nil {
		var err error
		if d, err = Acquire(ctx, label); err != nil {
			t.Fatal(err)
		}
		testsMu.Lock()
		if tests[t] == nil {
			tests[t] = map[string]*Database{}
			t.Cleanup(func() { release(t) })
		}
		tests[t][label] = d
		testsMu.Unlock()
	} else if err := d.truncate(ctx); err != nil {
		t.Fatal(err)
	}
	s, err := persistence.Open(ctx, d.DSN())
	if err != nil {
		t.Fatalf("persistencetest: open %s: %v", d.Name, err)
	}
	testsMu.Lock()
	stores[s] = d.Name
	testsMu.Unlock()
	t.Cleanup(func() {
		s.Close()
		testsMu.Lock()
		delete(stores, s)
		testsMu.Unlock()
	})
	return s
}

// database is test t's database of label, or nil.
func database(t testing.TB, label string) *Database {
	testsMu.Lock()
	defer testsMu.Unlock()
	return tests[t][label]
}

// Name is the name of the database of a store New returned ("" for any
// other store).
func Name(s *persistence.Store) string {
	testsMu.Lock()
	defer testsMu.Unlock()
	return stores[s]
}

// NameFor is the name of test t's database of label (New(t, label) first).
func NameFor(t testing.TB, label string) string {
	t.Helper()
	d := database(t, label)
	if d == nil {
		t.Fatalf("persistencetest: test has no database %q: call New(t, %q) first", label, label)
	}
	return d.Name
}

// DSNFor is the DSN of test t's database of label (New(t, label) first).
func DSNFor(t testing.TB, label string) string {
	t.Helper()
	return DSN(NameFor(t, label))
}

// release gives back every database of test t.
func release(t testing.TB) {
	testsMu.Lock()
	dbs := tests[t]
	delete(tests, t)
	testsMu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, d := range dbs {
		if err := d.Release(ctx); err != nil {
			t.Error(err)
		}
	}
}

// Truncate empties every Stampede table of s.
func Truncate(t testing.TB, s *persistence.Store) {
	t.Helper()
	for _, tbl := range Tables {
		if _, err := s.DB.Exec("TRUNCATE TABLE " + tbl); err != nil {
			t.Fatalf("persistencetest: truncate %s: %v", tbl, err)
		}
	}
}
