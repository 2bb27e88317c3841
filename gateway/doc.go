// Package gateway is Stampede's HTTP front door (docs/spec.md §3): one fasthttp
// server on one listener that mounts two APIs, split by who knocks, and
// serves the built client.
//
// The packages under it; imports run one way: gateway imports buyer and
// operator, buyer imports buyer/intake, both APIs import room, and all of
// them import httpapi and rediscall, which import none of them.
//
//   - buyer: the buyer's API — login, order reads, cancel, demo checkout
//     and the signed payment callback, the product listing — with, mounted
//     by it, buyer/intake (POST /api/orders, the sale's hot path: token
//     buckets, the sold-out cache, shard routing, one reserve.lua call per
//     order, replica waits, synchronous intake; it holds no MySQL code, the
//     MySQL read and write it may need come in as functions from buyer)
//     and room (the waiting room's routes);
//   - operator: the operator's API, every route under /api/admin/ (product
//     creation, the sale's lifecycle and audit, stock repairs, reconcile,
//     dead letters, the console's pulse, order search and refunds, the
//     waiting room's settings), each behind the admin role;
//   - room: the Go side of the waiting room — tickets and their batcher,
//     the proof-of-work gate, the drop's public record, and the admission
//     on the order path through lua.AdmissionSaga (the cross-slot protocol
//     of claim, reserve and give back lives in lua/admission.go alone);
//   - httpapi: what both APIs share — the error codes and the one table
//     that maps sentinel errors to HTTP answers, the strict request body
//     decoder, the bearer-token guard, the product cache, the token
//     buckets, the product and order JSON shapes;
//   - rediscall: the one Redis circuit breaker every Redis call of a
//     request runs under, and the pipelined batcher.
//
// It must never touch MySQL on the POST /api/orders path (the exceptions:
// the shard count of a product Redis does not list, read once per product;
// and synchronous intake, STAMPEDE_INTAKE=sync, whose very point is the
// MySQL write), and it must never block on RabbitMQ: accepted reservations
// reach the writers through the intake stream appended inside the reserve
// script, and status events reach RabbitMQ through the outbox. It never
// releases stock: cancels write a status change whose event makes the
// pipeline's release consumer give the Redis reservation back.
//
// fasthttp pools its RequestCtx: no handler keeps ctx, its body or any slice
// of them after it returns.
//
// # Files
//
// Every file of this package (TestDocListsEveryFile keeps the list
// complete); the routes' code is in the packages above.
//
// Wiring: server.go (New builds the buyer's and the operator's APIs and
// mounts them on one router, Serve, the per-route metrics, panics,
// /healthz and the OpenAPI document), config.go, shared.go (the names the
// rest of the repository uses, re-exported from the packages above).
//
// Process and dependencies: health.go (/readyz), nodeid.go (the orderNo
// node id lease), redischeck.go (the Redis settings watched at start and
// at run time), durability.go (the durability levels and their start-up
// check), metrics.go (the Prometheus series: request durations per route
// and status, reserve outcomes, reserve script latency), doc.go.
//
// The browser: static.go (the built client, StaticDir), clientconfig.go
// (GET /api/config, the security headers and the push URL).
package gateway
