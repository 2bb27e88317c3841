package pipeline_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/stampede-sh/stampede/order"
	"github.com/stampede-sh/stampede/pipeline"
	"github.com/stampede-sh/stampede/pipeline/pipelinetest"
)

// TestAMQPThroughput measures classic against quorum queues on this machine:
// raw publishes with publisher confirms at a few confirm windows, raw
// consumption with manual acks at a few prefetch values, the real relay
// (outbox rows → confirmed → SENT) and the real order-lock consumer. It
// only runs with STAMPEDE_AMQP_PERF=1 (about two minutes) and prints its
// table with t.Log; docs/architecture.md ("Queue types, delivery limits, confirms and prefetch") quotes it.
//
//	STAMPEDE_AMQP_PERF=1 go test -count=1 -run TestAMQPThroughput -v ./pipeline/
func TestAMQPThroughput(t *testing.T) {
	if os.Getenv("STAMPEDE_AMQP_PERF") != "1" {
		t.Skip("set STAMPEDE_AMQP_PERF=1 to measure")
	}
	var rows []string
	add := func(format string, args ...any) {
		rows = append(rows, fmt.Sprintf(format, args...))
		t.Log(rows[len(rows)-1])
	}
	body := []byte(`{"eventId":"created:0385501083637673984001","type":"ORDER_CREATED","orderNo":"0385501083637673984001","userId":123456,"productId":42,"quantity":1,"amount":1999,"status":"PROCESSING","version":1,"occurredAt":"2026-11-29T18:43:48.342Z"}`)
	const n = 20000
	for _, qt := range []pipeline.QueueType{pipeline.QueueClassic, pipeline.QueueQuorum} {
		url := pipelinetest.Vhost(t, "perf")
		if err := declareWith(t, url, pipeline.TopologyConfig{QueueType: qt}); err != nil {
			t.Fatal(err)
		}
		for _, window := range []int{1, 100, 500, 2000} {
			rate := rawPublish(t, url, body, n, window)
			add("%-7s raw publish, confirm window %4d: %7.0f msg/s", qt, window, rate)
		}
		for _, prefetch := range []int{16, 64, 256} {
			fill(t, url, body, n)
			rate := rawConsume(t, url, n, prefetch, 8)
			add("%-7s raw consume, prefetch %3d, 8 workers, ack each: %7.0f msg/s", qt, prefetch, rate)
		}
	}
	for _, qt := range []pipeline.QueueType{pipeline.QueueClassic, pipeline.QueueQuorum} {
		for _, batch := range []int{100, 500, 2000} {
			rate := relayRate(t, qt, batch, 10000)
			add("%-7s relay (MySQL claim + publish + confirms + MarkSent), batch %4d: %6.0f rows/s", qt, batch, rate)
		}
	}
	for _, qt := range []pipeline.QueueType{pipeline.QueueClassic, pipeline.QueueQuorum} {
		for _, prefetch := range []int{16, 64, 256} {
			rate := lockRate(t, qt, prefetch, 3000)
			add("%-7s order-lock consumer (MySQL lock tx per message), prefetch %3d, 8 workers: %5.0f orders/s", qt, prefetch, rate)
		}
	}
	t.Log("\n" + strings.Join(rows, "\n"))
}

// rawPublish publishes n persistent messages to the order-created queue,
// waiting for all confirms of every window of messages, and returns msg/s.
func rawPublish(t *testing.T, url string, body []byte, n, window int) float64 {
	ch := rawChannel(t, url)
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	start := time.Now()
	for sent := 0; sent < n; {
		dcs := make([]*amqp.DeferredConfirmation, 0, window)
		for i := 0; i < window && sent < n; i++ {
			dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", pipeline.QueueOrderCreated, false, false,
				amqp.Publishing{DeliveryMode: amqp.Persistent, ContentType: "application/json", Body: body})
			if err != nil {
				t.Fatal(err)
			}
			dcs = append(dcs, dc)
			sent++
		}
		for _, dc := range dcs {
			if ok, err := dc.WaitContext(ctx); !ok || err != nil {
				t.Fatalf("confirm: %v %v", ok, err)
			}
		}
	}
	rate := float64(n) / time.Since(start).Seconds()
	if _, err := ch.QueuePurge(pipeline.QueueOrderCreated, false); err != nil {
		t.Fatal(err)
	}
	return rate
}

// fill puts n messages in the order-created queue.
func fill(t *testing.T, url string, body []byte, n int) {
	ch := rawChannel(t, url)
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	var last *amqp.DeferredConfirmation
	for range n {
		dc, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), "", pipeline.QueueOrderCreated, false, false,
			amqp.Publishing{DeliveryMode: amqp.Persistent, Body: body})
		if err != nil {
			t.Fatal(err)
		}
		last = dc
	}
	if ok, err := last.WaitContext(context.Background()); !ok || err != nil {
		t.Fatal(ok, err)
	}
	pipelinetest.WaitFor(t, 10*time.Second, "queue filled", func() (bool, string) {
		d := pipelinetest.QueueDepth(t, url, pipeline.QueueOrderCreated)
		return d >= n, fmt.Sprint(d)
	})
}

// rawConsume consumes n messages with the given prefetch and workers, each
// worker acking every message on its own, and returns msg/s.
func rawConsume(t *testing.T, url string, n, prefetch, workers int) float64 {
	ch := rawChannel(t, url)
	if err := ch.Qos(prefetch, 0, false); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	ds, err := ch.Consume(pipeline.QueueOrderCreated, "perf", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	var got atomic.Int64
	done := make(chan struct{})
	var once sync.Once
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				select {
				case d := <-ds:
					_ = d.Ack(false)
					if got.Add(1) == int64(n) {
						once.Do(func() { close(done) })
					}
				case <-done:
					return
				}
			}
		})
	}
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		t.Fatalf("consumed %d of %d", got.Load(), n)
	}
	el := time.Since(start)
	wg.Wait()
	ch.Cancel("perf", false)
	return float64(n) / el.Seconds()
}

// relayRate measures the real relay over rows outbox rows.
func relayRate(t *testing.T, qt pipeline.QueueType, batch, rows int) float64 {
	var rate float64
	t.Run(fmt.Sprintf("relay-%s-%d", qt, batch), func(t *testing.T) {
		e := newEnvType(t, qt)
		e.declare()
		for i := 0; i < rows; i += 1000 {
			e.appendOutbox(fmt.Sprintf("perf%d", i), 1000, order.EventsExchange, order.RouteCreated)
		}
		r := e.relay(pipeline.RelayConfig{BatchSize: batch, PollInterval: 5 * time.Millisecond})
		start := time.Now()
		run(t, "relay", r.Run)
		pipelinetest.WaitFor(t, 2*time.Minute, "all sent", func() (bool, string) {
			st := e.relayStats(r)
			return st.Sent == int64(rows), fmt.Sprintf("%+v", st)
		})
		rate = float64(rows) / time.Since(start).Seconds()
	})
	return rate
}

// lockRate measures the real order-lock consumer over orders messages
// already waiting in its queue.
func lockRate(t *testing.T, qt pipeline.QueueType, prefetch, orders int) float64 {
	var rate float64
	t.Run(fmt.Sprintf("lock-%s-%d", qt, prefetch), func(t *testing.T) {
		e := newEnvType(t, qt)
		e.declare()
		p, k := e.product(int64(orders), int64(orders))
		e.reserve(p, k, 1, orders, 1)
		w := e.writer(pipeline.WriterConfig{BatchWait: 5 * time.Millisecond})
		stopW := run(t, "writer", w.Run)
		r := e.relay(pipeline.RelayConfig{})
		stopR := run(t, "relay", r.Run)
		pipelinetest.WaitFor(t, 2*time.Minute, "events queued", func() (bool, string) {
			d := pipelinetest.QueueDepth(t, e.amqpURL, pipeline.QueueOrderCreated)
			return d == orders, fmt.Sprint(d)
		})
		stopW()
		stopR()
		c := e.consumer(pipeline.ConsumerConfig{Prefetch: prefetch, PayTimeout: time.Hour})
		start := time.Now()
		run(t, "consumer", c.Run)
		pipelinetest.WaitFor(t, 5*time.Minute, "all locked", func() (bool, string) {
			n := e.consumerStats(c).Acked
			return n >= int64(orders), fmt.Sprint(n)
		})
		rate = float64(orders) / time.Since(start).Seconds()
	})
	return rate
}
