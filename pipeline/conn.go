package pipeline

// Conn: one reconnecting AMQP connection, its configuration and its channels.
// The topology it declares on every (re)dial is topology.go's.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// ErrConnClosed is returned by Conn.Channel after Conn.Close.
var ErrConnClosed = errors.New("amqp: connection closed")

// ConnConfig configures a Conn.
type ConnConfig struct {
	// URL is the broker, amqp://user:pass@host:port/vhost, or the nodes of
	// a RabbitMQ cluster as a comma-separated list of such URLs (one per
	// node, same vhost and credentials): each dial tries them in turn,
	// starting with the one that worked last, so a connection lost with its
	// node is made again to another node. Default
	// "amqp://guest:guest@127.0.0.1:5672/" (docs/spec.md §7).
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
	// Health receives the broker's connection.blocked and unblocked notices
	// of this connection (share one per process: NewBrokerHealth). Default:
	// a private one.
	Health *BrokerHealth
}

// DefaultAMQPURL is the broker used when none is configured (docs/spec.md §7).
const DefaultAMQPURL = "amqp://guest:guest@127.0.0.1:5672/"

func (c *ConnConfig) setDefaults() {
	c.URL = cmp.Or(c.URL, DefaultAMQPURL)
	c.Name = cmp.Or(c.Name, "stampede-"+instanceName())
	c.Heartbeat = cmp.Or(c.Heartbeat, 10*time.Second)
	c.DialTimeout = cmp.Or(c.DialTimeout, 5*time.Second)
	c.MinBackoff = cmp.Or(c.MinBackoff, 100*time.Millisecond)
	c.MaxBackoff = cmp.Or(c.MaxBackoff, 10*time.Second)
	c.Topology = c.Topology.withDefaults()
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	c.Health = orNewHealth(c.Health, c.Logger, nil)
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
	gen      int      // connections dialed so far (the key of each in Health); dials are serialised by sem
	key      string   // Health key of conn
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
	cfg.Health.track(cfg.Name)
	return &Conn{cfg: cfg, log: cfg.Logger, sem: make(chan struct{}, 1), urls: SplitAMQPURLs(cfg.URL)}, nil
}

// Channel returns a new channel, (re)dialing first if needed. It blocks with
// backoff while the broker is unreachable and returns ctx's error when ctx
// ends, ErrConnClosed after Close, or at once a *QueueMismatchError (wrapped)
// when the topology cannot be declared because a queue exists with other
// arguments, or a *VhostDeploymentError (wrapped) when the vhost belongs to
// another deployment (TopologyConfig.Deployment).
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
		if errors.Is(err, ErrConnClosed) || ctx.Err() != nil || errors.As(err, &mm) || errors.Is(err, ErrVhostDeployment) {
			return nil, err // a mismatched queue or another deployment's vhost is a configuration error: no retry
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
	c.gen++
	key := fmt.Sprintf("%s#%d", c.cfg.Name, c.gen)
	blocks := conn.NotifyBlocked(make(chan amqp.Blocking, 4))
	go func() {
		// Closed by the library when the connection ends: a connection
		// that is gone blocks nothing any more.
		for b := range blocks {
			c.cfg.Health.setBlocked(key, c.cfg.Name, b.Active, b.Reason)
		}
		c.cfg.Health.connEnded(key, c.cfg.Name)
	}()
	c.mu.Lock()
	c.key = key
	c.mu.Unlock()
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

// closeWait bounds the wait for the broker's answer to a connection or
// channel close: a broker that blocks publishers (a resource alarm) reads
// nothing from a blocked connection, so its answer would come only when the
// alarm ends.
const closeWait = 2 * time.Second

// Close closes the current connection (and with it every channel handed
// out), waiting at most closeWait for the broker's answer; later Channel
// calls return ErrConnClosed.
func (c *Conn) Close() error {
	c.mu.Lock()
	conn := c.conn
	c.closed, c.conn = true, nil
	c.mu.Unlock()
	if conn != nil && !conn.IsClosed() {
		return conn.CloseDeadline(time.Now().Add(closeWait))
	}
	return nil
}

// Drop closes the current connection without waiting for the broker more
// than closeWait (its channels end with it); the next Channel call dials a
// new one. For a connection the broker stopped answering.
func (c *Conn) Drop() {
	c.mu.Lock()
	conn := c.conn
	c.mu.Unlock()
	if conn != nil && !conn.IsClosed() {
		_ = conn.CloseDeadline(time.Now().Add(closeWait)) // the connection is gone either way
	}
}

// Blocked reports whether the broker blocks the current connection's
// publishes (connection.blocked); while it does, every method on the
// connection waits, a channel open or close included.
func (c *Conn) Blocked() bool {
	c.mu.Lock()
	key, conn := c.key, c.conn
	c.mu.Unlock()
	return conn != nil && c.cfg.Health.connBlocked(key)
}

// Health is the BrokerHealth this Conn reports to.
func (c *Conn) Health() *BrokerHealth { return c.cfg.Health }

// closeChannel closes ch without waiting for the broker more than wait: the
// close goes on in the background (it ends when the broker answers or the
// connection ends). It reports whether the close finished in time.
func closeChannel(ch *amqp.Channel, wait time.Duration) bool {
	done := make(chan struct{})
	go func() {
		_ = ch.Close() // the channel is given up whatever the broker says
		close(done)
	}()
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}

// redactURL drops the password from an AMQP URL for logs.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "<unparseable url>"
	}
	return u.Redacted()
}
