// Package ports hands out loopback ports for the servers tests start in
// other processes, or bind only after some setup (a migration, a dial).
//
// A port from Listen("127.0.0.1:0") is one of the kernel's ephemeral ports:
// between the probe's Close and the server's bind, any outgoing connection
// on the machine (to MySQL, Redis, RabbitMQ, …) may be given it as its local
// port, and the server then fails with "bind: address already in use" (seen
// in CI: a relay child's metrics listener in systest's
// TestScaleManyInstances). The ports here come from the 10,000 below the
// ephemeral range (net.ipv4.ip_local_port_range), which the kernel never
// hands to a connection; each was free when probed, and none is handed out
// twice in one test binary. Two test binaries running at once draw from the
// same window at random: they would collide only by drawing the same port
// within the moment between its probe and its bind.
package ports

import (
	"errors"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// given holds the window and the ports handed out.
var given struct {
	sync.Mutex
	lo, hi int // [lo, hi)
	ports  map[int]bool
}

// Addr is a loopback address "127.0.0.1:port" whose port nothing listened
// on (Free); it fails t if there is none.
func Addr(t testing.TB) string {
	t.Helper()
	ps, err := Free(1)
	if err != nil {
		t.Fatal(err)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(ps[0]))
}

// Free returns n distinct loopback ports below the ephemeral range that
// nothing listened on when probed and that this binary never handed out
// before; an error after 1,000 draws a port without finding them.
func Free(n int) ([]int, error) {
	given.Lock()
	defer given.Unlock()
	if given.ports == nil {
		given.ports = map[int]bool{}
		given.lo, given.hi = Window()
	}
	out := make([]int, 0, n)
	for tries := 0; len(out) < n; tries++ {
		if tries >= 1000*n {
			return nil, errors.New("ports: no free loopback port below the ephemeral range")
		}
		p := given.lo + rand.IntN(given.hi-given.lo)
		if given.ports[p] {
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			continue
		}
		l.Close()
		given.ports[p] = true
		out = append(out, p)
	}
	return out, nil
}

// Window is [lo, hi): the 10,000 ports below the ephemeral range's first
// (EphemeralLow), never below 1024.
func Window() (lo, hi int) {
	hi = EphemeralLow()
	return max(hi-10_000, 1024), hi
}

// EphemeralLow is the first port of net.ipv4.ip_local_port_range, or the
// kernel's default 32768 where it cannot be read.
func EphemeralLow() int {
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if v, err := strconv.Atoi(f[0]); err == nil && v > 1024 {
				return v
			}
		}
	}
	return 32768
}
