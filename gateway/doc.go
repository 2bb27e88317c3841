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
//
// # Files
//
// Every file of the package, by who calls it (TestDocListsEveryFile keeps
// the list complete). A change to the first group is a change to what every
// buyer waits for during a sale; the third group runs only when an operator
// calls it.
//
// The buyer's hot path — POST /api/orders and POST /api/products/{id}/queue,
// what runs for every buyer in the sale's first seconds:
//   - orders.go, auth.go, decode.go, respond.go, errors.go, ratelimit.go,
//     breaker.go, shards.go, soldout.go, lookup_batch.go, buyers.go,
//     reserve_batch.go, pipebatch.go, durability.go, sync_intake.go,
//     stockfault.go, waitingroom.go, pow.go, metrics.go.
//
// The buyer's other routes — reads, cancel, pay, the storefront:
//   - orderread.go, ordercancel.go, payments.go (demo checkout and the
//     provider's signed callback), products.go, drop.go (its public half:
//     GET /api/products/{id}/drop and …/drop/tickets), login.go,
//     clientconfig.go, static.go, health.go.
//
// Operator and admin only — every route behind adminOnly (/api/admin/…):
//   - admin.go (product creation), sale_admin.go (list, PATCH, pause,
//     resume, end, audit), admin_ops.go (stock repairs, reconcile, dead
//     letters), admin_pulse.go (the console's sale pulse), admin_support.go
//     (order search, refunds), drop.go (its admin half: the waiting-room
//     terms and status).
//
// Wiring, shared by all: server.go (routes, New), config.go, nodeid.go (the
// orderNo node id lease), redischeck.go (the Redis settings watched at start
// and at run time), doc.go.
package gateway
