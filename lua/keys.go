package lua

import "strconv"

// Prefix starts every Stampede key.
const Prefix = "stampede:"

// Keys builds the Redis keys of one product shard. The zero value is not
// usable; get one from ShardKeys.
type Keys struct {
	base string // "stampede:{p:<pid>:<shard>}:"
}

// ShardKeys returns the keys of productID's stock shard (0-based).
func ShardKeys(productID int64, shard int) Keys {
	return Keys{base: Prefix + "{p:" + strconv.FormatInt(productID, 10) + ":" + strconv.Itoa(shard) + "}:"}
}

// Tag returns the hash-tagged prefix shared by every key of the shard.
func (k Keys) Tag() string { return k.base }

// Stock is the stock hash: available, total, price, limit, maxq, start, end.
func (k Keys) Stock() string { return k.base + "stock" }

// Intake is the shard's intake stream of reservations.
func (k Keys) Intake() string { return k.base + "intake" }

// Request is the idempotency record of (userID, requestID) for this product:
// "<orderNo> <quantity>", later "<orderNo> <quantity> <status>" (SetStatus).
// requestIds are scoped per (user, product): the same requestId on another
// product is another intent with its own record.
func (k Keys) Request(userID int64, requestID string) string {
	return k.base + "req:" + strconv.FormatInt(userID, 10) + ":" + requestID
}

// User is the number of units userID holds in this shard (per-user limit).
func (k Keys) User(userID int64) string { return k.base + "user:" + strconv.FormatInt(userID, 10) }

// Hold is what was reserved in this shard under token, a claim of userID's
// (admission.go): the requestId reserved with it, or "~" once revoked.
func (k Keys) Hold(userID int64, token string) string {
	return k.base + "hold:" + strconv.FormatInt(userID, 10) + ":" + token
}

// Order is the pending order record read while MySQL does not have the order yet.
func (k Keys) Order(orderNo string) string { return k.base + "order:" + orderNo }

// Released marks orderNo's reservation as given back.
func (k Keys) Released(orderNo string) string { return k.base + "released:" + orderNo }

// Restored marks orderNo's lost reservation as put back (Restore).
func (k Keys) Restored(orderNo string) string { return k.base + "restored:" + orderNo }

// Adjusted marks repairNo as applied to this shard.
func (k Keys) Adjusted(repairNo string) string { return k.base + "adjusted:" + repairNo }

// RoomAdmitted is the waiting room's admissions (RoomKeys.Admitted) when k
// is the product's shard 0, the only shard a room lives on.
func (k Keys) RoomAdmitted() string { return k.base + "room:adm" }

// Transfers is the hash of stock transfers this shard gave and that are not
// yet confirmed applied at the receiver: field transfer id = "<toShard> <units>".
func (k Keys) Transfers() string { return k.base + "xfer" }

// Wait is the key the gateway writes right before a WAIT (durability
// replicated): a write on the shard's master whose replication offset covers
// every reservation that master answered before it (WaitOn). Expires after 10s.
func (k Keys) Wait() string { return k.base + "wait" }

// TransferIn marks transferID as applied to this (receiving) shard.
func (k Keys) TransferIn(transferID string) string { return k.base + "xferin:" + transferID }

// Buyers is the shard's buyers set (reserve.lua, read by buyers.lua): the
// userIds of every intent accepted in this shard and one incarnation member
// "e<orderNo>". Its TTL is renewed with every acceptance, so it outlives the
// shard's request records.
func (k Keys) Buyers() string { return k.base + "buyers" }

// StreamsKey is the set of every intake stream name; writers read it to find
// the streams to consume. It is not hash-tagged and never used inside a script.
const StreamsKey = Prefix + "streams"

// ProductsKey is the set of product ids loaded into Redis.
const ProductsKey = Prefix + "products"

// ProductKeysPattern is the SCAN pattern matching every key under the hash
// tags of productID's shards.
func ProductKeysPattern(productID int64) string {
	return Prefix + "{p:" + strconv.FormatInt(productID, 10) + ":*"
}

// DeadStream is the dead stream of intake stream intake (Keys.Intake): the
// writers move there, with its error, an entry that can never become an
// order. It shares the intake stream's hash tag.
func DeadStream(intake string) string { return intake + ":dead" }

// NodeKeyPrefix prefixes the keys of leased orderNo node ids:
// "stampede:node:<0…1023>" = owner, with a TTL (node.lua scripts). Each key
// is its own slot on a Redis Cluster; no script touches two of them.
const NodeKeyPrefix = Prefix + "node:"

// NodeKey is the lease key of orderNo node id id (0…1023).
func NodeKey(id int64) string { return NodeKeyPrefix + strconv.FormatInt(id, 10) }

// ReconcileMarkKey is set (NX, TTL of the reconcile interval) by the sweeper
// that starts a reconciliation round; while it exists other sweepers skip
// theirs.
const ReconcileMarkKey = Prefix + "sweeper:reconciled"

// RoomKeys builds the keys of one product's waiting room. Get one from Room.
type RoomKeys struct {
	base string // "stampede:{p:<pid>:0}:"
}

// Room returns the waiting-room keys of productID (under its shard 0 tag).
func Room(productID int64) RoomKeys { return RoomKeys{base: ShardKeys(productID, 0).base} }

// Stock is the shard-0 stock hash, whose field room is "1" while the room is on.
func (r RoomKeys) Stock() string { return r.base + "stock" }

// State is the room's hash: issued, upto, rate, window, ceiling, mode,
// pqms, pre, closed, base, shuffled, seed, lhash, cutoff, pow, … (room_take.lua
// and room_admit.lua name each).
func (r RoomKeys) State() string { return r.base + "room" }

// Line is the sorted set of waiting user ids by place (or random key).
func (r RoomKeys) Line() string { return r.base + "room:line" }

// Tickets is the hash userId → "<place> <issuedMs> <ticketId> <flags>" of the
// user's last ticket (room_take.lua).
func (r RoomKeys) Tickets() string { return r.base + "room:tickets" }

// Admitted is the sorted set of admitted user ids by admission deadline (ms).
func (r RoomKeys) Admitted() string { return r.base + "room:adm" }

// Pre is the hash ticketId → userId of the pre-queue (and of a draw's entries).
func (r RoomKeys) Pre() string { return r.base + "room:pre" }

// Fresh is the hash userId → ticketId of a random room's tickets waiting for
// their key (the pacer gives it).
func (r RoomKeys) Fresh() string { return r.base + "room:fresh" }

// Log is the stream of a random room's admissions (field u: userIds), read
// by the push feed.
func (r RoomKeys) Log() string { return r.base + "room:log" }

// List is the published pre-queue list (drop.List), written at the shuffle.
func (r RoomKeys) List() string { return r.base + "room:list" }

// Pow marks a solved proof-of-work challenge (hex) as used.
func (r RoomKeys) Pow(challenge string) string { return r.base + "room:pow:" + challenge }

// Claim is userID's claim of its admission to a sharded product's room
// (admission.go): "<requestId> <deadlineMs> <token> <p|u>".
func (r RoomKeys) Claim(userID int64) string {
	return r.base + "room:claim:" + strconv.FormatInt(userID, 10)
}
