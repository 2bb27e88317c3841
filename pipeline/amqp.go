package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/stampede-sh/stampede/order"
)

// Stampede's durable queues. The pay-timeout delay queue's name lives in
// package order (order.PayTimeoutDelayQueue) because the outbox rows that
// target it are written by persistence.
const (
	// QueueOrderCreated receives ORDER_CREATED events (order.RouteCreated);
	// the order-lock handler consumes it.
	QueueOrderCreated = "stampede.order.created"
	// QueueStockRelease receives status changes into CANCELLED and FAILED;
	// the stock-release handler consumes it and gives the Redis reservation back.
	QueueStockRelease = "stampede.stock.release"
	// QueueOrderClose receives delayed close messages (order.RoutePayTimeout)
	// once they expire in order.PayTimeoutDelayQueue; the order-close handler
	// consumes it.
	QueueOrderClose = "stampede.order.close"
	// QueuePayTimeoutDelay is order.PayTimeoutDelayQueue: no consumer; each
	// message carries a per-message TTL (Expiration) until its order's pay
	// deadline and is dead-lettered to order.EventsExchange with
	// order.RoutePayTimeout when it expires.
	QueuePayTimeoutDelay = order.PayTimeoutDelayQueue
)

// QueueType is the RabbitMQ type of Stampede's durable queues
// (STAMPEDE_AMQP_QUEUE_TYPE). The push service's exclusive per-instance
// queue is always classic: exclusive queues cannot be quorum queues.
type QueueType string

const (
	// QueueQuorum: replicated Raft queues, the production default. Work
	// queues get x-delivery-limit (see DeliveryLimit) and dead-letter to
	// QueueDLQ when a message exceeds it; every queue that dead-letters uses
	// at-least-once dead-lettering (x-dead-letter-strategy at-least-once,
	// x-overflow reject-publish), so an expired delay message is removed from
	// its delay queue only after its target queue confirmed it.
	QueueQuorum QueueType = "quorum"
	// QueueClassic: single-node classic queues, the topology of earlier
	// releases, unchanged (no delivery limit; at-most-once dead-lettering).
	// For development on one node.
	QueueClassic QueueType = "classic"
	// DefaultQueueType is the type used when none is configured.
	DefaultQueueType = QueueQuorum
)

// ParseQueueType parses "quorum" or "classic".
func ParseQueueType(s string) (QueueType, error) {
	switch t := QueueType(s); t {
	case QueueQuorum, QueueClassic:
		return t, nil
	}
	return "", fmt.Errorf("amqp queue type %q is neither quorum nor classic", s)
}

// DefaultMaxAttempts is ConsumerConfig.MaxAttempts's and
// TopologyConfig.MaxAttempts's default.
const DefaultMaxAttempts = 5

// DeliveryLimit is the x-delivery-limit of the quorum work queues for a
// consumer retry budget of maxAttempts deliveries: maxAttempts-1. RabbitMQ
// counts a delivery as failed when it comes back without an ack (a consumer
// channel or connection closed while holding it, or a nack with requeue) and
// dead-letters the message when a failed delivery takes the count past the
// limit, so a message is delivered at most maxAttempts times without ever
// being acked, like a message failing with transient errors. Ordinary
// retries go through the delay queues as new messages and do not count.
func DeliveryLimit(maxAttempts int) int { return max(maxAttempts-1, 0) }

// TopologyConfig says how DeclareTopology declares the queues. Zero fields
// take the documented default.
type TopologyConfig struct {
	// QueueType of every durable queue. Default DefaultQueueType (quorum).
	QueueType QueueType
	// MaxAttempts is the consumers' retry budget (ConsumerConfig.MaxAttempts,
	// STAMPEDE_CONSUMER_MAX_ATTEMPTS), 1…100; quorum work queues get
	// x-delivery-limit DeliveryLimit(MaxAttempts). Default 5.
	MaxAttempts int
}

func (t TopologyConfig) withDefaults() TopologyConfig {
	if t.QueueType == "" {
		t.QueueType = DefaultQueueType
	}
	if t.MaxAttempts == 0 {
		t.MaxAttempts = DefaultMaxAttempts
	}
	return t
}

// Validate reports an unknown queue type or a MaxAttempts outside 1…100.
func (t TopologyConfig) Validate() error {
	t = t.withDefaults()
	if _, err := ParseQueueType(string(t.QueueType)); err != nil {
		return fmt.Errorf("invalid config: %w", err)
	}
	if t.MaxAttempts < 1 || t.MaxAttempts > 100 {
		return fmt.Errorf("invalid config: topology max attempts %d not in 1…100", t.MaxAttempts)
	}
	return nil
}

// QueueSpec is one durable queue of Stampede's topology.
type QueueSpec struct {
	Name string
	// Bindings are routing keys binding the queue to order.EventsExchange.
	Bindings []string
	// Args are the queue's x-arguments (dead-lettering, TTL, queue type,
	// delivery limit). Changing them for an existing queue makes its
	// declaration fail with PRECONDITION_FAILED (see QueueMismatchError):
	// such a change needs a new queue name or a drained and deleted queue.
	Args amqp.Table
}

// quorumArgs returns the arguments every quorum queue of the topology
// carries, plus at-least-once dead-lettering to exchange/key when
// deadLetter (key "" keeps the message's own routing key).
func quorumArgs(deadLetter bool, exchange, key string) amqp.Table {
	a := amqp.Table{"x-queue-type": string(QueueQuorum)}
	if deadLetter {
		a["x-dead-letter-exchange"] = exchange
		if key != "" {
			a["x-dead-letter-routing-key"] = key
		}
		a["x-dead-letter-strategy"] = "at-least-once"
		a["x-overflow"] = "reject-publish"
	}
	return a
}

// Queues returns the queues Declare declares, in declaration order, with
// their arguments for t's queue type.
func (t TopologyConfig) Queues() []QueueSpec {
	t = t.withDefaults()
	work := func(name string, bindings ...string) QueueSpec {
		q := QueueSpec{Name: name, Bindings: bindings}
		if t.QueueType == QueueQuorum {
			q.Args = quorumArgs(true, "", QueueDLQ)
			q.Args["x-delivery-limit"] = int64(DeliveryLimit(t.MaxAttempts))
		}
		return q
	}
	delay := QueueSpec{Name: QueuePayTimeoutDelay, Args: amqp.Table{
		"x-dead-letter-exchange":    order.EventsExchange,
		"x-dead-letter-routing-key": order.RoutePayTimeout,
	}}
	dlq := QueueSpec{Name: QueueDLQ}
	if t.QueueType == QueueQuorum {
		delay.Args = quorumArgs(true, order.EventsExchange, order.RoutePayTimeout)
		dlq.Args = quorumArgs(false, "", "")
	}
	return append([]QueueSpec{
		work(QueueOrderCreated, order.RouteCreated),
		work(QueueStockRelease, order.RouteStatus(order.Cancelled), order.RouteStatus(order.Failed)),
		delay,
		work(QueueOrderClose, order.RoutePayTimeout),
		dlq,
	}, retryQueues(t.QueueType)...)
}

// Topology returns the queues DeclareTopology declares (the default
// TopologyConfig), in declaration order. Names and bindings are the same for
// every TopologyConfig; tests use the list to reset a vhost.
func Topology() []QueueSpec { return TopologyConfig{}.Queues() }

// DeclareTopology declares the default topology: TopologyConfig{}.Declare.
func DeclareTopology(ch *amqp.Channel) error { return TopologyConfig{}.Declare(ch) }

// Declare declares, all durable and idempotently: the topic exchange
// order.EventsExchange, every queue of t.Queues with its bindings, and the
// delay queues' fanout exchanges. It is safe to call from many processes at
// once. A queue that exists with other arguments (another type, another
// delivery limit) fails with a *QueueMismatchError and closes ch (RabbitMQ
// closes a channel on PRECONDITION_FAILED); Conn's default setup also tells
// which type the existing queue has.
func (t TopologyConfig) Declare(ch *amqp.Channel) error {
	t = t.withDefaults()
	if err := t.Validate(); err != nil {
		return err
	}
	if err := ch.ExchangeDeclare(order.EventsExchange, amqp.ExchangeTopic, true, false, false, false, nil); err != nil {
		return fmt.Errorf("topology: declare exchange %s: %w", order.EventsExchange, err)
	}
	for _, q := range t.Queues() {
		if _, err := ch.QueueDeclare(q.Name, true, false, false, false, q.Args); err != nil {
			return t.declareError(q.Name, err)
		}
		for _, key := range q.Bindings {
			if err := ch.QueueBind(q.Name, key, order.EventsExchange, false, nil); err != nil {
				return fmt.Errorf("topology: bind %s to %s: %w", q.Name, key, err)
			}
		}
	}
	return declareRetryExchanges(ch)
}

// declareOn runs Declare on a fresh channel of conn; on a QueueMismatchError
// whose existing type is unknown it redeclares that queue, on another fresh
// channel, as the other queue type (with the same settings otherwise) to
// find out which type it has. That probe changes nothing: it either
// succeeds as an idempotent redeclaration or fails.
func (t TopologyConfig) declareOn(conn *amqp.Connection) error {
	t = t.withDefaults()
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	err = t.Declare(ch)
	ch.Close()
	var mm *QueueMismatchError
	if !errors.As(err, &mm) || mm.Existing != "" {
		return err
	}
	other := t
	other.QueueType = QueueClassic
	if t.QueueType == QueueClassic {
		other.QueueType = QueueQuorum
	}
	for _, q := range other.Queues() {
		if q.Name != mm.Queue {
			continue
		}
		pch, perr := conn.Channel()
		if perr != nil {
			return err
		}
		if _, perr = pch.QueueDeclare(q.Name, true, false, false, false, q.Args); perr == nil {
			mm.Existing = other.QueueType
		} else if e := parseInequivalent(perr); e.arg == "x-queue-type" {
			mm.Existing = typeOf(e.current)
		}
		pch.Close()
	}
	return err
}

// QueueMismatchError is a queue declaration RabbitMQ refused with
// PRECONDITION_FAILED because the queue exists with other arguments: most
// often another queue type (a vhost that holds classic queues from an
// earlier run, and quorum configured, or the reverse), or another
// x-delivery-limit (STAMPEDE_CONSUMER_MAX_ATTEMPTS changed). A queue's
// arguments cannot change in place.
type QueueMismatchError struct {
	Queue string
	// Vhost is the queue's virtual host.
	Vhost string
	// Existing is the type the queue has, "" if unknown.
	Existing QueueType
	// Configured is the type Stampede declared it as.
	Configured QueueType
	// Arg is the first argument RabbitMQ found different, with the value
	// declared (Received) and the queue's (Current), as RabbitMQ wrote them
	// ("none" when absent).
	Arg, Received, Current string
	// Err is the broker's error.
	Err error
}

func (e *QueueMismatchError) Error() string {
	fix := fmt.Sprintf("stop every Stampede process, let the queue drain, delete it (`rabbitmqctl delete_queue -p %s %s`) and start again; or point STAMPEDE_AMQP_URL at a fresh vhost", e.Vhost, e.Queue)
	if e.Existing != "" && e.Existing != e.Configured {
		return fmt.Sprintf("topology: queue %s in vhost %s already exists as a %s queue, but the configured queue type is %s "+
			"(STAMPEDE_AMQP_QUEUE_TYPE / --amqp-queue-type); a queue cannot change its type. Either set STAMPEDE_AMQP_QUEUE_TYPE=%s, "+
			"or, to move to %s queues, %s (broker: %v)", e.Queue, e.Vhost, e.Existing, e.Configured, e.Existing, e.Configured, fix, e.Err)
	}
	hint := ""
	if e.Arg == "x-delivery-limit" {
		hint = " x-delivery-limit is STAMPEDE_CONSUMER_MAX_ATTEMPTS - 1: set STAMPEDE_CONSUMER_MAX_ATTEMPTS back to " +
			deliveryLimitAttempts(e.Current) + ", or"
	}
	return fmt.Sprintf("topology: queue %s in vhost %s exists with other arguments than the configured %s topology declares "+
		"(%s: declared %s, queue has %s).%s %s (broker: %v)", e.Queue, e.Vhost, e.Configured, e.Arg, e.Received, e.Current, hint, fix, e.Err)
}

func (e *QueueMismatchError) Unwrap() error { return e.Err }

func deliveryLimitAttempts(current string) string {
	var n int
	if _, err := fmt.Sscanf(strings.Trim(current, "'"), "%d", &n); err != nil {
		return "the value the queue was declared with"
	}
	return strconv.Itoa(n + 1)
}

// inequivalent is RabbitMQ's "inequivalent arg 'A' for queue 'Q' in vhost
// 'V': received R but current is C".
type inequivalent struct{ arg, vhost, received, current string }

var inequivalentRE = regexp.MustCompile(`inequivalent arg '([^']*)' for queue '[^']*' in vhost '([^']*)': received (.*) but current is (.*)$`)

func parseInequivalent(err error) inequivalent {
	var ae *amqp.Error
	if !errors.As(err, &ae) || ae.Code != amqp.PreconditionFailed {
		return inequivalent{}
	}
	m := inequivalentRE.FindStringSubmatch(ae.Reason)
	if m == nil {
		return inequivalent{}
	}
	return inequivalent{arg: m[1], vhost: m[2], received: shortValue(m[3]), current: shortValue(m[4])}
}

// shortValue turns "the value 'quorum' of type 'longstr'" into 'quorum'.
func shortValue(s string) string {
	if v, ok := strings.CutPrefix(s, "the value "); ok {
		if i := strings.LastIndex(v, " of type "); i >= 0 {
			return v[:i]
		}
		return v
	}
	return s
}

// typeOf maps an x-queue-type value as RabbitMQ prints it to a QueueType.
func typeOf(v string) QueueType {
	switch strings.Trim(v, "'") {
	case "none", "classic":
		return QueueClassic
	case "quorum":
		return QueueQuorum
	}
	return QueueType(strings.Trim(v, "'"))
}

// declareError wraps a failed QueueDeclare: a PRECONDITION_FAILED about
// inequivalent arguments becomes a *QueueMismatchError.
func (t TopologyConfig) declareError(queue string, err error) error {
	e := parseInequivalent(err)
	if e.arg == "" {
		return fmt.Errorf("topology: declare queue %s: %w", queue, err)
	}
	mm := &QueueMismatchError{Queue: queue, Vhost: e.vhost, Configured: t.QueueType, Arg: e.arg, Received: e.received, Current: e.current, Err: err}
	if e.arg == "x-queue-type" {
		mm.Existing = typeOf(e.current)
	}
	return mm
}

// mustRoute reports whether a message published to exchange with routing key
// must reach one of Stampede's durable queues. The relay publishes those with
// Mandatory=true and treats a basic.return as a failed publish (a missing
// queue or binding is a broken topology, not a delivered event). Other
// messages — status changes into WAITING_PAY or PAID, which only push
// instances listen to — are broadcasts: no listener is not a failure, so they
// are published without the mandatory flag and never end up DEAD for it.
func mustRoute(exchange, key string) bool {
	if exchange == "" { // the default exchange routes by queue name
		return true
	}
	if exchange != order.EventsExchange {
		return false
	}
	for _, q := range Topology() {
		if slices.Contains(q.Bindings, key) {
			return true
		}
	}
	return false
}

// ErrConnClosed is returned by Conn.Channel after Conn.Close.
var ErrConnClosed = errors.New("amqp: connection closed")

// ConnConfig configures a Conn.
type ConnConfig struct {
	// URL is the broker, amqp://user:pass@host:port/vhost, or the nodes of
	// a RabbitMQ cluster as a comma-separated list of such URLs (one per
	// node, same vhost and credentials): each dial tries them in turn,
	// starting with the one that worked last, so a connection lost with its
	// node is made again to another node. Default
	// "amqp://guest:guest@127.0.0.1:5672/" (SPEC §7).
	URL string
	// Name is shown as the connection name in the management UI. Default
	// "stampede-<hostname>-<pid>-<random>".
	Name string
	// Heartbeat is the AMQP heartbeat interval. Default 10s.
	Heartbeat time.Duration
	// DialTimeout bounds one TCP connect and handshake. Default 5s.
	DialTimeout time.Duration
	// MinBackoff and MaxBackoff bound the delay between dial attempts, which
	// doubles from MinBackoff up to MaxBackoff. Defaults 100ms and 10s.
	MinBackoff time.Duration
	MaxBackoff time.Duration
	// Topology is what the default setup declares after every dial.
	Topology TopologyConfig
	// Setup, if set, runs on a fresh channel after every successful dial,
	// before any user gets a channel, instead of declaring Topology; set it
	// to func(*amqp.Channel) error { return nil } to skip declaring.
	Setup func(ch *amqp.Channel) error
	// Logger receives reconnect warnings. Default slog.Default().
	Logger *slog.Logger
}

// DefaultAMQPURL is the broker used when none is configured (SPEC §7).
const DefaultAMQPURL = "amqp://guest:guest@127.0.0.1:5672/"

func (c *ConnConfig) setDefaults() {
	if c.URL == "" {
		c.URL = DefaultAMQPURL
	}
	if c.Name == "" {
		c.Name = "stampede-" + instanceName()
	}
	setDur(&c.Heartbeat, 10*time.Second)
	setDur(&c.DialTimeout, 5*time.Second)
	setDur(&c.MinBackoff, 100*time.Millisecond)
	setDur(&c.MaxBackoff, 10*time.Second)
	c.Topology = c.Topology.withDefaults()
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Validate reports the first invalid field.
func (c *ConnConfig) Validate() error {
	for _, u := range SplitAMQPURLs(c.URL) {
		if _, err := amqp.ParseURI(u); err != nil {
			return fmt.Errorf("invalid config: amqp url: %w", err)
		}
	}
	if c.Heartbeat < 0 || c.DialTimeout <= 0 {
		return fmt.Errorf("invalid config: amqp heartbeat %v / dial timeout %v", c.Heartbeat, c.DialTimeout)
	}
	if c.MinBackoff <= 0 || c.MaxBackoff < c.MinBackoff {
		return fmt.Errorf("invalid config: amqp backoff %v…%v", c.MinBackoff, c.MaxBackoff)
	}
	return c.Topology.Validate()
}

// Conn is a reconnecting AMQP connection. It dials lazily: Channel opens a
// channel on the current connection and, when that connection is gone (its
// NotifyClose fired) or was never made, redials with exponential backoff
// until it succeeds or the caller's ctx ends. Channels are not recovered: a
// user whose channel closes asks for a new one (and re-runs its own setup:
// Qos, Confirm, Consume). Safe for concurrent use; dials are serialised, so
// a broker outage costs one dial loop, not one per user.
//
// Give publishers and consumers separate Conns: RabbitMQ's flow control
// blocks a whole connection that publishes too fast.
type Conn struct {
	cfg ConnConfig
	log *slog.Logger
	sem chan struct{} // one slot: held while dialing or swapping conn

	mu       sync.Mutex
	conn     *amqp.Connection
	closeSig chan *amqp.Error // NotifyClose of conn
	closed   bool
	urls     []string // ConnConfig.URL split (SplitAMQPURLs)
	next     int      // index of the URL to dial first (the last that worked); dials are serialised by sem
}

// SplitAMQPURLs splits a comma-separated list of AMQP URLs (the nodes of a
// cluster), dropping empty items.
func SplitAMQPURLs(s string) []string {
	var out []string
	for _, u := range strings.Split(s, ",") {
		if u = strings.TrimSpace(u); u != "" {
			out = append(out, u)
		}
	}
	return out
}

// NewConn validates cfg; it does not dial.
func NewConn(cfg ConnConfig) (*Conn, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Conn{cfg: cfg, log: cfg.Logger, sem: make(chan struct{}, 1), urls: SplitAMQPURLs(cfg.URL)}, nil
}

// Channel returns a new channel, (re)dialing first if needed. It blocks with
// backoff while the broker is unreachable and returns ctx's error when ctx
// ends, ErrConnClosed after Close, or at once a *QueueMismatchError (wrapped)
// when the topology cannot be declared because a queue exists with other
// arguments.
func (c *Conn) Channel(ctx context.Context) (*amqp.Channel, error) {
	bo := newBackoff(c.cfg.MinBackoff, c.cfg.MaxBackoff)
	for attempt := 1; ; attempt++ {
		ch, err := c.channel(ctx)
		if err == nil {
			if attempt > 1 {
				c.log.Info("amqp: connected", "attempts", attempt)
			}
			return ch, nil
		}
		var mm *QueueMismatchError
		if errors.Is(err, ErrConnClosed) || ctx.Err() != nil || errors.As(err, &mm) {
			return nil, err // a mismatched queue is a configuration error: no retry
		}
		if attempt == 1 || attempt%10 == 0 {
			c.log.Warn("amqp: cannot open channel, retrying", "attempt", attempt, "err", err)
		}
		if !sleep(ctx, bo.next()) {
			return nil, ctx.Err()
		}
	}
}

func (c *Conn) channel(ctx context.Context) (*amqp.Channel, error) {
	select {
	case c.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-c.sem }()

	c.mu.Lock()
	closed, conn, sig := c.closed, c.conn, c.closeSig
	c.mu.Unlock()
	if closed {
		return nil, ErrConnClosed
	}
	if conn != nil {
		select {
		case e, ok := <-sig:
			if ok && e != nil {
				c.log.Warn("amqp: connection lost", "err", e)
			}
			conn = nil
		default:
			if conn.IsClosed() {
				conn = nil
			}
		}
	}
	if conn == nil {
		var err error
		if conn, sig, err = c.dial(); err != nil {
			return nil, err
		}
		c.mu.Lock()
		if c.closed { // Close ran while we dialed
			c.mu.Unlock()
			conn.Close()
			return nil, ErrConnClosed
		}
		c.conn, c.closeSig = conn, sig
		c.mu.Unlock()
	}
	ch, err := conn.Channel()
	if err != nil {
		// A connection that cannot open channels is of no use: drop it so
		// the next attempt redials.
		conn.Close()
		return nil, fmt.Errorf("amqp: open channel: %w", err)
	}
	return ch, nil
}

// dial connects to the first node of the URL list that answers, starting
// with the one that worked last, and sets it up.
func (c *Conn) dial() (*amqp.Connection, chan *amqp.Error, error) {
	props := amqp.NewConnectionProperties()
	props.SetClientConnectionName(c.cfg.Name)
	var conn *amqp.Connection
	var err error
	for i := range c.urls {
		k := (c.next + i) % len(c.urls)
		conn, err = amqp.DialConfig(c.urls[k], amqp.Config{
			Heartbeat:  c.cfg.Heartbeat,
			Properties: props,
			Dial:       amqp.DefaultDial(c.cfg.DialTimeout),
		})
		if err == nil {
			if k != c.next && len(c.urls) > 1 {
				c.log.Info("amqp: connected to another node", "url", redactURL(c.urls[k]))
			}
			c.next = k
			break
		}
		err = fmt.Errorf("amqp: dial %s: %w", redactURL(c.urls[k]), err)
	}
	if err != nil {
		c.next = (c.next + 1) % len(c.urls)
		return nil, nil, err
	}
	// Buffered: the library never blocks on a listener with room.
	sig := conn.NotifyClose(make(chan *amqp.Error, 1))
	if c.cfg.Setup == nil {
		err = c.cfg.Topology.declareOn(conn)
	} else {
		var ch *amqp.Channel
		if ch, err = conn.Channel(); err == nil {
			err = c.cfg.Setup(ch)
			ch.Close()
		}
	}
	if err != nil {
		conn.Close()
		return nil, nil, fmt.Errorf("amqp: setup: %w", err)
	}
	return conn, sig, nil
}

// Close closes the current connection (and with it every channel handed
// out); later Channel calls return ErrConnClosed.
func (c *Conn) Close() error {
	c.mu.Lock()
	conn := c.conn
	c.closed, c.conn = true, nil
	c.mu.Unlock()
	if conn != nil && !conn.IsClosed() {
		return conn.Close()
	}
	return nil
}

// redactURL drops the password from an AMQP URL for logs.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "<unparseable url>"
	}
	return u.Redacted()
}

func setDur(d *time.Duration, def time.Duration) {
	if *d == 0 {
		*d = def
	}
}
