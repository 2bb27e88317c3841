package systest

import (
	"testing"

	"github.com/stampede-sh/stampede/systest/ports"
)

// freeAddr is a loopback address for a server a test starts (ports.Addr:
// below the ephemeral range, so no outgoing connection takes it first).
func freeAddr(t testing.TB) string {
	t.Helper()
	return ports.Addr(t)
}

// freePorts is n distinct ports for servers a test starts (ports.Free).
func freePorts(n int) ([]int, error) { return ports.Free(n) }
