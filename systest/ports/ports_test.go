package ports

import (
	"net"
	"strconv"
	"testing"
)

// The ports for servers tests start are never ones the kernel may give an
// outgoing connection meanwhile, and never the same twice.
func TestFreeBelowTheEphemeralRange(t *testing.T) {
	low := EphemeralLow()
	ps, err := Free(200)
	if err != nil {
		t.Fatal(err)
	}
	for range 50 {
		_, port, _ := net.SplitHostPort(Addr(t))
		p, _ := strconv.Atoi(port)
		ps = append(ps, p)
	}
	seen := map[int]bool{}
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
