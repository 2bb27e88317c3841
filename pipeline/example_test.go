package pipeline_test

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"github.com/stampede-sh/stampede/persistence"
	"github.com/stampede-sh/stampede/pipeline"
)

// Wiring every pipeline role in one process, as cmd/stampede does. Each
// Run returns nil once ctx is cancelled, after draining its in-flight work.
func Example() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	store, err := persistence.Open(ctx, persistence.DefaultDSN)
	if err != nil {
		slog.Error("mysql", "err", err)
		return
	}
	defer store.Close()
	rdb := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{"127.0.0.1:6379"}})
	defer rdb.Close()
	// Publishers and consumers on separate connections (flow control).
	pub, _ := pipeline.NewConn(pipeline.ConnConfig{URL: pipeline.DefaultAMQPURL, Name: "stampede-relay"})
	defer pub.Close()
	sub, _ := pipeline.NewConn(pipeline.ConnConfig{URL: pipeline.DefaultAMQPURL, Name: "stampede-consumer"})
	defer sub.Close()

	writer, _ := pipeline.NewWriter(store, rdb, pipeline.WriterConfig{})
	relay, _ := pipeline.NewRelay(store, pub, pipeline.RelayConfig{})
	consumer, _ := pipeline.NewConsumer(store, rdb, sub, pipeline.ConsumerConfig{PayTimeout: 15 * time.Minute})
	sweeper, _ := pipeline.NewSweeper(store, pipeline.SweeperConfig{})

	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return writer.Run(ctx) })
	g.Go(func() error { return relay.Run(ctx) })
	g.Go(func() error { return consumer.Run(ctx) })
	g.Go(func() error { return sweeper.Run(ctx) })
	if err := g.Wait(); err != nil {
		slog.Error("pipeline stopped", "err", err)
	}
}
