// Package persistencetest gives tests their own migrated MySQL database.
// Use it only from _test.go files.
package persistencetest

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

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

// New returns a store on database "stampede_test_<name>", created and
// migrated if needed and emptied; it is closed when the test ends. Tests that
// share a name must not run in parallel.
func New(t testing.TB, name string) *persistence.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	db := "stampede_test_" + name
	s, err := persistence.Open(ctx, DSN(db))
	if err != nil {
		t.Fatalf("persistencetest: open %s: %v (is MariaDB running? try `make services`)", db, err)
	}
	t.Cleanup(func() { s.Close() })
	if _, err := persistence.Migrate(ctx, s.DB); err != nil {
		t.Fatalf("persistencetest: migrate %s: %v", db, err)
	}
	Truncate(t, s)
	return s
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
