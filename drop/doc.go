// Package drop is the verifiable randomness of a limited drop (issue 28): the
// secret seed and its public commitment, the opaque ticket ids, and the one
// deterministic rule that turns a seed and a list of tickets into an order.
// The same rule orders a waiting room's pre-queue at the opening and picks a
// draw's winners and reserve list at its close; a room in random mode admits
// by a per-ticket key of the same seed.
//
// The rule ("stampede-shuffle-v1"), which docs/api.md states for buyers and
// client/src/lib/shuffle.js implements for the browser:
//
//	seed        32 random bytes, published as 64 lower-case hex digits at the shuffle
//	commitment  hex(SHA-256(seed)), published before the first ticket can be taken
//	ticket id   16 lower-case hex digits (64 random bits), opaque: it says nothing of the buyer
//	list        the pre-queued ticket ids sorted ascending (byte order), each followed by "\n"
//	listHash    SHA-256(list)
//	key(t)      SHA-256(seed ‖ listHash ‖ t)          (32 + 32 + 16 bytes hashed)
//	order       tickets by key ascending (bytewise; equal keys, which SHA-256 makes
//	            practically impossible, by ticket id); position = 1 + index
//	random key  SHA-256(seed ‖ t): a room in random mode admits the waiting ticket
//	            with the lowest key first
//
// Hashing the list into every key means a ticket's place depends on every
// other ticket: whoever knows the seed early (an operator) cannot pick a
// ticket id with a good place without trying whole lists, each try changing
// every key. The commitment fixes the seed before any ticket exists, so the
// seed cannot be chosen after the list is known. What the scheme does not
// prove: that the list holds no tickets the operator made up (each buyer can
// check that its own ticket is in it, and the count is public).
//
// It imports nothing of Stampede's and does no I/O.
package drop
