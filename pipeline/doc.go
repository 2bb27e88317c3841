// Package pipeline moves an accepted reservation from the Redis intake
// streams to a settled order. It owns four long-running components, each with
// a Config (documented defaults, setDefaults, Validate) and a Run(ctx) error
// that returns once ctx is cancelled and its in-flight work is drained:
//
//   - Writer: reads every product shard's intake stream with a consumer
//     group, batches entries (N entries or T ms, whichever first), writes
//     each batch's orders, items and ORDER_CREATED outbox rows in one MySQL
//     transaction and XACKs only after the commit; reclaims the pending
//     entries of dead writers with XAUTOCLAIM.
//   - Relay: claims outbox rows (SKIP LOCKED, with a lease), publishes them
//     with publisher confirms and marks them SENT only after the broker
//     confirmed, RETRY (then DEAD) otherwise.
//   - Consumer: the order-lock, stock-release and order-close handlers on
//     their RabbitMQ queues, manual ack after the MySQL commit or the Redis
//     script returned; transient failures go through the delay queues
//     stampede.retry.<n>, poison and exhausted messages to QueueDLQ.
//   - Sweeper: closes WAITING_PAY orders past their pay deadline (the safety
//     net of the delayed close message) and, given Redis, runs every repair
//     of Redis stock — lost reservations (RepairLostReservations), half-done
//     transfers between shards (RepairTransfers), adjustments whose Redis
//     half is missing (RepairAdjustments) — then Reconcile, every
//     ReconcileInterval, exporting the drift per product.
//
// Dead letters are inspected and replayed through the outbox with
// InspectDLQ and ReplayDLQ (Ops bundles them for the gateway). Writer, relay
// and consumer each guard their dependencies with circuit breakers.
//
// plus Reconcile (docs/spec.md §5 checked across Redis and MySQL), the AMQP topology
// (DeclareTopology, Topology), a reconnecting AMQP connection (Conn), the
// components' Prometheus series (Metrics) and the scrape-time collector of
// shared state: stream backlogs, outbox rows, overdue orders, queue depths,
// dead-letter depth (StateCollector).
//
// Every component is safe to run as several instances at once: writers share
// a consumer group, relays claim disjoint rows, consumers compete on queues,
// and every state change they make is a conditional update or guarded by a
// unique key, so a duplicate delivery changes nothing.
//
// The pipeline must never: acknowledge a stream entry or a message before the
// commit (or Redis script) that applied it; delete or trim a stream entry
// that is not acknowledged; mark an outbox row SENT before the broker
// confirmed it; release stock twice; cancel a paid order; requeue a message
// in a hot loop. It never serves HTTP and never writes the gateway's Redis
// keys other than through the lua package's scripts.
package pipeline
