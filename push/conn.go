package push

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/stampede-sh/stampede/auth"
	"github.com/stampede-sh/stampede/order"
)

// conn is one open socket of an authenticated user. Messages go through
// queue, a bounded buffer drained by a writer goroutine that runs only while
// there is something to send (writer.go); whoever fills it up evicts the
// socket instead of waiting. Order messages pass the version check under mu
// in the same step as they are queued, so the queue holds every order's
// versions in increasing order. Maps and the queue are made on first use:
// most sockets of a waiting room never get an order message.
type conn struct {
	hub    *Hub
	ws     *websocket.Conn
	nc     net.Conn // the hijacked connection, if the hub's own server accepted it
	userID int64
	claims auth.Claims // of the token it was opened with (watchKeys)
	seq    uint64      // registration order in the hub (the oldest socket has the lowest)

	mu          sync.Mutex
	closed      bool
	closeCode   websocket.StatusCode
	closeReason string
	queue       [][]byte         // messages to send, oldest first, at most Config.SendBuffer
	writing     bool             // a writer goroutine runs (writer.go)
	pingDue     bool             // pingTimer fired: the writer sends a ping
	pingTimer   *time.Timer      // fires PingInterval after the last ping's answer (writer.go)
	expire      *time.Timer      // fires at the token's exp (expireAt)
	lastSent    atomic.Int64     // Unix ns of the last message written, for pingTimer
	writers     sync.WaitGroup   // the writer goroutine, for the reader to wait on
	versions    map[string]int64 // orderNo → highest version queued
	holdAll     int              // > 0: a load of the recent orders is in flight
	holdOrders  map[string]int   // orderNo → loads of that order in flight
	pending     []outgoing       // order messages held back by a load
	subs        []string         // subscribed orderNos, oldest first, at most MaxSubscriptions
	loads       []*load          // loads in flight (loadContext), cancelled by kill

	// Token bucket of snapshot loads asked for by subscribe; used by the
	// reader goroutine only.
	loadTokens float64
	loadAt     time.Time
}

// Subscribe limits per socket: a burst of subscribeBurst, then
// subscribeRate per second; each subscribe costs a database read.
const (
	subscribeBurst = 20
	subscribeRate  = 10
)

// allowLoad takes a token for one subscribe snapshot load.
func (c *conn) allowLoad(now time.Time) bool {
	if c.loadAt.IsZero() {
		c.loadTokens = subscribeBurst
	} else {
		c.loadTokens = min(subscribeBurst, c.loadTokens+now.Sub(c.loadAt).Seconds()*subscribeRate)
	}
	c.loadAt = now
	if c.loadTokens < 1 {
		return false
	}
	c.loadTokens--
	return true
}

func newConn(h *Hub, ws *websocket.Conn, claims auth.Claims) *conn {
	return &conn{hub: h, ws: ws, userID: claims.UserID, claims: claims}
}

// expireAt closes the socket with 4401 at exp, its token's expiry (the
// client reconnects with a fresh token); the timer stops when the socket
// closes (writeLoop).
func (c *conn) expireAt(exp time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	c.expire = time.AfterFunc(time.Until(exp), func() {
		c.hub.stats.expired.Add(1)
		c.kill(StatusUnauthenticated, "token expired")
	})
}

// load is one load in flight for a socket.
type load struct{ cancel context.CancelFunc }

// loadContext returns the context of one load for the socket (snapshots,
// tickets): bounded by SnapshotTimeout and cancelled when the socket is
// killed or the hub has shut down. The caller calls done when the load
// ends. The socket keeps no context of its own between loads.
func (c *conn) loadContext() (ctx context.Context, done func()) {
	ctx, cancel := context.WithTimeout(c.hub.ctx, c.hub.cfg.SnapshotTimeout)
	l := &load{cancel: cancel}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		cancel()
		return ctx, cancel
	}
	c.loads = append(c.loads, l)
	return ctx, func() {
		c.mu.Lock()
		if i := slices.Index(c.loads, l); i >= 0 {
			c.loads = slices.Delete(c.loads, i, i+1)
		}
		if len(c.loads) == 0 {
			c.loads = nil
		}
		c.mu.Unlock()
		cancel()
	}
}

// gone reports whether the socket was killed or the hub has shut down: a
// load that failed then is no news for anyone.
func (c *conn) gone() bool {
	return c.isClosed() || c.hub.ctx.Err() != nil
}

// maxPending bounds the order messages held back while a snapshot loads; a
// socket that exceeds it is closed with 1013 and reconnects for a fresh
// snapshot.
func (c *conn) maxPending() int { return 4 * c.hub.cfg.SendBuffer }

// kill marks the socket closed with code and reason; the writer sends the
// close frame. Only the first call counts.
func (c *conn) kill(code websocket.StatusCode, reason string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.killLocked(code, reason)
}

func (c *conn) killLocked(code websocket.StatusCode, reason string) {
	if c.closed {
		return
	}
	c.closed = true
	c.closeCode, c.closeReason = code, reason
	c.pending = nil
	for _, l := range c.loads {
		l.cancel()
	}
	c.loads = nil
	c.startWriterLocked() // to send the close frame
}

// deliver queues m unless a snapshot load holds it back. Never blocks.
func (c *conn) deliver(m outgoing) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	if m.orderNo != "" && (c.holdAll > 0 || c.holdOrders[m.orderNo] > 0) {
		if len(c.pending) >= c.maxPending() {
			c.killLocked(websocket.StatusTryAgainLater, "too many events while loading snapshot")
			return
		}
		c.pending = append(c.pending, m)
		return
	}
	c.offerLocked(m)
}

// offerLocked applies the version check to an order message and queues it,
// evicting the socket if its buffer is full.
func (c *conn) offerLocked(m outgoing) {
	if c.closed {
		return
	}
	if m.orderNo != "" && m.version <= c.versions[m.orderNo] {
		c.hub.stats.stale.Add(1)
		return
	}
	if len(c.queue) >= c.hub.cfg.SendBuffer {
		c.hub.stats.evicted.Add(1)
		c.hub.log.Info("evicting slow socket", "user", c.userID, "buffer", c.hub.cfg.SendBuffer)
		c.killLocked(websocket.StatusPolicyViolation, "slow consumer: send buffer full")
		return
	}
	c.queue = append(c.queue, m.data)
	c.hub.stats.sent.Add(1)
	if m.orderNo != "" {
		if c.versions == nil {
			c.versions = make(map[string]int64)
		}
		c.versions[m.orderNo] = m.version
	}
	c.startWriterLocked()
}

// hold holds back events of orderNo ("" = of every order) until release.
func (c *conn) hold(orderNos ...string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(orderNos) == 0 {
		c.holdAll++
	}
	if len(orderNos) > 0 && c.holdOrders == nil {
		c.holdOrders = make(map[string]int)
	}
	for _, no := range orderNos {
		c.holdOrders[no]++
	}
}

// release queues the loaded snapshots, ends the hold taken with the same
// arguments and queues the held-back events that no load holds any more (the
// version check drops those the snapshots made stale).
func (c *conn) release(snaps []Snapshot, orderNos ...string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range snaps {
		if s.UserID != c.userID || s.OrderNo == "" { // never show someone else's order
			continue
		}
		c.offerLocked(encodeSnapshot(s))
	}
	if len(orderNos) == 0 {
		c.holdAll--
	}
	for _, no := range orderNos {
		if c.holdOrders[no]--; c.holdOrders[no] <= 0 {
			delete(c.holdOrders, no)
		}
	}
	if c.holdAll > 0 || c.closed {
		return
	}
	kept := c.pending[:0]
	for _, m := range c.pending {
		if c.holdOrders[m.orderNo] > 0 {
			kept = append(kept, m)
			continue
		}
		c.offerLocked(m)
	}
	clear(c.pending[len(kept):])
	c.pending = kept
}

// sendRecent queues the snapshots of the user's recent orders and of the
// orders it subscribed to, then ends the hold on all events. The caller has
// taken the hold (holdAll) before the socket could receive events.
func (c *conn) sendRecent() {
	ctx, done := c.loadContext()
	defer done()
	snaps, err := c.hub.snap.RecentOrders(ctx, c.userID, c.hub.cfg.SnapshotOrders)
	if err != nil && !c.gone() {
		c.hub.log.Warn("load recent orders", "user", c.userID, "err", err)
		c.deliver(outgoing{data: encodeError(codeUnavailable, "", "order snapshots are unavailable; poll the orders API")})
	}
	c.mu.Lock()
	subs := slices.Clone(c.subs)
	c.mu.Unlock()
	for _, no := range subs {
		if slices.ContainsFunc(snaps, func(s Snapshot) bool { return s.OrderNo == no }) {
			continue
		}
		s, err := c.hub.snap.OrderSnapshot(ctx, c.userID, no)
		if err == nil {
			snaps = append(snaps, s)
		}
	}
	c.release(snaps)
}

// resync re-sends snapshots after the hub (re)bound its RabbitMQ queue:
// events published while it had no queue are lost, the snapshots read now
// are not.
func (c *conn) resync() {
	c.hold()
	c.sendRecent()
}

// subscribe queues the snapshot of orderNo if it is the user's, or an error.
func (c *conn) subscribe(no string) {
	if _, _, _, err := order.ParseNo(no); err != nil {
		c.deliver(outgoing{data: encodeError(codeBadMessage, no, "malformed orderNo")})
		return
	}
	if !c.allowLoad(time.Now()) {
		c.deliver(outgoing{data: encodeError(codeRateLimited, no, "too many subscribes; slow down")})
		return
	}
	c.hold(no)
	ctx, done := c.loadContext()
	s, err := c.hub.snap.OrderSnapshot(ctx, c.userID, no)
	done()
	var snaps []Snapshot
	switch {
	case err == nil && s.UserID == c.userID && s.OrderNo == no:
		snaps = []Snapshot{s}
		c.remember(no)
	case err == nil || errors.Is(err, ErrNotFound):
		// Not (yet) in the database, or someone else's: the same answer.
		c.deliver(outgoing{data: encodeError(codeNotFound, no, "no such order (it may still be processing)")})
		c.remember(no) // its events will still come; resync should find it once written
	default:
		if !c.gone() {
			c.hub.log.Warn("load order snapshot", "user", c.userID, "orderNo", no, "err", err)
			c.deliver(outgoing{data: encodeError(codeUnavailable, no, "order snapshot unavailable; poll the orders API")})
		}
	}
	c.release(snaps, no)
}

func (c *conn) remember(no string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if i := slices.Index(c.subs, no); i >= 0 {
		c.subs = slices.Delete(c.subs, i, i+1)
	}
	c.subs = append(c.subs, no)
	if n := c.hub.cfg.MaxSubscriptions; len(c.subs) > n {
		c.subs = slices.Delete(c.subs, 0, len(c.subs)-n)
	}
}

// readLoop handles client messages until the socket closes. It reads with a
// background context: the socket ends when the close handshake started by
// the writer completes (or times out), not the moment kill is called. The
// loads a message asks for run on a goroutine of their own (offload), so the
// reader, which lives as long as the socket, keeps the small stack of a
// goroutine waiting in a read.
func (c *conn) readLoop() {
	for {
		typ, data, err := c.ws.Read(context.Background())
		if err != nil {
			return
		}
		var m clientMessage
		if typ != websocket.MessageText || !json.Valid(data) {
			c.deliver(outgoing{data: encodeError(codeBadMessage, "", "expected a JSON text message")})
			continue
		}
		if json.Unmarshal(data, &m) != nil {
			c.deliver(outgoing{data: encodeError(codeBadMessage, "",
				`expected {"type":"subscribe","orderNo":string}, {"type":"queue","productId":integer} or {"type":"ping"}`)})
			continue
		}
		switch m.Type {
		case "subscribe":
			offload(func() { c.subscribe(m.OrderNo) })
		case "ping":
			c.deliver(outgoing{data: pongMessage})
		case "queue": // line.go
			offload(func() { c.followLine(m.ProductID) })
		default:
			c.deliver(outgoing{data: encodeError(codeBadMessage, "", "unknown message type")})
		}
	}
}

// run is the socket's reader goroutine: it handles client messages until
// the socket closes, then waits for the writer to finish the close.
func (c *conn) run() {
	c.readLoop()
	c.kill(websocket.StatusNormalClosure, "")
	c.writers.Wait()
	c.hub.unregister(c)
}
