// Package push is Stampede's WebSocket hub: it holds the sockets of signed-in
// buyers (GET /ws) and sends each order status change to the sockets of the
// order's owner, plus throttled product stock updates to everyone (docs/spec.md §3).
//
// Status events come from RabbitMQ: every push instance declares its own
// exclusive, auto-delete, server-named queue bound to order.EventsExchange with
// "order.status.*", so any number of instances each deliver to the sockets they
// hold. Delivery is best effort; correctness comes from snapshots and versions:
//
//   - on connect, on {"type":"subscribe","orderNo"} and after every
//     (re)connection to RabbitMQ, the hub first sends the current snapshot of
//     the orders from the database (through Snapshotter), holding back events
//     for those orders until it is queued, so a client never misses the last
//     state;
//   - every order message carries the order's version and a socket never gets
//     a version lower than or equal to one it already got for that order, so a
//     client's state never goes backwards even when RabbitMQ reorders events.
//
// A buyer in a product's waiting room sends {"type":"queue","productId"} and
// gets its place in line live (line.go): position, estimate, "your turn",
// "sold out", "back in stock", throttled per product and ordered by seq; the
// ticket is looked up through Config.Lines, never taken from the client.
//
// Each socket has a bounded send buffer drained by a writer goroutine that
// runs only while there is something to send (writer.go); a client that
// cannot keep up is disconnected (close 1008) instead of slowing the hub or
// other clients. A waiting socket costs one parked reader goroutine and small
// buffers (hijack.go), no more (docs/sale-lifecycle.md "Waiting room" has the measured cost).
// Heartbeats are WebSocket pings to sockets that were sent nothing for
// PingInterval; shutdown closes
// every socket with 1001 and a reason; an unauthenticated socket is closed with
// 4401. A user may hold Config.MaxSocketsPerUser sockets (8): one more closes
// the user's oldest with 4429 ("too many sockets for this user …"). Browser
// pages of other origins than the page's own host (Config.AllowedOrigins) get
// 403 before the upgrade; handshake headers are bounded (431) like the
// gateway's.
//
// push must never show a user someone else's order, never let a socket's
// order version go backwards, never block on a slow socket and never touch the
// database except through Snapshotter. It imports only order and auth of
// Stampede.
package push
