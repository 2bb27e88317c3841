package push

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/stampede-sh/stampede/order"
)

// Consume keeps a consumer of status events bound until ctx is cancelled,
// reconnecting with exponential backoff (ReconnectMin…ReconnectMax, with
// jitter) whenever the connection or channel drops, and re-sending snapshots
// to every socket after each (re)connection. It returns at once for a hub
// without an AMQP URL. Serve runs it; call it only when serving Handler on
// another server.
func (h *Hub) Consume(ctx context.Context) {
	if h.amqpURL == "" {
		return
	}
	backoff := h.cfg.ReconnectMin
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			h.stats.reconnects.Add(1)
		}
		started := time.Now()
		err := h.consumeOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		if time.Since(started) > 30*time.Second {
			backoff = h.cfg.ReconnectMin // it had been working: retry fast
		}
		wait := backoff/2 + rand.N(backoff/2+1)
		h.log.Warn("status events consumer stopped; reconnecting", "err", err, "in", wait)
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		backoff = min(2*backoff, h.cfg.ReconnectMax)
	}
}

// consumeOnce connects, declares the topology, resyncs the sockets and
// dispatches deliveries until the connection fails or ctx is cancelled.
func (h *Hub) consumeOnce(ctx context.Context) error {
	props := amqp.NewConnectionProperties()
	host, _ := os.Hostname()
	props.SetClientConnectionName(fmt.Sprintf("stampede-push@%s/%d", host, os.Getpid()))
	// A comma-separated list is the nodes of a cluster: the first that
	// answers, starting after the one of the last failure.
	var conn *amqp.Connection
	var err error
	urls := strings.Split(h.amqpURL, ",")
	for i := range urls {
		u := strings.TrimSpace(urls[(h.urlNext+i)%len(urls)])
		if conn, err = amqp.DialConfig(u, amqp.Config{
			Heartbeat:  10 * time.Second,
			Properties: props,
			Dial:       amqp.DefaultDial(5 * time.Second),
		}); err == nil {
			break
		}
	}
	if err != nil {
		h.urlNext++
		return fmt.Errorf("push: dial rabbitmq: %w", err)
	}
	defer func() { h.urlNext++ }() // the connection ended: the next dial starts with another node
	defer conn.Close()
	connClosed := conn.NotifyClose(make(chan *amqp.Error, 1))
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("push: open channel: %w", err)
	}
	if err := ch.ExchangeDeclare(h.cfg.Exchange, amqp.ExchangeTopic, true, false, false, false, nil); err != nil {
		return fmt.Errorf("push: declare exchange %s: %w", h.cfg.Exchange, err)
	}
	// Exclusive + auto-delete + server-named: one queue per push instance,
	// gone with its connection. Events missed while it is gone are covered by
	// the resync below.
	q, err := ch.QueueDeclare("", false, true, true, false, nil)
	if err != nil {
		return fmt.Errorf("push: declare queue: %w", err)
	}
	if err := ch.QueueBind(q.Name, h.cfg.RoutingKey, h.cfg.Exchange, false, nil); err != nil {
		return fmt.Errorf("push: bind queue: %w", err)
	}
	// Auto-ack: dispatch never blocks, and a lost event costs nothing that
	// the snapshots do not repair.
	deliveries, err := ch.Consume(q.Name, "", true, true, false, false, nil)
	if err != nil {
		return fmt.Errorf("push: consume: %w", err)
	}
	h.consuming.Store(true)
	defer h.consuming.Store(false)
	h.log.Info("consuming status events", "exchange", h.cfg.Exchange, "queue", q.Name)
	h.resyncAll()

	for {
		select {
		case <-ctx.Done():
			return nil
		case d, ok := <-deliveries:
			if !ok {
				select {
				case e := <-connClosed:
					if e != nil {
						return fmt.Errorf("push: connection closed: %w", e)
					}
				default:
				}
				return errors.New("push: deliveries channel closed")
			}
			h.handleDelivery(d.Body)
		}
	}
}

// handleDelivery decodes a status event, or a batch of them
// (order.EventStatusBatch), and dispatches each.
func (h *Hub) handleDelivery(body []byte) {
	e, err := order.DecodeEvent(body)
	if err == nil && e.Type == order.EventStatusBatch {
		for _, x := range e.Events { // DecodeEvent checked each
			h.stats.received.Add(1)
			h.dispatch(x)
		}
		return
	}
	if err != nil || e.Type != order.EventStatusChanged || e.UserID <= 0 {
		h.stats.malformed.Add(1)
		h.log.Debug("dropping message that is not a status event", "err", err)
		return
	}
	h.stats.received.Add(1)
	h.dispatch(e)
}

// resyncAll re-sends snapshots to every open socket, at most
// ResyncConcurrency loads at a time.
func (h *Hub) resyncAll() {
	conns := h.conns()
	if len(conns) == 0 {
		return
	}
	h.spawn(func() {
		sem := make(chan struct{}, h.cfg.ResyncConcurrency)
		for _, c := range conns {
			select {
			case sem <- struct{}{}:
			case <-h.ctx.Done():
				return
			}
			if !h.spawn(func() { defer func() { <-sem }(); c.resync() }) {
				return
			}
		}
	})
}
