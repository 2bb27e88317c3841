package pipeline_test

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"github.com/stampede-sh/stampede/lua"
	"github.com/stampede-sh/stampede/lua/luatest"
	"github.com/stampede-sh/stampede/order"
	"github.com/stampede-sh/stampede/persistence"
	"github.com/stampede-sh/stampede/persistence/persistencetest"
	"github.com/stampede-sh/stampede/pipeline"
	"github.com/stampede-sh/stampede/pipeline/pipelinetest"
)

// Wiring every pipeline role in one process, as package app does, and one
// purchase through it: reserve.lua appends the reservation to the intake
// stream, the writer stores the order, the relay publishes ORDER_CREATED,
// the order-lock consumer locks the stock and the order waits for payment.
// Each Run returns nil once ctx is cancelled, after draining its in-flight
// work. (A real main reads its addresses from its config and cancels on
// Ctrl-C, signal.NotifyContext; this one runs on a MySQL database, a
// RabbitMQ vhost and a Redis database of its own on the test services and
// stops after the purchase.)
func Example() {
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	mysqlDB, err := persistencetest.Acquire(ctx, "example")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer mysqlDB.Release(context.Background())
	vhost, err := pipelinetest.AcquireVhost("example")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer vhost.Release()
	amqpURL := vhost.URL
	redisDB, err := luatest.Claim(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer redisDB.Release(context.Background())
	store, err := persistence.Open(ctx, mysqlDB.DSN())
	if err != nil {
		fmt.Println("mysql:", err)
		return
	}
	defer store.Close()
	if _, err := persistence.Migrate(ctx, store.DB); err != nil {
		fmt.Println("migrate:", err)
		return
	}
	rdb := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{redisDB.Addr}, DB: redisDB.DB})
	defer rdb.Close()
	// Publishers and consumers on separate connections (flow control).
	pub, err := pipeline.NewConn(pipeline.ConnConfig{URL: amqpURL, Name: "stampede-relay"})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pub.Close()
	sub, err := pipeline.NewConn(pipeline.ConnConfig{URL: amqpURL, Name: "stampede-consumer"})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer sub.Close()

	writer, err1 := pipeline.NewWriter(store, rdb, pipeline.WriterConfig{})
	relay, err2 := pipeline.NewRelay(store, pub, pipeline.RelayConfig{})
	consumer, err3 := pipeline.NewConsumer(store, rdb, sub, pipeline.ConsumerConfig{PayTimeout: 15 * time.Minute})
	sweeper, err4 := pipeline.NewSweeper(store, pipeline.SweeperConfig{})
	for _, err := range []error{err1, err2, err3, err4} {
		if err != nil {
			fmt.Println(err)
			return
		}
	}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return writer.Run(gctx) })
	g.Go(func() error { return relay.Run(gctx) })
	g.Go(func() error { return consumer.Run(gctx) })
	g.Go(func() error { return sweeper.Run(gctx) })

	// One purchase, as the gateway makes it.
	fmt.Println(purchase(ctx, store, rdb))
	stop()
	fmt.Println("pipeline stopped:", g.Wait())
	// Output:
	// WAITING_PAY
	// pipeline stopped: <nil>
}

// purchase loads a product into MySQL and Redis, reserves one unit and
// returns the order's status once it is WAITING_PAY (or after 30 s).
func purchase(ctx context.Context, store *persistence.Store, rdb redis.UniversalClient) string {
	now := time.Now()
	p, err := store.CreateProduct(ctx, persistence.Product{Name: "example", Price: 1999, Total: 10, MaxPerOrder: 1,
		SaleStart: now.Add(-time.Hour), SaleEnd: now.Add(time.Hour)})
	if err != nil {
		return err.Error()
	}
	st := &lua.Sharded{RDB: rdb, Do: func(fn func(context.Context) error) error { return fn(ctx) }}
	if err := st.LoadProduct(lua.Product{ID: p.ID, Total: 10, Shards: 1, Price: 1999, MaxPerOrder: 1,
		SaleStart: p.SaleStart, SaleEnd: p.SaleEnd}); err != nil {
		return err.Error()
	}
	gen, err := order.NewNoGenerator(1)
	if err != nil {
		return err.Error()
	}
	no := gen.Next(p.ID, 0)
	if _, err := lua.Reserve(ctx, rdb, lua.ShardKeys(p.ID, 0), lua.ReserveArgs{OrderNo: no, UserID: 1,
		RequestID: "example-1", Quantity: 1, TTL: time.Hour}); err != nil {
		return err.Error()
	}
	var status order.Status
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if o, err := store.GetOrder(ctx, no); err == nil {
			if status = o.Status; status == order.WaitingPay {
				break
			}
		}
	}
	return string(status)
}
