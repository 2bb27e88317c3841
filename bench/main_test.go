package bench

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// A HostClient's idle-connection cleaner sleeps up to
		// MaxIdleConnDuration (1 s) before it sees its connections closed.
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*HostClient).connsCleaner"),
		// The test server's worker-pool cleaner (it ends up to 10 s after
		// Shutdown) and fasthttp's process-wide Date header updater.
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*workerPool).Start.func2"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"),
	)
}
