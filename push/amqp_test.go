package push

import (
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/stampede-sh/stampede/order"
	"github.com/stampede-sh/stampede/persistence"
)

// Through RabbitMQ: each user gets exactly their own events, in order;
// messages that are not status events are dropped.
func TestOwnershipOverRabbitMQ(t *testing.T) {
	t.Parallel()
	ex := exchangeName(t)
	h := startHub(t, Config{Exchange: ex}, newMemSnapshots(), amqpURL(t), nil)
	a1 := dial(t, h.url, token(t, 1), dialOpts{})
	a2 := dial(t, h.url, token(t, 1), dialOpts{})
	b := dial(t, h.url, token(t, 2), dialOpts{})
	waitFor(t, wait, "three sockets", func() bool { return h.Stats().Sockets == 3 })

	pub := newPublisher(t, ex)
	na, nb := orderNo(), orderNo()
	const n = 20
	for v := int64(1); v <= n; v++ {
		pub.publish(statusEvent(1, na, order.WaitingPay, v))
		pub.publish(statusEvent(2, nb, order.WaitingPay, v))
		if v == n/2 {
			pub.publishRaw(order.RouteStatus(order.Paid), []byte(`{"not":"an event"}`))
			created := statusEvent(1, na, order.Processing, 99)
			created.Type = order.EventCreated
			pub.publish(created) // not a status change: ignored
		}
	}
	for _, c := range []struct {
		cl *client
		no string
	}{{a1, na}, {a2, na}, {b, nb}} {
		for v := int64(1); v <= n; v++ {
			m := c.cl.next(wait)
			if m.Type != "order" || m.OrderNo != c.no || m.Version != v {
				t.Fatalf("got %+v, want %s v%d", m, c.no, v)
			}
		}
		c.cl.quiet(100 * time.Millisecond)
	}
	if s := h.Stats(); s.EventsReceived != 2*n || s.EventsMalformed != 2 {
		t.Fatalf("stats %+v", s)
	}
}

// The connect snapshot comes first, then live events from RabbitMQ; a
// redelivered event the snapshot already showed is not sent again. (Events
// racing the snapshot load are covered by TestSnapshotThenEventsOnConnect.)
func TestSnapshotThenLiveEvents(t *testing.T) {
	t.Parallel()
	ex := exchangeName(t)
	snap := newMemSnapshots()
	no := orderNo()
	snap.put(Snapshot{OrderNo: no, UserID: 5, Status: order.WaitingPay, Version: 2, UpdatedAt: time.Now()}, true)
	h := startHub(t, Config{Exchange: ex}, snap, amqpURL(t), nil)
	pub := newPublisher(t, ex)
	c := dial(t, h.url, token(t, 5), dialOpts{})
	if m := c.next(wait); m.Version != 2 || m.Status != string(order.WaitingPay) {
		t.Fatalf("first message %+v, want snapshot v2", m)
	}
	pub.publish(statusEvent(5, no, order.WaitingPay, 2)) // the event the snapshot already showed
	pub.publish(statusEvent(5, no, order.Paid, 3))
	if m := c.next(wait); m.Version != 3 || m.Status != string(order.Paid) {
		t.Fatalf("second message %+v, want event v3", m)
	}
	c.quiet(100 * time.Millisecond)
	if h.Stats().Stale != 1 {
		t.Fatalf("stale = %d, want 1", h.Stats().Stale)
	}
}

// Two push instances on one exchange each deliver to the sockets they hold.
func TestTwoInstances(t *testing.T) {
	t.Parallel()
	ex := exchangeName(t)
	h1 := startHub(t, Config{Exchange: ex}, newMemSnapshots(), amqpURL(t), nil)
	h2 := startHub(t, Config{Exchange: ex}, newMemSnapshots(), amqpURL(t), nil)
	c1 := dial(t, h1.url, token(t, 1), dialOpts{})
	c2 := dial(t, h2.url, token(t, 1), dialOpts{})
	c3 := dial(t, h2.url, token(t, 3), dialOpts{})
	waitFor(t, wait, "sockets", func() bool { return h1.Stats().Sockets == 1 && h2.Stats().Sockets == 2 })

	pub := newPublisher(t, ex)
	n1, n3 := orderNo(), orderNo()
	pub.publish(statusEvent(1, n1, order.WaitingPay, 2))
	pub.publish(statusEvent(3, n3, order.Failed, 2))
	for _, c := range []*client{c1, c2} {
		if m := c.next(wait); m.OrderNo != n1 || m.Version != 2 {
			t.Fatalf("user 1 got %+v", m)
		}
		c.quiet(100 * time.Millisecond)
	}
	if m := c3.next(wait); m.OrderNo != n3 || m.Status != string(order.Failed) {
		t.Fatalf("user 3 got %+v", m)
	}
	c3.quiet(50 * time.Millisecond)
	if h1.Stats().EventsReceived != 2 || h2.Stats().EventsReceived != 2 {
		t.Fatalf("each instance should receive every event: %+v %+v", h1.Stats(), h2.Stats())
	}
}

// When the RabbitMQ connection drops, the hub reconnects with backoff and
// re-sends snapshots, so a change whose event was lost still reaches the
// socket. It closes every connection of the test vhost.
func TestReconnectResyncs(t *testing.T) {
	ex := exchangeName(t)
	snap := newMemSnapshots()
	no := orderNo()
	snap.put(Snapshot{OrderNo: no, UserID: 9, Status: order.Processing, Version: 1, UpdatedAt: time.Now()}, true)
	h := startHub(t, Config{Exchange: ex, ReconnectMin: 50 * time.Millisecond, ReconnectMax: 500 * time.Millisecond}, snap, amqpURL(t), nil)
	c := dial(t, h.url, token(t, 9), dialOpts{})
	if m := c.next(wait); m.Version != 1 {
		t.Fatalf("connect snapshot %+v", m)
	}
	// A change whose event is lost (never published): only a resync can bring it.
	snap.put(Snapshot{OrderNo: no, UserID: 9, Status: order.WaitingPay, Version: 2, UpdatedAt: time.Now()}, true)
	c.quiet(50 * time.Millisecond)
	out, err := exec.Command("rabbitmqctl", "close_all_connections", "--vhost", vhostName(t), "push reconnect test").CombinedOutput()
	if err != nil {
		t.Fatalf("rabbitmqctl close_all_connections: %v: %s", err, out)
	}
	waitFor(t, 15*time.Second, "reconnected", func() bool {
		return h.Stats().AMQPReconnects > 0 && h.Ready(t.Context()) == nil
	})
	if m := c.next(wait); m.Version != 2 || m.Status != string(order.WaitingPay) {
		t.Fatalf("after reconnect got %+v, want resynced snapshot v2", m)
	}
	pub := newPublisher(t, ex)
	pub.publish(statusEvent(9, no, order.Paid, 3))
	if m := c.next(wait); m.Version != 3 || m.Status != string(order.Paid) {
		t.Fatalf("live event after reconnect: %+v", m)
	}
}

// A batch of status changes (one message for an order-lock batch, built by
// persistence.StatusBatchMessage) reaches each order's owner as its own
// event, and nobody else.
func TestStatusBatchOverRabbitMQ(t *testing.T) {
	t.Parallel()
	ex := exchangeName(t)
	h := startHub(t, Config{Exchange: ex}, newMemSnapshots(), amqpURL(t), nil)
	a := dial(t, h.url, token(t, 1), dialOpts{})
	b := dial(t, h.url, token(t, 2), dialOpts{})
	waitFor(t, wait, "two sockets", func() bool { return h.Stats().Sockets == 2 })

	var evs []order.Event
	var mine []string
	for i := range 10 {
		no, user := orderNo(), int64(1+i%2)
		if user == 1 {
			mine = append(mine, no)
		}
		evs = append(evs, statusEvent(user, no, order.WaitingPay, 2))
	}
	m, err := persistence.StatusBatchMessage(evs)
	if err != nil {
		t.Fatal(err)
	}
	pub := newPublisher(t, ex)
	pub.publishRaw(m.RoutingKey, m.Payload)
	for _, no := range mine {
		got := a.next(wait)
		if got.Type != "order" || got.OrderNo != no || got.Status != string(order.WaitingPay) || got.Version != 2 {
			t.Fatalf("user 1 got %+v, want %s WAITING_PAY v2", got, no)
		}
	}
	a.quiet(100 * time.Millisecond)
	for range 5 {
		if got := b.next(wait); got.Type != "order" || slices.Contains(mine, got.OrderNo) {
			t.Fatalf("user 2 got %+v", got)
		}
	}
	b.quiet(100 * time.Millisecond)
	if s := h.Stats(); s.EventsReceived != 10 || s.EventsMalformed != 0 {
		t.Fatalf("stats %+v", s)
	}
}
