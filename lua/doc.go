// Package lua owns Stampede's Redis model: every key and hash tag
// (keys.go), every Redis script with its KEYS, ARGV and return codes in its
// header (*.lua, one Go wrapper each mapping the codes to sentinel errors:
// scripts.go, transfer.go, node.go, prune.go, restore.go, waitingroom.go),
// the replica barrier of the durability level replicated (durability.go:
// SET + WAIT on a primary), the codecs of the records the
// scripts write (records.go: the intake stream's reservation, the pending
// order hash, the idempotency record) and the operations that span the
// shards of one product (shards.go: reserve with pull-and-retry, load and
// split a product, apply a stock adjustment; transfer.go: move units between
// shards and repair half-done transfers) and the waiting room
// (waitingroom.go: tickets, the pacer's atomic admission step, the
// admission check inside reserve.lua).
//
// The package keeps the path lua/ (rather than a new stock/) because the
// other packages and the scripts' go:embed already name it, and other work
// adds scripts here while this layout grows; its name says what the scripts
// run on, the doc says what it holds.
//
// Every key of one product shard carries the hash tag {p:<productId>:<shard>},
// so each script call touches a single Redis Cluster slot. Keys are built only
// by the functions of keys.go, which put the tag in one place (the layout
// follows hibiken/asynq's internal/base).
//
// Scripts are run with go-redis Script.Run: EVALSHA, falling back to EVAL on
// NOSCRIPT, so a flushed script cache or a restarted Redis is transparent.
// This package never touches MySQL and imports no Stampede package but the
// leaf order (the reservation type its codec fills).
package lua
