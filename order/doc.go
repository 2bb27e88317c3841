// Package order is Stampede's leaf domain package: order statuses and the
// transitions allowed between them (docs/spec.md §2), stock flow types, the events the
// pipeline carries, the reservation handed from the gateway to the writers,
// and the orderNo format.
//
// It imports nothing of Stampede's and must never do I/O.
package order
