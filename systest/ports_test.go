package systest

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

// Ports for the processes a test starts. A port from Listen("127.0.0.1:0")
// is one of the kernel's ephemeral ports, so between the probe's Close and
// the child's bind any outgoing connection on the machine (to MySQL, Redis,
// RabbitMQ, …) may be given it as its local port, and the child then exits
// with "bind: address already in use" (seen: a relay's metrics listener in
// TestScaleManyInstances). The ports here come from below the ephemeral
// range (net.ipv4.ip_local_port_range), which the kernel never hands to a
// connection; each was free when probed, and none is handed out twice in
// one test binary. Other packages' tests use port 0, so only this package
// takes ports from the window.

// portsGiven holds the window and the ports handed out.
var portsGiven struct {
	sync.Mutex
	lo, hi int // [lo, hi)
	given  map[int]bool
}

// freeAddr is a loopback address whose port nothing listened on (freePorts).
func freeAddr(t testing.TB) string {
	t.Helper()
	ps, err := freePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(ps[0]))
}

// freePorts returns n distinct loopback ports below the ephemeral range
// that nothing listened on when probed and that this binary never handed
// out before.
func freePorts(n int) ([]int, error) {
	portsGiven.Lock()
	defer portsGiven.Unlock()
	if portsGiven.given == nil {
		portsGiven.given = map[int]bool{}
		portsGiven.lo, portsGiven.hi = portWindow()
	}
	out := make([]int, 0, n)
	for tries := 0; len(out) < n; tries++ {
		if tries >= 1000*n {
			return nil, errors.New("no free loopback port below the ephemeral range")
		}
		p := portsGiven.lo + rand.IntN(portsGiven.hi-portsGiven.lo)
		if portsGiven.given[p] {
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			continue
		}
		l.Close()
		portsGiven.given[p] = true
		out = append(out, p)
	}
	return out, nil
}

// portWindow is the 10,000 ports below the ephemeral range's first (the
// kernel's default 32768 if it cannot be read), never below 1024.
func portWindow() (lo, hi int) {
	hi = ephemeralLow()
	return max(hi-10_000, 1024), hi
}

// ephemeralLow is the first port of net.ipv4.ip_local_port_range.
func ephemeralLow() int {
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if v, err := strconv.Atoi(f[0]); err == nil && v > 1024 {
				return v
			}
		}
	}
	return 32768
}

// TestFreePortsBelowTheEphemeralRange: the ports for child processes are
// never ones the kernel may give an outgoing connection meanwhile, and
// never the same twice.
func TestFreePortsBelowTheEphemeralRange(t *testing.T) {
	low := ephemeralLow()
	seen := map[int]bool{}
	ps, err := freePorts(200)
	if err != nil {
		t.Fatal(err)
	}
	for range 50 {
		_, port, _ := net.SplitHostPort(freeAddr(t))
		p, _ := strconv.Atoi(port)
		ps = append(ps, p)
	}
	for _, p := range ps {
		if p >= low || p < 1024 {
			t.Fatalf("port %d: want one in [1024, %d), below the ephemeral range", p, low)
		}
		if seen[p] {
			t.Fatalf("port %d handed out twice", p)
		}
		seen[p] = true
	}
}
