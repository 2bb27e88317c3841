package gateway

import (
	"github.com/stampede-sh/stampede/gateway/buyer"
	"github.com/stampede-sh/stampede/gateway/httpapi"
	"github.com/stampede-sh/stampede/gateway/operator"
	"github.com/stampede-sh/stampede/lua"
	"github.com/stampede-sh/stampede/persistence"
)

// TokenVerifier checks a bearer token (*auth.Verifier is one).
type TokenVerifier = httpapi.TokenVerifier

// The API's error codes (docs/spec.md §3), as httpapi defines them.
const (
	CodeInvalidArgument       = httpapi.CodeInvalidArgument
	CodeUnauthenticated       = httpapi.CodeUnauthenticated
	CodeBadSignature          = httpapi.CodeBadSignature
	CodeForbidden             = httpapi.CodeForbidden
	CodeNotFound              = httpapi.CodeNotFound
	CodeProductNotFound       = httpapi.CodeProductNotFound
	CodeMethodNotAllowed      = httpapi.CodeMethodNotAllowed
	CodeSaleNotActive         = httpapi.CodeSaleNotActive
	CodeSoldOut               = httpapi.CodeSoldOut
	CodeInsufficientStock     = httpapi.CodeInsufficientStock
	CodePurchaseLimitExceeded = httpapi.CodePurchaseLimitExceeded
	CodeInvalidState          = httpapi.CodeInvalidState
	CodeAmountMismatch        = httpapi.CodeAmountMismatch
	CodePaymentNoReused       = httpapi.CodePaymentNoReused
	CodeIdempotencyKeyReused  = httpapi.CodeIdempotencyKeyReused
	CodeUnavailable           = httpapi.CodeUnavailable
	CodeRateLimited           = httpapi.CodeRateLimited
	CodeInternal              = httpapi.CodeInternal
	CodeStockCorrupt          = httpapi.CodeStockCorrupt
	CodeNotAdmitted           = httpapi.CodeNotAdmitted
	CodeWaitingRoomOff        = httpapi.CodeWaitingRoomOff
	CodePayloadTooLarge       = httpapi.CodePayloadTooLarge
	CodeSalePaused            = httpapi.CodeSalePaused
	CodeSaleStarted           = httpapi.CodeSaleStarted
	CodeSaleEnded             = httpapi.CodeSaleEnded
	CodePreQueueNotOpen       = httpapi.CodePreQueueNotOpen
	CodeDrawClosed            = httpapi.CodeDrawClosed
	CodePowRequired           = httpapi.CodePowRequired
	CodePowInvalid            = httpapi.CodePowInvalid
	CodePowReused             = httpapi.CodePowReused
	CodePowNotRequired        = httpapi.CodePowNotRequired
	CodeRoomStarted           = httpapi.CodeRoomStarted
	CodeShuffleNotPublished   = httpapi.CodeShuffleNotPublished
	CodeStockConflict         = httpapi.CodeStockConflict
	CodeConflict              = httpapi.CodeConflict
	CodeAlreadyRefunded       = httpapi.CodeAlreadyRefunded
	CodeNotRefundable         = httpapi.CodeNotRefundable
)

// AdminOps are the operator actions behind GET /api/admin/reconcile,
// GET /api/admin/dlq and POST /api/admin/dlq/replay (operator.AdminOps).
type AdminOps = operator.AdminOps

// PulseReader reads the operator console's live readings (operator.PulseReader).
type PulseReader = operator.PulseReader

// Sale states of the product JSON's state.
const (
	StateUpcoming = httpapi.StateUpcoming
	StateLive     = httpapi.StateLive
	StatePaused   = httpapi.StatePaused
	StateEnded    = httpapi.StateEnded
	StateSoldOut  = httpapi.StateSoldOut
)

// RoomSettings are the Redis side (lua.SetRoom) of a product's stored room
// terms, shards being the product's stock shards (operator.RoomSettings):
// what the admin endpoint writes, and what a reload into an emptied Redis
// DB writes again (`stampede redis-takeover`).
func RoomSettings(t persistence.RoomTerms, shards int) lua.RoomSettings {
	return operator.RoomSettings(t, shards)
}

// HeaderSignature carries the lower-case hex HMAC-SHA256 of a payment
// callback's raw body (buyer.HeaderSignature).
const HeaderSignature = buyer.HeaderSignature

// Sign returns the X-Signature of a payment callback body (buyer.Sign).
func Sign(secret, body []byte) string { return buyer.Sign(secret, body) }
