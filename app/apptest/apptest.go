// Package apptest helps the tests of the binaries built on package app
// (app's own, cmd/stampede-bench's): their TestMain, and the settings that
// point a command at the test's own MySQL database, Redis database and
// RabbitMQ vhost. Only _test.go files import it.
package apptest

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/stampede-sh/stampede/lua/luatest"
	"github.com/stampede-sh/stampede/persistence/persistencetest"
	"github.com/stampede-sh/stampede/pipeline/pipelinetest"
	"github.com/stampede-sh/stampede/systest/ports"
)

// Main is the TestMain of such a package: every test runs in development
// mode (the demo login and checkout, the built-in keys) unless it asks for
// production itself, and no goroutine outlives the tests.
func Main(m *testing.M) {
	os.Setenv("STAMPEDE_MODE", "development")
	goleak.VerifyTestMain(m,
		// fasthttp's process-wide Date refresher, and a stopped server's
		// worker-pool cleaner that notices the stop only after its 10 s sleep.
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*workerPool).Start.func2"),
		// The bench's HostClients (TestBenchQuick): a client's idle-connection
		// cleaner sleeps up to MaxIdleConnDuration (1 s) before it sees its
		// connections closed, longer than goleak's retries wait (as in
		// bench/main_test.go).
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*HostClient).connsCleaner"),
		// The demo's HTTP client keeps idle keep-alive connections.
		goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
	)
}

// ServiceArgs points a command at the test's own MySQL database (created,
// migrated and empty), Redis database and RabbitMQ vhost, and free
// loopback ports for its gateway and push listeners.
func ServiceArgs(t *testing.T) []string {
	t.Helper()
	persistencetest.New(t, "cmd") // created, migrated and emptied
	rdb := luatest.New(t, luatest.DBCmd)
	return []string{
		"--mysql-dsn", persistencetest.DSNFor(t, "cmd") + "?parseTime=true",
		"--redis-addr", luatest.Addr(), "--redis-db", fmt.Sprint(rdb.Options().DB),
		"--amqp-url", pipelinetest.Vhost(t, "cmd"),
		"--http-addr", ports.Addr(t),
		"--push-addr", ports.Addr(t),
	}
}
