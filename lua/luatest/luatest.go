// Package luatest gives tests a Redis client on a database number of their
// own, emptied before use. Use it only from _test.go files.
package luatest

import (
	"context"
	"net"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

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

// Private starts a Redis server of the test's own on a free loopback port
// (the redis-server binary, no persistence) and returns a client to it; the
// server is killed when the test ends. Tests that change server settings
// (CONFIG SET) use it, so packages running in parallel on the shared Redis
// never see the change.
func Private(t testing.TB) *redis.Client {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("luatest: no redis-server binary for a private Redis: %v (make services installs it)", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	cmd := exec.Command(bin, "--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--save", "", "--appendonly", "no",
		"--dir", t.TempDir(), "--daemonize", "no", "--maxmemory-policy", "noeviction")
	if err := cmd.Start(); err != nil {
		t.Fatalf("luatest: start redis-server: %v", err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + strconv.Itoa(port)})
	t.Cleanup(func() { c.Close() })
	deadline := time.Now().Add(10 * time.Second)
	for c.Ping(context.Background()).Err() != nil {
		if time.Now().After(deadline) {
			t.Fatalf("luatest: private redis-server on port %d did not answer", port)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return c
}
