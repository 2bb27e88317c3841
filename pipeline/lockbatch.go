package pipeline

import (
	"context"
	"errors"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/stampede-sh/stampede/order"
	"github.com/stampede-sh/stampede/persistence"
)

// lockItem is one delivery of an order-lock batch and what was decided for it.
type lockItem struct {
	d       amqp.Delivery
	attempt int
	ev      order.Event
	v       verdict
	err     error
}

// lockBatches is the order-lock handler of the batch design: it collects up
// to LockBatch deliveries (or what arrived within LockBatchWait of the first),
// applies them in one transaction (applyLockBatch) and settles them, then
// takes the next batch. One loop per channel, so the batch's closing multiple
// ack covers exactly the deliveries of that batch (the shape of river's
// jobcompleter: flush on size or time; on a failure split the batch).
func (c *Consumer) lockBatches(ctx context.Context, h handler, deliveries <-chan amqp.Delivery, pub *confirmPublisher) {
	st := &settler{bo: newBackoff(c.cfg.RetryBackoff, c.cfg.MaxRetryBackoff)}
	inFlight := c.m.inFlight.WithLabelValues(h.name)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	batch := make([]amqp.Delivery, 0, c.cfg.LockBatch)
	for {
		batch = batch[:0]
		select {
		case <-ctx.Done():
			return
		case d, ok := <-deliveries:
			if !ok {
				return
			}
			batch = append(batch, d)
		}
		timer.Reset(c.cfg.LockBatchWait)
	fill:
		for len(batch) < c.cfg.LockBatch {
			select {
			case d, ok := <-deliveries:
				if !ok {
					break fill // the channel closed: finish what is in hand (its acks fail; the broker redelivers)
				}
				batch = append(batch, d)
			case <-timer.C:
				break fill
			case <-ctx.Done():
				break fill
			}
		}
		timer.Stop()
		inFlight.Add(float64(len(batch)))
		if retried := c.applyLockBatch(ctx, h, batch, pub, st); retried {
			sleep(ctx, st.bo.next()) // once per batch, not per message
		}
		inFlight.Sub(float64(len(batch)))
	}
}

// applyLockBatch decodes the batch, applies its ORDER_CREATED events and
// settles every delivery: messages that are not acknowledged as applied
// (poison, retries) one by one through the ordinary retry and dead-letter
// path, then the rest with one multiple ack, after the commit. It reports
// whether a message went to a delay queue.
func (c *Consumer) applyLockBatch(ctx context.Context, h handler, batch []amqp.Delivery, pub *confirmPublisher, st *settler) (retried bool) {
	items := make([]lockItem, len(batch))
	todo := make([]int, 0, len(batch))
	for i, d := range batch {
		it := &items[i]
		it.d, it.attempt = d, attemptOf(d.Headers)
		ev, err := order.DecodeEvent(d.Body)
		it.ev = ev
		switch {
		case err != nil:
			it.v, it.err = discard, err
			continue
		case ev.Type != order.EventCreated:
			it.v, it.err = discard, fmt.Errorf("consumer: %s event on %s", ev.Type, QueueOrderCreated)
			continue
		}
		if c.TestSignals.BeforeHandle != nil {
			if err := c.TestSignals.BeforeHandle(h.name, ev, it.attempt); err != nil {
				it.v, it.err = retry, err
				if errors.Is(err, ErrPoison) {
					it.v = discard
				}
				continue
			}
		}
		todo = append(todo, i)
	}
	c.lockItems(ctx, h, items, todo)

	var last *amqp.Delivery // highest delivery tag to ack
	n := 0
	for i := range items {
		it := &items[i]
		pending, r := c.settle(ctx, h, it.d, it.v, it.ev, it.err, it.attempt, pub, st, false)
		retried = retried || r
		if pending {
			n++
			if last == nil || it.d.DeliveryTag > last.DeliveryTag {
				last = &it.d
			}
		}
	}
	if last == nil {
		return retried
	}
	if err := last.Ack(true); err != nil {
		// The channel is gone: the batch is redelivered and the consume
		// log makes its second application a no-op.
		c.log.Debug("consumer: batch ack failed", "handler", h.name, "messages", n, "err", err)
		return retried
	}
	return retried
}

// lockItems applies the events of items[idx] in one transaction and records
// each one's verdict. A transaction that fails with an error other than an
// outage is split in two and each half applied on its own, down to single
// messages, whose error then takes the ordinary path (classify): one bad
// message never holds the others back. An outage (MySQL unreachable, the
// breaker open, the handle timeout) fails the whole batch into the delay
// queues at once: splitting would only repeat the failure.
func (c *Consumer) lockItems(ctx context.Context, h handler, items []lockItem, idx []int) {
	if len(idx) == 0 {
		return
	}
	events := make([]persistence.LockEvent, len(idx))
	for k, i := range idx {
		events[k] = persistence.LockEvent{EventID: items[i].ev.EventID, OrderNo: items[i].ev.OrderNo}
	}
	hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.HandleTimeout)
	var results []persistence.LockResult
	var lerr error
	err := guard(c.breakers[h.name], func() error {
		results, lerr = c.store.LockStockBatch(hctx, ConsumerOrderLock, events, c.cfg.PayTimeout)
		if v, _ := classify(lerr); v == retry {
			return lerr // the dependency failed: counts for the breaker
		}
		return nil
	})
	cancel()
	all := func(v verdict, err error) {
		for _, i := range idx {
			items[i].v, items[i].err = v, err
		}
	}
	switch {
	case isBreakerRejection(err):
		all(retry, err)
	case lerr == nil:
		c.m.lockBatch.Observe(float64(len(idx)))
		if c.TestSignals.AfterLockCommit != nil {
			c.TestSignals.AfterLockCommit(len(idx))
		}
		var moved []persistence.Order
		for _, r := range results {
			if r.Outcome == persistence.LockLocked || r.Outcome == persistence.LockFailed {
				moved = append(moved, r.Order)
			}
		}
		if len(moved) > 0 {
			// Replays answer the new status from Redis (statuscache.go);
			// a failure only leaves them one status behind.
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.HandleTimeout)
			_ = CacheStatuses(sctx, c.rdb, moved, c.log)
			cancel()
		}
		for k, i := range idx {
			r := results[k]
			switch {
			case r.Err != nil:
				items[i].v, items[i].err = classify(r.Err)
			case r.Outcome == persistence.LockDuplicate:
				items[i].v = ackDuplicate
			case r.Outcome == persistence.LockSkipped:
				items[i].v = ackSkipped
			default:
				items[i].v = ack
			}
		}
	case len(idx) == 1:
		items[idx[0]].v, items[idx[0]].err = classify(lerr)
	case isOutage(lerr):
		all(retry, lerr)
	default:
		c.m.lockSplits.Inc()
		c.log.Warn("consumer: order-lock batch failed, splitting it to isolate the failing message",
			"messages", len(idx), "err", lerr)
		mid := len(idx) / 2
		c.lockItems(ctx, h, items, idx[:mid])
		c.lockItems(ctx, h, items, idx[mid:])
	}
}
