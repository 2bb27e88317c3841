package push

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	amqp "github.com/rabbitmq/amqp091-go"
	"go.uber.org/goleak"

	"github.com/stampede-sh/stampede/auth"
	"github.com/stampede-sh/stampede/order"
	"github.com/stampede-sh/stampede/pipeline/pipelinetest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

var testSecret = []byte("push-test-secret")

func token(t testing.TB, uid int64) string {
	t.Helper()
	tok, err := auth.Issue(testSecret, uid, false, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// ---------------------------------------------------------------- RabbitMQ

// vhosts holds each running test's vhost URL (amqpURL).
var vhosts sync.Map

// amqpURL returns the URL of the test's own RabbitMQ vhost on the test
// broker (pipelinetest.Vhost: STAMPEDE_TEST_AMQP_URL), the same one for
// every call of one test.
func amqpURL(t testing.TB) string {
	t.Helper()
	if u, ok := vhosts.Load(t); ok {
		return u.(string)
	}
	u := pipelinetest.Vhost(t, "push")
	vhosts.Store(t, u)
	t.Cleanup(func() { vhosts.Delete(t) })
	return u
}

// vhostName is the name of the test's vhost (amqpURL).
func vhostName(t testing.TB) string {
	t.Helper()
	u, err := amqp.ParseURI(amqpURL(t))
	if err != nil {
		t.Fatal(err)
	}
	return u.Vhost
}

// exchangeName is a fresh topic exchange for one test.
func exchangeName(t testing.TB) string {
	return fmt.Sprintf("test.%s.%d", strings.ReplaceAll(t.Name(), "/", "."), time.Now().UnixNano())
}

// publisher publishes status events to an exchange of the test vhost.
type publisher struct {
	t        testing.TB
	exchange string
	conn     *amqp.Connection
	ch       *amqp.Channel
}

func newPublisher(t testing.TB, exchange string) *publisher {
	t.Helper()
	p := &publisher{t: t, exchange: exchange}
	p.connect()
	t.Cleanup(func() { p.conn.Close() })
	return p
}

func (p *publisher) connect() {
	p.t.Helper()
	conn, err := amqp.Dial(amqpURL(p.t))
	if err != nil {
		p.t.Fatal(err)
	}
	ch, err := conn.Channel()
	if err != nil {
		p.t.Fatal(err)
	}
	if err := ch.ExchangeDeclare(p.exchange, amqp.ExchangeTopic, true, false, false, false, nil); err != nil {
		p.t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		p.t.Fatal(err)
	}
	p.conn, p.ch = conn, ch
}

func (p *publisher) publish(e order.Event) {
	p.t.Helper()
	if e.EventID == "" {
		e.EventID = order.StatusEventID(e.OrderNo, e.Version)
	}
	if e.Type == "" {
		e.Type = order.EventStatusChanged
	}
	if e.OccurredAt.IsZero() {
		e.OccurredAt = time.Now().UTC()
	}
	body, _ := json.Marshal(e)
	p.publishRaw(order.RouteStatus(e.Status), body)
}

func (p *publisher) publishRaw(key string, body []byte) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conf, err := p.ch.PublishWithDeferredConfirmWithContext(ctx, p.exchange, key, false, false,
		amqp.Publishing{ContentType: "application/json", Body: body})
	if err != nil {
		p.t.Fatalf("publish: %v", err)
	}
	if ok, err := conf.WaitContext(ctx); !ok || err != nil {
		p.t.Fatalf("publish not confirmed: %v %v", ok, err)
	}
}

// ---------------------------------------------------------------- snapshots

// memSnapshots is an in-memory Snapshotter. gate, when set, makes every call
// report on entered and wait for a value on gate.
type memSnapshots struct {
	mu      sync.Mutex
	orders  map[string]Snapshot
	recent  map[int64][]string // userID → orderNos returned by RecentOrders, newest first
	gate    chan struct{}
	entered chan string
	calls   atomic.Int64
}

func newMemSnapshots() *memSnapshots {
	return &memSnapshots{orders: map[string]Snapshot{}, recent: map[int64][]string{}}
}

func (m *memSnapshots) put(s Snapshot, inRecent bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.orders[s.OrderNo]; !ok && inRecent {
		m.recent[s.UserID] = append([]string{s.OrderNo}, m.recent[s.UserID]...)
	}
	m.orders[s.OrderNo] = s
}

func (m *memSnapshots) setGate(on bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if on {
		m.gate, m.entered = make(chan struct{}), make(chan string, 16)
	} else {
		m.gate, m.entered = nil, nil
	}
}

func (m *memSnapshots) wait(ctx context.Context, what string) error {
	m.mu.Lock()
	gate, entered := m.gate, m.entered
	m.mu.Unlock()
	if gate == nil {
		return nil
	}
	entered <- what
	select {
	case <-gate:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (m *memSnapshots) OrderSnapshot(ctx context.Context, userID int64, no string) (Snapshot, error) {
	m.calls.Add(1)
	if err := m.wait(ctx, "order:"+no); err != nil {
		return Snapshot{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.orders[no]
	if !ok || s.UserID != userID {
		return Snapshot{}, ErrNotFound
	}
	return s, nil
}

func (m *memSnapshots) RecentOrders(ctx context.Context, userID int64, limit int) ([]Snapshot, error) {
	m.calls.Add(1)
	if err := m.wait(ctx, "recent"); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []Snapshot
	for _, no := range m.recent[userID] {
		if len(out) == limit {
			break
		}
		out = append(out, m.orders[no])
	}
	return out, nil
}

// ---------------------------------------------------------------- hub and clients

var productSeq atomic.Int64

// orderNo returns a fresh, valid orderNo.
func orderNo() string {
	n := productSeq.Add(1)
	return order.FormatNo(time.Now().UnixNano()>>10+n, 0, 7)
}

type testHub struct {
	*Hub
	url  string // ws://host:port/ws
	stop func()
}

// startHub serves a hub on a loopback port until the test ends (or stop is
// called) and checks that Serve returned cleanly. wrap, if set, wraps the
// listener.
func startHub(t testing.TB, cfg Config, snap Snapshotter, amqpURL string, wrap func(net.Listener) net.Listener) *testHub {
	t.Helper()
	return startHubWith(t, cfg, auth.NewVerifier(testSecret), snap, amqpURL, wrap)
}

// startHubWith is startHub with the verifier given. The handshake limits are
// off unless cfg sets them: tests of other things open sockets in bursts.
func startHubWith(t testing.TB, cfg Config, v *auth.Verifier, snap Snapshotter, amqpURL string, wrap func(net.Listener) net.Listener) *testHub {
	t.Helper()
	if cfg.HandshakeUserRate == 0 {
		cfg.HandshakeUserRate = -1
	}
	if cfg.HandshakeAddrRate == 0 {
		cfg.HandshakeAddrRate = -1
	}
	h, err := New(cfg, v, snap, amqpURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	return serveHub(t, h, amqpURL, wrap)
}

// serveHub serves h on a loopback port until the test ends (or stop is
// called); with amqpURL it waits until h consumes.
func serveHub(t testing.TB, h *Hub, amqpURL string, wrap func(net.Listener) net.Listener) *testHub {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if wrap != nil {
		ln = wrap(ln)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Serve(ctx, ln) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Serve: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	th := &testHub{Hub: h, url: "ws://" + addr + "/ws", stop: stop}
	if amqpURL != "" {
		waitFor(t, 10*time.Second, "hub consuming", func() bool { return h.Ready(context.Background()) == nil })
	}
	return th
}

func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// msg is any server message.
type msg struct {
	Type        string     `json:"type"`
	OrderNo     string     `json:"orderNo"`
	Status      string     `json:"status"`
	Version     int64      `json:"version"`
	UpdatedAt   time.Time  `json:"updatedAt"`
	PayDeadline *time.Time `json:"payDeadline"`
	ProductID   int64      `json:"productId"`
	Available   int64      `json:"available"`
	SoldOut     bool       `json:"soldOut"`
	Code        string     `json:"code"`
	Message     string     `json:"message"`
	// {"type":"queue"} (line.go)
	Ticket      string `json:"ticket"`
	Mode        string `json:"mode"`
	State       string `json:"state"`
	Position    int64  `json:"position"`
	EtaSeconds  *int64 `json:"etaSeconds"`
	Seq         uint64 `json:"seq"`
	BackInStock bool   `json:"backInStock"`
}

// client is a test socket whose messages a goroutine reads into msgs (unless
// it was dialled with noRead); closed is closed with the close error.
type client struct {
	t      testing.TB
	ws     *websocket.Conn
	msgs   chan msg
	closed chan struct{}
	err    error // valid after closed

	readOnce sync.Once
}

type dialOpts struct {
	query  bool // token in ?token= instead of the subprotocol (refused since issue 26)
	noRead bool
	http   *http.Client
	protos []string // overrides the subprotocols
}

func dial(t testing.TB, url string, tok string, o dialOpts) *client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	opts := &websocket.DialOptions{HTTPClient: o.http, Subprotocols: []string{Subprotocol, tok}}
	if o.query {
		url += "?token=" + tok
		opts.Subprotocols = []string{Subprotocol}
	}
	if o.protos != nil {
		opts.Subprotocols = o.protos
	}
	ws, _, err := websocket.Dial(ctx, url, opts)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	c := &client{t: t, ws: ws, msgs: make(chan msg, 100000), closed: make(chan struct{})}
	t.Cleanup(func() {
		c.ws.CloseNow()
		c.startReading()
		<-c.closed
	})
	if !o.noRead {
		c.startReading()
	}
	return c
}

// startReading starts the reader goroutine of a client dialled with noRead.
func (c *client) startReading() { c.readOnce.Do(func() { go c.readLoop() }) }

func (c *client) readLoop() {
	defer close(c.closed)
	for {
		_, data, err := c.ws.Read(context.Background())
		if err != nil {
			c.err = err
			return
		}
		var m msg
		if err := json.Unmarshal(data, &m); err != nil {
			c.err = err
			return
		}
		c.msgs <- m
	}
}

// next returns the next message, failing the test after d.
func (c *client) next(d time.Duration) msg {
	c.t.Helper()
	select {
	case m := <-c.msgs:
		return m
	case <-c.closed:
		select {
		case m := <-c.msgs:
			return m
		default:
		}
		c.t.Fatalf("socket closed while waiting for a message: %v", c.err)
	case <-time.After(d):
		c.t.Fatalf("no message within %v", d)
	}
	return msg{}
}

// quiet fails the test if a message arrives within d.
func (c *client) quiet(d time.Duration) {
	c.t.Helper()
	select {
	case m := <-c.msgs:
		c.t.Fatalf("unexpected message %+v", m)
	case <-time.After(d):
	}
}

// closeStatus waits for the socket to close and returns its close code.
func (c *client) closeStatus(d time.Duration) (websocket.StatusCode, string) {
	c.t.Helper()
	select {
	case <-c.closed:
	case <-time.After(d):
		c.t.Fatalf("socket not closed within %v", d)
	}
	var ce websocket.CloseError
	if errors.As(c.err, &ce) {
		return ce.Code, ce.Reason
	}
	return websocket.CloseStatus(c.err), ""
}

func (c *client) send(v any) {
	c.t.Helper()
	b, _ := json.Marshal(v)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.ws.Write(ctx, websocket.MessageText, b); err != nil {
		c.t.Fatal(err)
	}
}

func statusEvent(uid int64, no string, st order.Status, v int64) order.Event {
	return order.Event{EventID: order.StatusEventID(no, v), Type: order.EventStatusChanged, OrderNo: no, UserID: uid,
		ProductID: 7, Quantity: 1, Status: st, Version: v, OccurredAt: time.Now().UTC()}
}
