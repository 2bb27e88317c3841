package push

import (
	"errors"
	"fmt"
	"path"
	"time"

	"github.com/stampede-sh/stampede/order"
)

// Config configures a Hub. The zero value of every field means "use the
// default"; New calls setDefaults and Validate.
type Config struct {
	// Addr is the TCP address Run listens on. Default "127.0.0.1:8081".
	Addr string

	// Exchange is the topic exchange the status events are published to; the
	// hub declares it (durable, idempotently) and binds its queue to it with
	// RoutingKey. Default order.EventsExchange.
	Exchange string
	// RoutingKey selects the status events. Default "order.status.*".
	RoutingKey string

	// SendBuffer is the number of messages queued per socket; a socket whose
	// buffer is full is disconnected with 1008 as a slow consumer. Default 64.
	SendBuffer int
	// PingInterval is how long a socket may go without a message before it
	// gets a WebSocket ping; one that does not answer within WriteTimeout is
	// closed (writer.go: a socket that is sent messages needs no pings).
	// Default 20s.
	PingInterval time.Duration
	// WriteTimeout bounds one write (and one ping round trip) on a socket.
	// Default 5s.
	WriteTimeout time.Duration
	// ProductThrottle is the shortest interval between two product messages
	// for one product; updates in between are merged, the latest value wins.
	// Default 250ms.
	ProductThrottle time.Duration

	// SnapshotOrders is how many of the user's most recent orders are sent as
	// snapshots on connect. Default 20.
	SnapshotOrders int
	// SnapshotTimeout bounds one Snapshotter call. Default 5s.
	SnapshotTimeout time.Duration
	// MaxSubscriptions is how many subscribed orders a socket remembers for
	// re-sending snapshots after a RabbitMQ reconnection; older ones are
	// forgotten (their events still arrive). Default 64.
	MaxSubscriptions int
	// ResyncConcurrency bounds the parallel snapshot loads after a RabbitMQ
	// reconnection. Default 8.
	ResyncConcurrency int

	// AllowedOrigins are the Origin host patterns (path.Match syntax, matched
	// against the Origin's host[:port], e.g. "shop.example.com",
	// "*.example.com" or "shop.example.com:8443"; "*" allows every origin)
	// allowed to open sockets; a browser page of another origin gets 403
	// before the upgrade. Empty (the default): only the page's own host — the
	// Origin's host name must equal the request's Host name (any port: the
	// gateway serves the client on another port than push). Requests without
	// an Origin header (not from a browser) are not refused: they carry an
	// explicit bearer token, never an ambient cookie.
	AllowedOrigins []string

	// MaxSocketsPerUser caps the open sockets of one user on this hub: a
	// socket over the cap closes the user's oldest one with
	// StatusTooManySockets (4429). Default 8; -1: no cap.
	MaxSocketsPerUser int

	// HandshakeUserRate is how many sockets per second one user may open
	// (a token bucket of ten seconds' worth), checked after the token and
	// before any database read: a handshake over it is closed with 1013
	// (try again later). Default 1; negative: no limit.
	HandshakeUserRate float64
	// HandshakeAddrRate is how many handshakes per second one client
	// address may start (a bucket of ten seconds' worth), checked before the
	// token is: over it, 429 with Retry-After before the upgrade. Loopback
	// peers are not limited (a proxy on the same host shows every client
	// as loopback: limit at the proxy). Default 10; negative: no limit.
	HandshakeAddrRate float64

	// KeyCheckInterval is how often an open socket checks that the key its
	// token was verified with is still in the provider's key set (as last
	// fetched); one that left it closes the socket with 4401. Default 5s.
	KeyCheckInterval time.Duration

	// MaxHeaderBytes bounds the request headers of a socket's handshake
	// (net/http's MaxHeaderBytes; larger ones get 431). Default 4096, as
	// the gateway's.
	MaxHeaderBytes int

	// ReconnectMin and ReconnectMax bound the exponential backoff (with
	// jitter) between attempts to reconnect to RabbitMQ. Defaults 100ms, 10s.
	ReconnectMin time.Duration
	ReconnectMax time.Duration
	// ShutdownTimeout bounds the graceful shutdown of Run and Serve. Default 10s.
	ShutdownTimeout time.Duration

	// Lines reads waiting-room tickets for {"type":"queue"} subscriptions
	// (line.go). nil: such subscriptions are refused.
	Lines LineReader
}

func (c *Config) setDefaults() {
	if c.Addr == "" {
		c.Addr = "127.0.0.1:8081"
	}
	if c.Exchange == "" {
		c.Exchange = order.EventsExchange
	}
	if c.RoutingKey == "" {
		c.RoutingKey = "order.status.*"
	}
	if c.SendBuffer == 0 {
		c.SendBuffer = 64
	}
	if c.PingInterval == 0 {
		c.PingInterval = 20 * time.Second
	}
	if c.WriteTimeout == 0 {
		c.WriteTimeout = 5 * time.Second
	}
	if c.ProductThrottle == 0 {
		c.ProductThrottle = 250 * time.Millisecond
	}
	if c.SnapshotOrders == 0 {
		c.SnapshotOrders = 20
	}
	if c.SnapshotTimeout == 0 {
		c.SnapshotTimeout = 5 * time.Second
	}
	if c.MaxSubscriptions == 0 {
		c.MaxSubscriptions = 64
	}
	if c.ResyncConcurrency == 0 {
		c.ResyncConcurrency = 8
	}
	if c.MaxSocketsPerUser == 0 {
		c.MaxSocketsPerUser = 8
	}
	if c.HandshakeUserRate == 0 {
		c.HandshakeUserRate = 1
	}
	if c.HandshakeAddrRate == 0 {
		c.HandshakeAddrRate = 10
	}
	if c.KeyCheckInterval == 0 {
		c.KeyCheckInterval = 5 * time.Second
	}
	if c.MaxHeaderBytes == 0 {
		c.MaxHeaderBytes = 4096
	}
	if c.ReconnectMin == 0 {
		c.ReconnectMin = 100 * time.Millisecond
	}
	if c.ReconnectMax == 0 {
		c.ReconnectMax = 10 * time.Second
	}
	if c.ShutdownTimeout == 0 {
		c.ShutdownTimeout = 10 * time.Second
	}
}

// Validate reports the first invalid setting as "invalid config: ...".
func (c *Config) Validate() error {
	var errs []error
	if c.SendBuffer < 1 {
		errs = append(errs, fmt.Errorf("SendBuffer %d < 1", c.SendBuffer))
	}
	for name, d := range map[string]time.Duration{
		"PingInterval": c.PingInterval, "WriteTimeout": c.WriteTimeout, "ProductThrottle": c.ProductThrottle,
		"SnapshotTimeout": c.SnapshotTimeout, "ReconnectMin": c.ReconnectMin, "ReconnectMax": c.ReconnectMax,
		"ShutdownTimeout": c.ShutdownTimeout, "KeyCheckInterval": c.KeyCheckInterval,
	} {
		if d < 0 {
			errs = append(errs, fmt.Errorf("%s %v < 0", name, d))
		}
	}
	if c.ReconnectMax < c.ReconnectMin {
		errs = append(errs, fmt.Errorf("ReconnectMax %v < ReconnectMin %v", c.ReconnectMax, c.ReconnectMin))
	}
	if c.SnapshotOrders < 0 || c.SnapshotOrders > 1000 {
		errs = append(errs, fmt.Errorf("SnapshotOrders %d not in 0..1000", c.SnapshotOrders))
	}
	if c.MaxSubscriptions < 0 {
		errs = append(errs, fmt.Errorf("MaxSubscriptions %d < 0", c.MaxSubscriptions))
	}
	if c.MaxSocketsPerUser < -1 {
		errs = append(errs, fmt.Errorf("MaxSocketsPerUser %d < -1", c.MaxSocketsPerUser))
	}
	if c.MaxHeaderBytes < 1024 {
		errs = append(errs, fmt.Errorf("MaxHeaderBytes %d < 1024", c.MaxHeaderBytes))
	}
	for _, p := range c.AllowedOrigins {
		if _, err := path.Match(p, ""); err != nil || p == "" {
			errs = append(errs, fmt.Errorf("AllowedOrigins pattern %q is malformed", p))
		}
	}
	if c.ResyncConcurrency < 1 {
		errs = append(errs, fmt.Errorf("ResyncConcurrency %d < 1", c.ResyncConcurrency))
	}
	if len(errs) > 0 {
		return fmt.Errorf("invalid config: push: %w", errors.Join(errs...))
	}
	return nil
}
