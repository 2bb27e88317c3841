package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/valyala/fasthttp/fasthttputil"

	"github.com/stampede-sh/stampede/lua"
	"github.com/stampede-sh/stampede/order"
)

// nodeOf is the node id written into orderNo (bits 12…21 of its id).
func nodeOf(t testing.TB, no string) int64 {
	t.Helper()
	id, _, _, err := order.ParseNo(no)
	if err != nil {
		t.Fatal(err)
	}
	return id >> 12 & 1023
}

// waitNode waits until srv holds a valid node lease and returns its id.
func waitNode(t testing.TB, srv *Server) int64 {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !srv.nodeValid(time.Now()) {
		if time.Now().After(deadline) {
			t.Fatal("no node lease after 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	return srv.lease.Load().Node()
}

// Two gateways started without a node id lease different ones, write them
// into their orderNos, and give them back when they stop.
func TestNodeLeaseGatewaysNeverShareANode(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.NodeID = -1 })
	srv2, err := New(func() Config { c := baseConfig(); c.NodeID = -1; return c }(), e.rdb, e.store, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv2.Serve(ctx, fasthttputil.NewInmemoryListener()) }()

	n1, n2 := waitNode(t, e.srv), waitNode(t, srv2)
	if n1 == n2 {
		t.Fatalf("both gateways leased node %d", n1)
	}
	for _, n := range []int64{n1, n2} {
		if owner, err := e.rdb.Get(context.Background(), lua.NodeKey(n)).Result(); err != nil || owner == "" {
			t.Fatalf("node %d: key %q = %q, %v", n, lua.NodeKey(n), owner, err)
		}
	}
	pid := e.product(openSale(10))
	if got := nodeOf(t, e.accepted(1, pid, 1, "lease-1")); got != n1 {
		t.Errorf("orderNo of gateway 1 carries node %d, want %d", got, n1)
	}
	if no := srv2.gen.Next(pid, 0); nodeOf(t, no) != n2 {
		t.Errorf("orderNo of gateway 2 carries node %d, want %d", nodeOf(t, no), n2)
	}

	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n, _ := e.rdb.Exists(context.Background(), lua.NodeKey(n2)).Result(); n != 0 {
		t.Errorf("node %d still leased after its gateway stopped", n2)
	}
	if n, _ := e.rdb.Exists(context.Background(), lua.NodeKey(n1)).Result(); n != 1 {
		t.Errorf("node %d of the running gateway lost its lease", n1)
	}
}

// A lease whose id was taken while it was not renewed moves to a free id and
// switches the generator before it is trusted again.
func TestNodeLeaseRenewAfterTakeover(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	l, err := LeaseNode(ctx, e.rdb, "gw-a", 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	old := l.Node()
	if !l.Valid(time.Now()) || l.Valid(time.Now().Add(3*time.Second)) {
		t.Fatal("a new lease must be trusted now and not past its TTL")
	}
	if changed, err := l.Renew(ctx, nil); err != nil || changed {
		t.Fatalf("renew of a held lease: changed %v, %v", changed, err)
	}
	ttl, _ := e.rdb.PTTL(ctx, lua.NodeKey(old)).Result()
	if ttl <= 0 || ttl > 3*time.Second {
		t.Fatalf("renewed lease TTL %v", ttl)
	}

	// The key expired and another gateway took the id.
	e.rdb.Set(ctx, lua.NodeKey(old), "gw-b", time.Minute)
	var switched int64 = -1
	changed, err := l.Renew(ctx, func(n int64) {
		if l.Valid(time.Now()) {
			t.Error("lease trusted before the generator switched")
		}
		switched = n
	})
	if err != nil || !changed {
		t.Fatalf("renew after takeover: changed %v, %v", changed, err)
	}
	if l.Node() == old || switched != l.Node() {
		t.Fatalf("new node %d (switched to %d), old %d", l.Node(), switched, old)
	}
	if owner := e.rdb.Get(ctx, lua.NodeKey(old)).Val(); owner != "gw-b" {
		t.Errorf("the other gateway's lease was touched: %q", owner)
	}
	if owner := e.rdb.Get(ctx, lua.NodeKey(l.Node())).Val(); owner != "gw-a" {
		t.Errorf("new lease key holds %q", owner)
	}
	if !l.Valid(time.Now()) {
		t.Error("new lease not trusted")
	}

	// Release deletes only our own key.
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if n := e.rdb.Exists(ctx, lua.NodeKey(l.Node()), lua.NodeKey(old)).Val(); n != 1 {
		t.Errorf("after release %d of the two keys exist, want only gw-b's", n)
	}
}

// With every node id taken a gateway takes no orders (503, nothing reserved)
// and is not ready; once an id frees up it leases it and sells.
func TestNodeLeaseNoFreeNode(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	pipe := e.rdb.Pipeline()
	for id := range int64(1024) {
		pipe.Set(ctx, lua.NodeKey(id), fmt.Sprint("other-", id), time.Minute)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := LeaseNode(ctx, e.rdb, "", 3*time.Second); !errors.Is(err, ErrNoFreeNode) {
		t.Fatalf("LeaseNode with every id taken: %v", err)
	}
	pid := e.product(openSale(5))

	cfg := baseConfig()
	cfg.NodeID = -1
	srv, err := New(cfg, e.rdb, e.store, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	hc, _ := serveInMemory(t, srv)
	r := doHTTP(t, hc, "POST", "/api/orders", token(t, 1), orderReq{pid, 1, "no-node"})
	r.wantError(t, 503, CodeUnavailable)
	if r := doHTTP(t, hc, "GET", "/readyz", "", nil); r.status != 503 {
		t.Errorf("readyz without a node lease: %s", r)
	}
	if got := e.available(pid, 0); got != 5 {
		t.Errorf("available %d after a refused order, want 5", got)
	}

	e.rdb.Del(ctx, lua.NodeKey(517))
	if got := waitNode(t, srv); got != 517 {
		t.Fatalf("leased node %d, want the freed 517", got)
	}
	r = doHTTP(t, hc, "POST", "/api/orders", token(t, 1), orderReq{pid, 1, "no-node"})
	if r.status != 202 {
		t.Fatalf("order after the lease: %s", r)
	}
	if got := nodeOf(t, r.json(t)["orderNo"].(string)); got != 517 {
		t.Errorf("orderNo carries node %d, want 517", got)
	}
}

// A request in flight when the shutdown starts is still answered with an
// order: the node lease (and the reserve batcher) outlive the drain of
// requests in flight; they stop when Serve returns.
func TestNodeLeaseOutlivesShutdownDrain(t *testing.T) {
	for _, batch := range []int{0, 8} {
		t.Run(fmt.Sprintf("reservePipeline=%d", batch), func(t *testing.T) {
			e := newEnv(t)
			pid := e.product(openSale(5))
			cfg := baseConfig()
			cfg.NodeID, cfg.ReservePipeline = -1, batch
			srv, err := New(cfg, e.rdb, e.store, testLogger(t))
			if err != nil {
				t.Fatal(err)
			}
			ln := fasthttputil.NewInmemoryListener()
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- srv.Serve(ctx, ln) }()
			node := waitNode(t, srv)

			conn, err := ln.Dial()
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			body := fmt.Sprintf(`{"productId":%d,"quantity":1,"requestId":"in-flight"}`, pid)
			head := fmt.Sprintf("POST /api/orders HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n",
				token(t, 1), len(body))
			if _, err := conn.Write([]byte(head + body[:10])); err != nil {
				t.Fatal(err)
			}
			time.Sleep(100 * time.Millisecond) // the server is reading the request
			cancel()                           // SIGTERM: the drain starts
			time.Sleep(300 * time.Millisecond)
			if _, err := conn.Write([]byte(body[10:])); err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 202 {
				t.Fatalf("order in flight at shutdown: %d %s", resp.StatusCode, b)
			}
			var got struct{ OrderNo string }
			if err := json.Unmarshal(b, &got); err != nil || nodeOf(t, got.OrderNo) != node {
				t.Errorf("orderNo %q (%v), want node %d", got.OrderNo, err, node)
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if n := e.rdb.Exists(context.Background(), lua.NodeKey(node)).Val(); n != 0 {
				t.Errorf("node %d still leased after Serve returned", node)
			}
		})
	}
}
