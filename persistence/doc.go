// Package persistence is Stampede's MySQL store: products and stock, orders
// and items, stock flows, the transactional outbox, the consume log and
// payments, plus the migration runner for the files in package sql.
//
// Every state change is a conditional update (WHERE status = ?) and every
// at-most-once effect is guarded by a unique key: (biz_type, biz_no) for stock
// flows, event_id for the outbox, (event_id, consumer_name) for the consume
// log, payment_no for payments, (user_id, request_id) and order_no for orders.
// Functions that append events take the caller's *sql.Tx, so an event commits
// with the rows it describes (the watermill-sql outbox pattern).
//
// It never talks to Redis or RabbitMQ.
package persistence
