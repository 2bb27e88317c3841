package pipeline_test

import (
	"context"
	"errors"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/stampede-sh/stampede/order"
	"github.com/stampede-sh/stampede/pipeline"
	"github.com/stampede-sh/stampede/pipeline/pipelinetest"
)

// Two deployments on one vhost: the first to declare its topology owns the
// vhost (the marker queue carries its identity); the second's declaration is
// refused at once, naming both identities, and changes nothing — so its
// consumers never take the first one's events. The owner declares again
// without trouble, and after the marker is deleted (the documented way to
// hand a vhost over) the second deployment may claim it.
func TestSecondDeploymentOnVhostRefused(t *testing.T) {
	url := pipelinetest.Vhost(t, "deployment")
	ch := rawChannel(t, url)
	if _, err := ch.QueueDelete(pipeline.QueueDeployment, false, false, false); err != nil {
		t.Fatal(err)
	}
	const a, b = "11111111-aaaa-4aaa-8aaa-aaaaaaaaaaaa", "22222222-bbbb-4bbb-8bbb-bbbbbbbbbbbb"
	if err := declareWith(t, url, pipeline.TopologyConfig{Deployment: a}); err != nil {
		t.Fatalf("first deployment: %v", err)
	}
	start := time.Now()
	err := declareWith(t, url, pipeline.TopologyConfig{Deployment: b})
	var de *pipeline.VhostDeploymentError
	if !errors.As(err, &de) || !errors.Is(err, pipeline.ErrVhostDeployment) || de.Theirs != a || de.Ours != b || de.Vhost != pipelinetest.VhostName(t, "deployment") {
		t.Fatalf("second deployment: %v (%+v), want a refusal naming %s", err, de, a)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("refusal took %s: it must not be retried", d)
	}
	t.Logf("refusal: %v", err)
	if err := declareWith(t, url, pipeline.TopologyConfig{Deployment: a}); err != nil {
		t.Fatalf("first deployment again: %v", err)
	}
	// The refused deployment's consumer gets no channel, so it takes none of
	// the owner's events: a release event published now stays queued.
	c, err := pipeline.NewConn(pipeline.ConnConfig{URL: url, Topology: pipeline.TopologyConfig{Deployment: b}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cons, err := pipeline.NewConsumer(nil, nil, c, pipeline.ConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- cons.Run(ctx) }()
	pch := rawChannel(t, url)
	if err := pch.PublishWithContext(context.Background(), order.EventsExchange, order.RouteStatus(order.Failed), false, false,
		amqp.Publishing{Body: []byte("{}")}); err != nil {
		t.Fatal(err)
	}
	<-ctx.Done()
	<-done
	if n := pipelinetest.QueueDepth(t, url, pipeline.QueueStockRelease); n != 1 {
		t.Errorf("release queue holds %d messages, want the 1 published (the refused consumer took it?)", n)
	}
	// Handed over: the marker deleted, the other deployment claims the vhost.
	if _, err := rawChannel(t, url).QueueDelete(pipeline.QueueDeployment, false, false, false); err != nil {
		t.Fatal(err)
	}
	if err := declareWith(t, url, pipeline.TopologyConfig{Deployment: b}); err != nil {
		t.Fatalf("second deployment after the hand-over: %v", err)
	}
}
