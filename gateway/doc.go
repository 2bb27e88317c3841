// Package gateway is Stampede's HTTP front door (SPEC §3): a fasthttp server
// that authenticates buyers, validates every request body strictly, accepts
// purchase intents with one atomic Lua call and answers order, product,
// payment, admin and health requests.
//
// It owns:
//   - the routes, the JSON shapes and the one table that maps sentinel errors
//     to HTTP status codes and API error codes (errors.go);
//   - the strict request body decoder shared by every endpoint (decode.go);
//   - bearer-token authentication and the demo login (auth.go, login.go);
//   - POST /api/orders: orderNo generation, shard routing and lua.Reserve
//     behind a circuit breaker (orders.go, breaker.go); the token buckets in
//     front of it (ratelimit.go), the local sold-out cache (soldout.go) with
//     its pipelined record reads (lookup_batch.go) and its copies of the
//     buyers of sold-out shards (buyers.go),
//     the routing of hot-SKU sharding (shards.go: shard counts, and
//     lua.Sharded — the model's reserve with pull-and-retry — run under the
//     gateway's timeout, breaker and batcher) and the synchronous-intake
//     baseline (sync_intake.go);
//   - order reads, cancel, demo checkout and the signed payment callback;
//   - the product listing with a short in-memory cache of product rows and
//     available counts read from Redis;
//   - admin product creation, which loads the stock shards into Redis
//     (lua.Sharded.LoadProduct), and stock adjustments (lua.ApplyAdjustment);
//   - the waiting room (waitingroom.go): POST /api/products/{id}/queue, the
//     admission check inside the reserve call (409 NOT_ADMITTED), the admin
//     switch POST /api/admin/products/{id}/waiting-room;
//   - /healthz, /readyz and serving the built client (StaticDir);
//   - its Prometheus series (metrics.go): request durations per route and
//     status, reserve outcomes, reserve script latency — counters and
//     histograms only, resolved once, so the order path stays
//     allocation-free. The main package mounts GET /metrics with Handle.
//
// It must never touch MySQL on the POST /api/orders path (the exceptions:
// the current status of a replayed request, which the reserve script has
// already answered; the shard count of a product Redis does not list, read
// once per product; and synchronous intake, STAMPEDE_INTAKE=sync, whose very
// point is the MySQL write), and it must never block on RabbitMQ: accepted
// reservations reach the writers through the intake stream appended inside
// the reserve script, and status events reach RabbitMQ through the outbox.
// It never releases stock: cancels write a status change whose event makes
// the pipeline's release consumer give the Redis reservation back.
//
// fasthttp pools its RequestCtx: no handler keeps ctx, its body or any slice
// of them after it returns.
package gateway
