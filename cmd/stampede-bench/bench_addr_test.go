package main

import (
	"net"
	"strings"
	"testing"
)

// The bench refuses an address something already listens on, instead of
// loading whatever answers there.
func TestAddrFreeRefusesATakenAddress(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if err := addrFree(addr); err == nil || !strings.Contains(err.Error(), "is taken") {
		t.Fatalf("taken %s: err %v", addr, err)
	}
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	if err := addrFree(addr); err != nil {
		t.Fatalf("freed %s: %v", addr, err)
	}
}
