package order

// The two user id spaces (docs/spec.md §3, issue 26). A userId is Stampede's
// internal int64 id of a buyer or admin:
//
//   - 1 … MaxDirectUserID: ids the shop assigns itself and puts in HS256
//     tokens (`stampede token --user 42`, the demo login, the shop's own
//     backend); the token's sub is the id in canonical decimal.
//   - FirstMappedUserID and up: ids Stampede assigns to an identity
//     provider's (issuer, subject) on first sight (persistence's
//     user_identity table, auth's SubjectMapper).
//
// The ranges never overlap, so no HS256 token can name a provider's user
// and no provider subject can land on a shop-assigned id. Both stay below
// 2^53 (9,007,199,254,740,992): a browser's JSON numbers hold them exactly.
const (
	FirstMappedUserID int64 = 1_000_000_000_000_000
	MaxDirectUserID         = FirstMappedUserID - 1
)
