package push

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"path"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/stampede-sh/stampede/auth"
	"github.com/stampede-sh/stampede/order"
)

// Hub holds the open sockets per user and routes messages to them. Create it
// with New and start it with Run (or Serve); Handler serves GET /ws for
// embedding. Safe for concurrent use.
type Hub struct {
	cfg      Config
	verifier *auth.Verifier
	snap     Snapshotter
	amqpURL  string // one URL, or the nodes of a cluster, comma-separated
	urlNext  int    // the node Consume dials first (its loop only)
	log      *slog.Logger

	ctx    context.Context // cancelled when the hub has shut down
	cancel context.CancelFunc

	mu      sync.RWMutex
	users   map[int64]map[*conn]struct{}
	closing bool
	wg      sync.WaitGroup // socket handlers and background snapshot loads

	pmu      sync.Mutex
	products map[int64]*productState

	lines lineBook // line.go: waiting-room places

	addrLimit, userLimit *handshakeLimiter // handshake.go; nil: no limit

	started   atomic.Bool
	consuming atomic.Bool
	stats     counters
}

type counters struct {
	sockets, received, malformed, sent, stale, evicted, unauthenticated, reconnects atomic.Int64
	originRefused, overCap, rateLimited, expired, keyWithdrawn                      atomic.Int64
	seq                                                                             atomic.Uint64 // order of registration (oldest socket first)
}

// Stats is a point-in-time view of the hub's counters, for metrics.
type Stats struct {
	Sockets         int64 // open, authenticated sockets
	Consuming       bool  // a RabbitMQ consumer is bound and running
	EventsReceived  int64 // status events taken from RabbitMQ
	EventsMalformed int64 // messages that were not a valid status event (dropped)
	Sent            int64 // messages queued to sockets
	Stale           int64 // order messages not sent because the socket already had that version or a newer one
	Evicted         int64 // sockets closed as slow consumers
	Unauthenticated int64 // sockets closed with 4401
	AMQPReconnects  int64 // RabbitMQ connections made after the first
	OriginRefused   int64 // handshakes refused (403) for their Origin
	OverCap         int64 // sockets closed with 4429: their user opened more than MaxSocketsPerUser
	RateLimited     int64 // handshakes refused by HandshakeAddrRate (429) or HandshakeUserRate (1013)
	Expired         int64 // sockets closed with 4401 at their token's exp
	KeyWithdrawn    int64 // sockets closed with 4401 because their token's key left the provider's set
}

// New returns a Hub. verifier checks the bearer tokens; snap reads order
// snapshots; amqpURL is the RabbitMQ the status events come from ("" runs
// without a consumer: only snapshots and PublishProduct reach sockets, which
// is meant for tests); logger may be nil.
func New(cfg Config, verifier *auth.Verifier, snap Snapshotter, amqpURL string, logger *slog.Logger) (*Hub, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if verifier == nil || snap == nil {
		return nil, errors.New("invalid config: push: verifier and snapshotter are required")
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Hub{
		cfg: cfg, verifier: verifier, snap: snap, amqpURL: amqpURL, log: logger.With("component", "push"),
		ctx: ctx, cancel: cancel,
		users:     make(map[int64]map[*conn]struct{}),
		products:  make(map[int64]*productState),
		addrLimit: newHandshakeLimiter(cfg.HandshakeAddrRate),
		userLimit: newHandshakeLimiter(cfg.HandshakeUserRate),
	}, nil
}

// Run listens on Config.Addr and calls Serve.
func (h *Hub) Run(ctx context.Context) error {
	ln, err := net.Listen("tcp", h.cfg.Addr)
	if err != nil {
		return fmt.Errorf("push: listen: %w", err)
	}
	return h.Serve(ctx, ln)
}

// Serve serves GET /ws on ln and consumes status events from RabbitMQ until ctx
// is cancelled; then it stops accepting sockets, closes every open one with
// 1001 "server shutting down", waits for them (bounded by ShutdownTimeout) and
// returns nil. It returns an error if the listener fails. Serve may be called
// once per Hub.
func (h *Hub) Serve(ctx context.Context, ln net.Listener) error {
	if !h.started.CompareAndSwap(false, true) {
		ln.Close()
		return errors.New("push: Serve called twice")
	}
	srv := &http.Server{
		Handler:           h.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		MaxHeaderBytes:    h.cfg.MaxHeaderBytes,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			return context.WithValue(ctx, netConnKey{}, c)
		},
		ErrorLog: slog.NewLogLogger(h.log.Handler(), slog.LevelWarn),
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()

	consumeCtx, stopConsume := context.WithCancel(ctx)
	consumeDone := make(chan struct{})
	go func() {
		defer close(consumeDone)
		h.Consume(consumeCtx)
	}()
	keysDone := make(chan struct{})
	go func() {
		defer close(keysDone)
		h.watchKeys(consumeCtx)
	}()
	h.log.Info("push serving", "addr", ln.Addr().String())

	var err error
	select {
	case <-ctx.Done():
	case err = <-serveErr:
		err = fmt.Errorf("push: serve: %w", err)
	}
	stopConsume()
	sctx, cancel := context.WithTimeout(context.Background(), h.cfg.ShutdownTimeout)
	defer cancel()
	// Shutdown stops the listener; hijacked sockets are the hub's to close.
	if serr := srv.Shutdown(sctx); serr != nil && err == nil && !errors.Is(serr, context.DeadlineExceeded) {
		err = fmt.Errorf("push: shutdown: %w", serr)
	}
	if cerr := h.shutdown(sctx); cerr != nil && err == nil {
		err = cerr
	}
	<-consumeDone
	<-keysDone
	if err == nil {
		select {
		case e := <-serveErr:
			if e != nil && !errors.Is(e, http.ErrServerClosed) {
				err = fmt.Errorf("push: serve: %w", e)
			}
		default:
		}
	}
	return err
}

// Close closes every socket with 1001 "server shutting down", refuses new
// ones, stops pending product messages and waits for the sockets to finish
// (bounded by ShutdownTimeout). Serve does this itself; Close is for hubs used
// only through Handler. It is idempotent.
func (h *Hub) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), h.cfg.ShutdownTimeout)
	defer cancel()
	return h.shutdown(ctx)
}

func (h *Hub) shutdown(ctx context.Context) error {
	h.mu.Lock()
	h.closing = true
	var all []*conn
	for _, set := range h.users {
		for c := range set {
			all = append(all, c)
		}
	}
	h.mu.Unlock()
	h.pmu.Lock()
	for _, st := range h.products {
		if st.timer != nil {
			st.timer.Stop()
			st.timer = nil
		}
	}
	h.pmu.Unlock()
	for _, c := range all {
		c.kill(websocket.StatusGoingAway, "server shutting down")
	}
	done := make(chan struct{})
	go func() { h.wg.Wait(); close(done) }()
	select {
	case <-done:
		h.cancel()
		return nil
	case <-ctx.Done():
		h.cancel() // aborts snapshot loads; sockets' writes are bounded by WriteTimeout
		<-done
		return fmt.Errorf("push: shutdown: %d sockets did not close in time", len(all))
	}
}

// Handler serves GET /ws (docs/spec.md §3). The token is taken from the
// Sec-WebSocket-Protocol header (["stampede", "<token>"]; the server answers
// "stampede"), never from the URL (a ?token= would end up in proxy logs). A
// socket without a valid token is accepted and closed at once with 4401,
// since browsers do not expose the status of a refused upgrade. A socket
// follows its token: it is closed with 4401 at the token's exp (the client
// reconnects with a fresh token) and once the key that signed it left the
// provider's key set (KeyCheckInterval). Handshakes are rate-limited per
// client address and per user (handshake.go).
//
// Serve uses it. To mount it on another net/http server instead, also run
// Consume and call Close at shutdown; close handshakes with clients that
// stopped reading then take up to the library's 2 × 5s instead of
// WriteTimeout, as only Serve knows the underlying connections.
func (h *Hub) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /ws", h.serveWS)
	return mux
}

// quoted matches a Go-quoted string in an error message: the websocket
// library quotes the header values it refuses.
var quoted = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)

// withoutQuoted is err's message with every quoted value replaced by its
// length, for the log: a handshake header's value (a token in the wrong
// header) never reaches it.
func withoutQuoted(err error) string {
	return quoted.ReplaceAllStringFunc(err.Error(), func(q string) string { return "<" + strconv.Itoa(len(q)-2) + " bytes>" })
}

// netConnKey is the request context key of the connection Serve accepted.
type netConnKey struct{}

// tokenFrom returns the bearer token of a socket request: the offered
// subprotocol that is not Subprotocol ("" without one).
func tokenFrom(r *http.Request) string {
	var offered []string
	for _, v := range r.Header.Values("Sec-WebSocket-Protocol") {
		for _, p := range strings.Split(v, ",") {
			if p = strings.TrimSpace(p); p != "" {
				offered = append(offered, p)
			}
		}
	}
	for _, p := range offered {
		if p != Subprotocol {
			return p
		}
	}
	return ""
}

func (h *Hub) serveWS(w http.ResponseWriter, r *http.Request) {
	// Count the request in wg from the start, so shutdown also waits for
	// sockets that are still being refused or closed.
	if !h.enter() {
		http.Error(w, "push: shutting down", http.StatusServiceUnavailable)
		return
	}
	defer h.wg.Done()
	if !h.originAllowed(r) {
		h.stats.originRefused.Add(1)
		// Sizes only: a header's value is never logged (a token sent in the
		// wrong header would be).
		h.log.Debug("websocket origin refused", "originBytes", len(r.Header.Get("Origin")), "hostBytes", len(r.Host))
		http.Error(w, "push: origin not allowed", http.StatusForbidden)
		return
	}
	// A loopback peer ("" from clientAddr) is not limited (Config.HandshakeAddrRate).
	if addr := clientAddr(r); addr != "" {
		if ok, wait := h.addrLimit.allow(addr, time.Now()); !ok {
			h.stats.rateLimited.Add(1)
			w.Header().Set("Retry-After", retryAfter(wait))
			http.Error(w, "push: too many handshakes from this address", http.StatusTooManyRequests)
			return
		}
	}
	token := tokenFrom(r)
	// The origin was checked above (Config.AllowedOrigins).
	opts := &websocket.AcceptOptions{Subprotocols: []string{Subprotocol}, InsecureSkipVerify: true}
	ws, err := websocket.Accept(leanHijacker{w}, r, opts) // hijack.go: small buffers
	if err != nil {
		h.log.Debug("websocket accept", "err", withoutQuoted(err))
		return
	}
	nc, _ := r.Context().Value(netConnKey{}).(net.Conn)
	claims, err := h.verifier.Verify(token)
	if errors.Is(err, auth.ErrIdentityUnavailable) { // a valid token, the mapping store is down: retry
		closeBounded(ws, nc, h.cfg.WriteTimeout, websocket.StatusTryAgainLater, "sign-in lookup unavailable; retry shortly")
		return
	}
	if err != nil {
		h.stats.unauthenticated.Add(1)
		closeBounded(ws, nc, h.cfg.WriteTimeout, StatusUnauthenticated, "unauthenticated")
		return
	}
	if ok, wait := h.userLimit.allow(strconv.FormatInt(claims.UserID, 10), time.Now()); !ok {
		h.stats.rateLimited.Add(1)
		closeBounded(ws, nc, h.cfg.WriteTimeout, websocket.StatusTryAgainLater,
			fmt.Sprintf("too many sockets opened by this user; retry in %ss", retryAfter(wait)))
		return
	}
	ws.SetReadLimit(4096)
	c := newConn(h, ws, claims)
	c.nc = nc
	c.holdAll = 1 // released once the connect snapshots are queued
	if !h.register(c) {
		closeBounded(ws, nc, h.cfg.WriteTimeout, websocket.StatusGoingAway, "server shutting down")
		return
	}
	c.startPings()
	c.expireAt(claims.Expires) // at exp the token is no longer valid: neither is the socket
	c.sendRecent()
	// The socket's reader gets a goroutine of its own and this one, net/http's,
	// ends with its request and its deeper stack: a waiting socket keeps one
	// small goroutine (writer.go). This handler is still counted in wg, so
	// the Add cannot race with shutdown's Wait.
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		c.run()
	}()
}

// watchKeys closes with 4401, every KeyCheckInterval until ctx ends, the
// sockets whose token was signed with a key that has left its provider's key
// set (as last fetched: auth.Verifier.KeyCurrent makes no request). One loop
// for every socket: a socket keeps no timer of its own for it.
func (h *Hub) watchKeys(ctx context.Context) {
	t := time.NewTicker(h.cfg.KeyCheckInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for _, c := range h.conns() {
			if !h.verifier.KeyCurrent(c.claims) {
				h.stats.keyWithdrawn.Add(1)
				c.kill(StatusUnauthenticated, "the token's signing key was withdrawn")
			}
		}
	}
}

// originAllowed applies Config.AllowedOrigins to the request's Origin.
func (h *Hub) originAllowed(r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true // not a browser: see Config.AllowedOrigins
	}
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" {
		return false
	}
	if len(h.cfg.AllowedOrigins) == 0 {
		host := r.Host
		if hn, _, err := net.SplitHostPort(host); err == nil {
			host = hn
		}
		host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
		return host != "" && strings.EqualFold(u.Hostname(), host)
	}
	for _, p := range h.cfg.AllowedOrigins {
		if ok, _ := path.Match(strings.ToLower(p), strings.ToLower(u.Host)); ok {
			return true
		}
	}
	return false
}

// closeBounded closes ws with code and reason. A peer that stopped reading
// cannot take the close frame, so when the hijacked connection is known the
// handshake is bounded by timeout instead of the library's 2 × 5s.
func closeBounded(ws *websocket.Conn, nc net.Conn, timeout time.Duration, code websocket.StatusCode, reason string) {
	if nc != nil {
		nc.SetDeadline(time.Now().Add(timeout))
	}
	ws.Close(code, reason)
}

// enter counts a socket handler in wg; false once the hub is closing.
func (h *Hub) enter() bool {
	h.mu.RLock()
	defer h.mu.RUnlock()
	if h.closing {
		return false
	}
	h.wg.Add(1)
	return true
}

// register adds c to the sockets of its user; false once the hub is closing.
func (h *Hub) register(c *conn) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closing {
		return false
	}
	set := h.users[c.userID]
	if set == nil {
		set = make(map[*conn]struct{})
		h.users[c.userID] = set
	}
	if limit := h.cfg.MaxSocketsPerUser; limit > 0 && len(set) >= limit {
		// Over the cap: the user's oldest socket goes (a buyer who opened
		// a new tab wants the new one to work).
		var oldest *conn
		for o := range set {
			if oldest == nil || o.seq < oldest.seq {
				oldest = o
			}
		}
		delete(set, oldest)
		h.stats.sockets.Add(-1)
		h.stats.overCap.Add(1)
		oldest.kill(StatusTooManySockets, fmt.Sprintf("too many sockets for this user (at most %d): closed the oldest", limit))
	}
	c.seq = h.stats.seq.Add(1)
	set[c] = struct{}{}
	h.stats.sockets.Add(1)
	return true
}

func (h *Hub) unregister(c *conn) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if set := h.users[c.userID]; set != nil {
		if _, ok := set[c]; ok {
			delete(set, c)
			h.stats.sockets.Add(-1)
		}
		if len(set) == 0 {
			delete(h.users, c.userID)
		}
	}
}

// spawn runs fn in a goroutine counted in wg, unless the hub is closing.
func (h *Hub) spawn(fn func()) bool {
	if !h.enter() {
		return false
	}
	go func() {
		defer h.wg.Done()
		fn()
	}()
	return true
}

// dispatch sends a status event to the sockets of its owner. It never blocks.
func (h *Hub) dispatch(e order.Event) {
	m := encodeEvent(e)
	h.mu.RLock()
	defer h.mu.RUnlock()
	for c := range h.users[e.UserID] {
		c.deliver(m)
	}
}

// broadcast queues data to every socket. It never blocks.
func (h *Hub) broadcast(data []byte) {
	m := outgoing{data: data}
	h.mu.RLock()
	defer h.mu.RUnlock()
	for _, set := range h.users {
		for c := range set {
			c.deliver(m)
		}
	}
}

// conns returns the open sockets.
func (h *Hub) conns() []*conn {
	h.mu.RLock()
	defer h.mu.RUnlock()
	var all []*conn
	for _, set := range h.users {
		for c := range set {
			all = append(all, c)
		}
	}
	return all
}

// Stats returns the hub's counters.
func (h *Hub) Stats() Stats {
	return Stats{
		Sockets:         h.stats.sockets.Load(),
		Consuming:       h.consuming.Load(),
		EventsReceived:  h.stats.received.Load(),
		EventsMalformed: h.stats.malformed.Load(),
		Sent:            h.stats.sent.Load(),
		Stale:           h.stats.stale.Load(),
		Evicted:         h.stats.evicted.Load(),
		Unauthenticated: h.stats.unauthenticated.Load(),
		AMQPReconnects:  h.stats.reconnects.Load(),
		OriginRefused:   h.stats.originRefused.Load(),
		OverCap:         h.stats.overCap.Load(),
		RateLimited:     h.stats.rateLimited.Load(),
		Expired:         h.stats.expired.Load(),
		KeyWithdrawn:    h.stats.keyWithdrawn.Load(),
	}
}

// Ready reports whether the hub is consuming status events (always nil for a
// hub without an AMQP URL), for /readyz.
func (h *Hub) Ready(context.Context) error {
	if h.amqpURL == "" || h.consuming.Load() {
		return nil
	}
	return errors.New("push: not consuming status events from RabbitMQ")
}

// productState is the throttle of one product's messages.
type productState struct {
	last    time.Time // when the last message was queued
	sent    *productMessage
	pending *productMessage // latest value not yet sent
	timer   *time.Timer     // fires when pending may be sent
}

// PublishProduct broadcasts {"type":"product","productId","available","soldOut"}
// to every socket, at most once per ProductThrottle per product: an update
// inside the window is held back and merged with later ones (the latest value
// wins) and sent when the window ends. An update equal to the last one sent is
// dropped. It never blocks.
func (h *Hub) PublishProduct(productID, available int64, soldOut bool) {
	m := productMessage{Type: "product", ProductID: productID, Available: available, SoldOut: soldOut}
	h.pmu.Lock()
	if h.isClosing() {
		h.pmu.Unlock()
		return
	}
	st := h.products[productID]
	if st == nil {
		st = &productState{}
		h.products[productID] = st
	}
	now := time.Now()
	if st.timer != nil { // a send is scheduled: it will carry this value
		st.pending = &m
		h.pmu.Unlock()
		return
	}
	if st.sent != nil && *st.sent == m {
		h.pmu.Unlock()
		return
	}
	if wait := st.last.Add(h.cfg.ProductThrottle).Sub(now); wait > 0 {
		st.pending = &m
		st.timer = time.AfterFunc(wait, func() { h.flushProduct(productID) })
		h.pmu.Unlock()
		return
	}
	st.last, st.sent = now, &m
	h.pmu.Unlock()
	h.broadcast(mustJSON(m))
}

func (h *Hub) flushProduct(productID int64) {
	h.pmu.Lock()
	st := h.products[productID]
	if st == nil || st.timer == nil || st.pending == nil {
		h.pmu.Unlock()
		return
	}
	m := *st.pending
	st.timer, st.pending = nil, nil
	if st.sent != nil && *st.sent == m {
		h.pmu.Unlock()
		return
	}
	st.last, st.sent = time.Now(), &m
	h.pmu.Unlock()
	h.broadcast(mustJSON(m))
}

func (h *Hub) isClosing() bool {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.closing
}
