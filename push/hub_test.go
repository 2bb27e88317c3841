package push

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/stampede-sh/stampede/auth"
	"github.com/stampede-sh/stampede/order"
)

const wait = 5 * time.Second

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	_, err := New(Config{SendBuffer: -1}, auth.NewVerifier(testSecret), newMemSnapshots(), "", nil)
	if err == nil || !strings.HasPrefix(err.Error(), "invalid config") {
		t.Fatalf("New with SendBuffer -1: %v", err)
	}
	if _, err := New(Config{}, nil, newMemSnapshots(), "", nil); err == nil {
		t.Fatal("New without verifier succeeded")
	}
}

// The token comes from the subprotocol only: a valid token in ?token= (it
// would end up in proxy logs) is refused with 4401 (issue 26).
func TestTokenOnlyFromSubprotocol(t *testing.T) {
	t.Parallel()
	h := startHub(t, Config{}, newMemSnapshots(), "", nil)
	viaProto := dial(t, h.url, token(t, 1), dialOpts{})
	if got := viaProto.ws.Subprotocol(); got != Subprotocol {
		t.Fatalf("subprotocol = %q, want %q", got, Subprotocol)
	}
	viaQuery := dial(t, h.url, token(t, 2), dialOpts{query: true})
	if code, reason := viaQuery.closeStatus(wait); code != StatusUnauthenticated {
		t.Fatalf("valid token in ?token=: close %d %q, want 4401", code, reason)
	}
	waitFor(t, wait, "one socket", func() bool { return h.Stats().Sockets == 1 })
}

func TestUnauthenticatedClosed4401(t *testing.T) {
	t.Parallel()
	h := startHub(t, Config{}, newMemSnapshots(), "", nil)
	expired, err := auth.Issue(testSecret, 1, false, -time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	foreign, _ := auth.Issue([]byte("another secret"), 1, false, time.Hour)
	cases := map[string]*client{
		"no token":       dial(t, h.url, "", dialOpts{protos: []string{Subprotocol}}),
		"garbage":        dial(t, h.url, "not-a-jwt", dialOpts{}),
		"expired":        dial(t, h.url, expired, dialOpts{}),
		"wrong secret":   dial(t, h.url, foreign, dialOpts{}),
		"garbage query":  dial(t, h.url, "x.y.z", dialOpts{query: true}),
		"no subprotocol": dial(t, h.url, "", dialOpts{protos: []string{}}),
	}
	for name, c := range cases {
		code, reason := c.closeStatus(wait)
		if code != StatusUnauthenticated {
			t.Errorf("%s: close code %d (%q), want %d", name, code, reason, StatusUnauthenticated)
		}
		select {
		case m := <-c.msgs:
			t.Errorf("%s: got message %+v before 4401", name, m)
		default:
		}
	}
	if s := h.Stats(); s.Unauthenticated != int64(len(cases)) || s.Sockets != 0 {
		t.Fatalf("stats %+v", s)
	}
}

// Events that arrive while the connect snapshot loads are held back and sent
// after it; those the snapshot made stale are dropped.
func TestSnapshotThenEventsOnConnect(t *testing.T) {
	t.Parallel()
	snap := newMemSnapshots()
	x, y := orderNo(), orderNo()
	dl := time.Now().Add(15 * time.Minute).UTC().Truncate(time.Millisecond)
	snap.put(Snapshot{OrderNo: x, UserID: 1, Status: order.WaitingPay, Version: 2, UpdatedAt: time.Now(), PayDeadline: &dl}, true)
	h := startHub(t, Config{}, snap, "", nil)

	snap.setGate(true)
	c := dial(t, h.url, token(t, 1), dialOpts{})
	select {
	case <-snap.entered:
	case <-time.After(wait):
		t.Fatal("snapshot load did not start")
	}
	h.dispatch(statusEvent(1, x, order.Processing, 1)) // older than the snapshot
	h.dispatch(statusEvent(1, x, order.Paid, 3))
	h.dispatch(statusEvent(1, y, order.WaitingPay, 2))
	h.dispatch(statusEvent(2, x, order.Cancelled, 9)) // another user's event never reaches user 1
	c.quiet(100 * time.Millisecond)
	close(snap.gate)

	want := []struct {
		no      string
		status  order.Status
		version int64
	}{{x, order.WaitingPay, 2}, {x, order.Paid, 3}, {y, order.WaitingPay, 2}}
	for i, w := range want {
		m := c.next(wait)
		if m.Type != "order" || m.OrderNo != w.no || m.Status != string(w.status) || m.Version != w.version {
			t.Fatalf("message %d = %+v, want %s %s v%d", i, m, w.no, w.status, w.version)
		}
		if i == 0 && (m.PayDeadline == nil || !m.PayDeadline.Equal(dl)) {
			t.Fatalf("snapshot payDeadline = %v, want %v", m.PayDeadline, dl)
		}
	}
	c.quiet(100 * time.Millisecond)
	if s := h.Stats(); s.Stale != 1 {
		t.Fatalf("stale = %d, want 1", s.Stale)
	}
}

// subscribe sends the order's snapshot before its held-back events, other
// orders' events flow meanwhile, and another user's order is not found.
func TestSnapshotThenEventsOnSubscribe(t *testing.T) {
	t.Parallel()
	snap := newMemSnapshots()
	z, w, foreign := orderNo(), orderNo(), orderNo()
	snap.put(Snapshot{OrderNo: w, UserID: 1, Status: order.Processing, Version: 1, UpdatedAt: time.Now()}, true)
	snap.put(Snapshot{OrderNo: z, UserID: 1, Status: order.WaitingPay, Version: 3, UpdatedAt: time.Now()}, false)
	snap.put(Snapshot{OrderNo: foreign, UserID: 2, Status: order.Paid, Version: 5, UpdatedAt: time.Now()}, true)
	h := startHub(t, Config{}, snap, "", nil)
	c := dial(t, h.url, token(t, 1), dialOpts{})
	if m := c.next(wait); m.OrderNo != w || m.Version != 1 {
		t.Fatalf("connect snapshot = %+v", m)
	}
	c.quiet(50 * time.Millisecond)

	snap.setGate(true)
	c.send(clientMessage{Type: "subscribe", OrderNo: z})
	select {
	case what := <-snap.entered:
		if what != "order:"+z {
			t.Fatalf("load %q", what)
		}
	case <-time.After(wait):
		t.Fatal("subscribe did not load a snapshot")
	}
	h.dispatch(statusEvent(1, z, order.Paid, 4))
	h.dispatch(statusEvent(1, w, order.WaitingPay, 2))
	if m := c.next(wait); m.OrderNo != w || m.Version != 2 {
		t.Fatalf("event of an order not being loaded = %+v, want %s v2", m, w)
	}
	c.quiet(100 * time.Millisecond)
	close(snap.gate)
	if m := c.next(wait); m.OrderNo != z || m.Version != 3 || m.Status != string(order.WaitingPay) {
		t.Fatalf("after subscribe got %+v, want snapshot %s v3", m, z)
	}
	if m := c.next(wait); m.OrderNo != z || m.Version != 4 || m.Status != string(order.Paid) {
		t.Fatalf("after snapshot got %+v, want event %s v4", m, z)
	}
	snap.setGate(false)

	// Someone else's order: the same answer as a missing one, never its state.
	c.send(clientMessage{Type: "subscribe", OrderNo: foreign})
	if m := c.next(wait); m.Type != "error" || m.Code != codeNotFound || m.OrderNo != foreign {
		t.Fatalf("subscribe to another user's order: %+v", m)
	}
	c.send(clientMessage{Type: "subscribe", OrderNo: "42"})
	if m := c.next(wait); m.Type != "error" || m.Code != codeBadMessage {
		t.Fatalf("subscribe to a malformed orderNo: %+v", m)
	}
	// Not JSON, and JSON of the wrong shape: BAD_MESSAGE, each saying which.
	c.send(json.RawMessage(`"x"`)) // valid JSON, not an object
	if m := c.next(wait); m.Code != codeBadMessage || !strings.Contains(m.Message, `"productId":integer`) {
		t.Fatalf("a JSON string: %+v", m)
	}
	c.send(json.RawMessage(`{"type":"queue","productId":"x"}`))
	if m := c.next(wait); m.Code != codeBadMessage || !strings.Contains(m.Message, `"productId":integer`) {
		t.Fatalf("a productId that is not a number: %+v", m)
	}
	if err := c.ws.Write(context.Background(), websocket.MessageText, []byte("{nope")); err != nil {
		t.Fatal(err)
	}
	if m := c.next(wait); m.Code != codeBadMessage || m.Message != "expected a JSON text message" {
		t.Fatalf("not JSON: %+v", m)
	}
	c.send(clientMessage{Type: "ping"})
	if m := c.next(wait); m.Type != "pong" {
		t.Fatalf("ping: %+v", m)
	}
	// A re-subscribe to an order already at v4 sends nothing older.
	c.send(clientMessage{Type: "subscribe", OrderNo: z})
	c.quiet(100 * time.Millisecond)
}

// Whatever order events and snapshots race in, a socket only ever sees
// increasing versions of an order and ends at the newest.
func TestVersionMonotonic(t *testing.T) {
	t.Parallel()
	snap := newMemSnapshots()
	no := orderNo()
	const top = 60
	snap.put(Snapshot{OrderNo: no, UserID: 1, Status: order.WaitingPay, Version: 10, UpdatedAt: time.Now()}, true)
	h := startHub(t, Config{SendBuffer: 512}, snap, "", nil)
	c := dial(t, h.url, token(t, 1), dialOpts{})
	if m := c.next(wait); m.Version != 10 {
		t.Fatalf("connect snapshot %+v", m)
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 1))
			for _, v := range r.Perm(top) {
				h.dispatch(statusEvent(1, no, order.WaitingPay, int64(v+1)))
			}
		}()
	}
	wg.Add(1)
	go func() { // snapshots of random age, through subscribe
		defer wg.Done()
		for i := range 15 { // within the subscribe burst
			snap.put(Snapshot{OrderNo: no, UserID: 1, Status: order.WaitingPay, Version: int64(5 + i*2), UpdatedAt: time.Now()}, true)
			c.send(clientMessage{Type: "subscribe", OrderNo: no})
		}
	}()
	wg.Wait()
	last := int64(10)
	for {
		select {
		case m := <-c.msgs:
			if m.Type != "order" {
				t.Fatalf("unexpected %+v", m)
			}
			if m.Version <= last {
				t.Fatalf("version went from %d to %d", last, m.Version)
			}
			last = m.Version
			continue
		case <-time.After(300 * time.Millisecond):
		}
		break
	}
	if last != top {
		t.Fatalf("last version %d, want %d", last, top)
	}
	if h.Stats().Stale == 0 {
		t.Fatal("no stale message counted")
	}
}

// Subscribes beyond the per-socket budget are refused, not loaded.
func TestSubscribeRateLimited(t *testing.T) {
	t.Parallel()
	snap := newMemSnapshots()
	no := orderNo()
	snap.put(Snapshot{OrderNo: no, UserID: 1, Status: order.WaitingPay, Version: 1, UpdatedAt: time.Now()}, false)
	h := startHub(t, Config{}, snap, "", nil)
	c := dial(t, h.url, token(t, 1), dialOpts{})
	waitFor(t, wait, "socket", func() bool { return h.Stats().Sockets == 1 })
	const n = 40
	for range n {
		c.send(clientMessage{Type: "subscribe", OrderNo: no})
	}
	limited := 0
	for done := false; !done; {
		select {
		case m := <-c.msgs:
			if m.Type == "error" && m.Code == codeRateLimited {
				limited++
			}
		case <-time.After(200 * time.Millisecond):
			done = true
		}
	}
	loads := snap.calls.Load() - 1 // minus the connect snapshot
	if limited == 0 || loads+int64(limited) != n || loads > subscribeBurst+5 {
		t.Fatalf("%d loads, %d refused of %d subscribes", loads, limited, n)
	}
}

// smallBuffers shrinks the kernel send buffer of accepted sockets so a client
// that does not read fills the hub's buffer after a few messages.
type smallBuffers struct{ net.Listener }

func (l smallBuffers) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetWriteBuffer(1024)
	}
	return c, err
}

// A client that never reads is disconnected; a fast client of the same user
// keeps getting every event and dispatch never blocks.
func TestSlowConsumerEvicted(t *testing.T) {
	t.Parallel()
	h := startHub(t, Config{SendBuffer: 8, WriteTimeout: 500 * time.Millisecond}, newMemSnapshots(), "",
		func(l net.Listener) net.Listener { return smallBuffers{l} })
	tr := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if tc, ok := c.(*net.TCPConn); ok {
			tc.SetReadBuffer(1024)
		}
		return c, err
	}}
	defer tr.CloseIdleConnections()
	slow := dial(t, h.url, token(t, 1), dialOpts{noRead: true, http: &http.Client{Transport: tr}})
	fast := dial(t, h.url, token(t, 1), dialOpts{})
	other := dial(t, h.url, token(t, 2), dialOpts{})
	waitFor(t, wait, "three sockets", func() bool { return h.Stats().Sockets == 3 })

	no := orderNo()
	var v int64
	var slowest time.Duration
	next := func() {
		v++
		start := time.Now()
		h.dispatch(statusEvent(1, no, order.WaitingPay, v))
		slowest = max(slowest, time.Since(start))
	}
	var got int64
	round := func() { // 4 events, then the fast client reads them: in order, without gaps
		t.Helper()
		for range 4 {
			next()
		}
		for got < v {
			m := fast.next(wait)
			if m.Version != got+1 {
				t.Fatalf("fast client got v%d after v%d", m.Version, got)
			}
			got = m.Version
		}
	}
	deadline := time.Now().Add(20 * time.Second)
	for h.Stats().Evicted == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("slow client not evicted after %d events", v)
		}
		round()
	}
	evictedAt := v
	for range 25 {
		round()
	}
	if slowest > 50*time.Millisecond {
		t.Fatalf("a dispatch took %v", slowest)
	}
	waitFor(t, wait, "slow socket gone", func() bool { return h.Stats().Sockets == 2 })

	// The slow client, once it reads, finds the messages that fitted in its
	// buffers and then the end of the socket.
	slow.startReading()
	n := 0
	for done := false; !done; {
		select {
		case <-slow.msgs:
			n++
		case <-slow.closed:
			n += len(slow.msgs)
			done = true
		case <-time.After(wait):
			t.Fatal("slow socket still open")
		}
	}
	code, reason := slow.closeStatus(wait)
	if code != websocket.StatusPolicyViolation && code != -1 {
		t.Fatalf("slow client closed with %d %q", code, reason)
	}
	t.Logf("slow client evicted after %d events, had received %d, close %d %q; slowest dispatch %v", evictedAt, n, code, reason, slowest)
	if int64(n) >= evictedAt {
		t.Fatalf("slow client received %d of %d events", n, evictedAt)
	}
	other.quiet(50 * time.Millisecond) // user 2 saw none of it
}

// A socket that does not answer pings is closed; one that does stays.
func TestHeartbeat(t *testing.T) {
	t.Parallel()
	h := startHub(t, Config{PingInterval: 30 * time.Millisecond, WriteTimeout: 500 * time.Millisecond}, newMemSnapshots(), "", nil)
	alive := dial(t, h.url, token(t, 1), dialOpts{})
	dial(t, h.url, token(t, 1), dialOpts{noRead: true}) // never reads, so never answers a ping
	waitFor(t, wait, "two sockets", func() bool { return h.Stats().Sockets == 2 })
	waitFor(t, wait, "dead socket closed", func() bool { return h.Stats().Sockets == 1 })
	time.Sleep(200 * time.Millisecond)
	select {
	case <-alive.closed:
		t.Fatalf("answering socket closed: %v", alive.err)
	default:
	}
	if h.Stats().Sockets != 1 {
		t.Fatalf("answering socket dropped: %+v", h.Stats())
	}
}

// A socket that is sent messages gets no pings; an idle one does.
func TestPingOnlyIdleSockets(t *testing.T) {
	t.Parallel()
	const interval = 100 * time.Millisecond
	h := startHub(t, Config{PingInterval: interval, WriteTimeout: time.Second}, newMemSnapshots(), "", nil)
	var pings [2]atomic.Int64
	for i := range pings {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		ws, _, err := websocket.Dial(ctx, h.url, &websocket.DialOptions{
			Subprotocols:   []string{Subprotocol, token(t, int64(1+i))},
			OnPingReceived: func(context.Context, []byte) bool { pings[i].Add(1); return true },
		})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ws.CloseNow() })
		go func() { // reading answers the pings
			for {
				if _, _, err := ws.Read(context.Background()); err != nil {
					return
				}
			}
		}()
	}
	waitFor(t, wait, "two sockets", func() bool { return h.Stats().Sockets == 2 })
	no := orderNo()
	gaps := 0 // pauses between two messages long enough for a due ping (a busy machine)
	last := time.Now()
	for v := int64(1); v <= 80; v++ { // user 1: a message every 10 ms
		h.dispatch(statusEvent(1, no, order.WaitingPay, v))
		if now := time.Now(); now.Sub(last) > interval/2 {
			gaps++
		}
		last = time.Now()
		time.Sleep(10 * time.Millisecond)
	}
	busy, idle := pings[0].Load(), pings[1].Load()
	t.Logf("pings: busy socket %d, idle socket %d; %d long pauses between messages", busy, idle, gaps)
	if idle < 3 {
		t.Fatalf("idle socket got %d pings in 80 × 10 ms at a %v interval", idle, interval)
	}
	if busy > int64(1+gaps) { // the first may come before the messages began
		t.Fatalf("busy socket got %d pings (%d long pauses)", busy, gaps)
	}
}

// Product messages go to everyone, at most one per ProductThrottle per
// product, and the last value always arrives.
func TestProductThrottle(t *testing.T) {
	t.Parallel()
	const throttle = 100 * time.Millisecond
	h := startHub(t, Config{ProductThrottle: throttle}, newMemSnapshots(), "", nil)
	c1 := dial(t, h.url, token(t, 1), dialOpts{})
	c2 := dial(t, h.url, token(t, 2), dialOpts{})
	waitFor(t, wait, "two sockets", func() bool { return h.Stats().Sockets == 2 })

	start := time.Now()
	for i := range 50 {
		h.PublishProduct(7, int64(100-i), false)
		h.PublishProduct(8, 500, false) // same value: sent once
		time.Sleep(5 * time.Millisecond)
	}
	h.PublishProduct(7, 0, true)
	elapsed := time.Since(start)
	for _, c := range []*client{c1, c2} {
		var seven []msg
		eight := 0
		for done := false; !done; {
			select {
			case m := <-c.msgs:
				if m.Type != "product" {
					t.Fatalf("unexpected %+v", m)
				}
				if m.ProductID == 8 {
					eight++
				} else {
					seven = append(seven, m)
				}
			case <-time.After(3 * throttle):
				done = true
			}
		}
		maxMsgs := int(elapsed/throttle) + 2
		if len(seven) > maxMsgs || len(seven) < 2 {
			t.Fatalf("%d messages for product 7 in %v, want 2..%d", len(seven), elapsed, maxMsgs)
		}
		if last := seven[len(seven)-1]; last.Available != 0 || !last.SoldOut {
			t.Fatalf("last product message %+v, want available 0 sold out", last)
		}
		if eight != 1 {
			t.Fatalf("%d messages for product 8, want 1", eight)
		}
	}
	h.PublishProduct(7, 0, true) // unchanged
	c1.quiet(2 * throttle)
}

func TestShutdownClosesWithGoingAway(t *testing.T) {
	t.Parallel()
	h := startHub(t, Config{}, newMemSnapshots(), "", nil)
	c := dial(t, h.url, token(t, 1), dialOpts{})
	waitFor(t, wait, "socket", func() bool { return h.Stats().Sockets == 1 })
	h.stop()
	code, reason := c.closeStatus(wait)
	if code != websocket.StatusGoingAway || reason != "server shutting down" {
		t.Fatalf("close %d %q, want 1001 server shutting down", code, reason)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if ws, _, err := websocket.Dial(ctx, h.url, nil); err == nil {
		ws.CloseNow()
		t.Fatal("dial after shutdown succeeded")
	}
}

// With AllowedOrigins set, other origins are refused at the handshake.
func TestAllowedOrigins(t *testing.T) {
	t.Parallel()
	h := startHub(t, Config{AllowedOrigins: []string{"shop.example:8080"}}, newMemSnapshots(), "", nil)
	dialOrigin := func(origin string) error {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		ws, _, err := websocket.Dial(ctx, h.url, &websocket.DialOptions{
			Subprotocols: []string{Subprotocol, token(t, 1)},
			HTTPHeader:   http.Header{"Origin": {origin}},
		})
		if err == nil {
			ws.Close(websocket.StatusNormalClosure, "")
		}
		return err
	}
	if err := dialOrigin("http://shop.example:8080"); err != nil {
		t.Fatalf("allowed origin refused: %v", err)
	}
	if err := dialOrigin("http://evil.example"); err == nil || !strings.Contains(err.Error(), "403") {
		t.Fatalf("foreign origin: %v, want a 403", err)
	}
}
