// Package luatest gives tests a Redis client on a database number of their
// own, emptied before use. Use it only from _test.go files.
package luatest

import (
	"context"
	"os"
	"testing"

	"github.com/redis/go-redis/v9"
)

// Addr is the test Redis address, from STAMPEDE_TEST_REDIS_ADDR or 127.0.0.1:6379.
func Addr() string {
	if a := os.Getenv("STAMPEDE_TEST_REDIS_ADDR"); a != "" {
		return a
	}
	return "127.0.0.1:6379"
}

// Database numbers, one per test package, so packages can run in parallel.
const (
	DBLua         = 1
	DBGateway     = 2
	DBPipeline    = 3
	DBPush        = 4
	DBCmd         = 5
	DBBench       = 6
	DBPersistence = 7
	DBE2E         = 8
)

// New returns a client on database db, flushed, closed when the test ends.
func New(t testing.TB, db int) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: Addr(), DB: db})
	if err := c.FlushDB(context.Background()).Err(); err != nil {
		t.Fatalf("luatest: flush redis db %d at %s: %v (is Redis running? try `make services`)", db, Addr(), err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}
