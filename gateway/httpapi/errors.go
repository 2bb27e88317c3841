package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"

	"github.com/sony/gobreaker/v2"
	"github.com/valyala/fasthttp"

	"github.com/stampede-sh/stampede/auth"
	"github.com/stampede-sh/stampede/lua"
	"github.com/stampede-sh/stampede/persistence"
)

// API error codes (docs/spec.md §3). The body of every error is
// {"error": {"code": "...", "message": "..."}}.
const (
	CodeInvalidArgument       = "INVALID_ARGUMENT"
	CodeUnauthenticated       = "UNAUTHENTICATED"
	CodeBadSignature          = "BAD_SIGNATURE"
	CodeForbidden             = "FORBIDDEN"
	CodeNotFound              = "NOT_FOUND"
	CodeProductNotFound       = "PRODUCT_NOT_FOUND"
	CodeMethodNotAllowed      = "METHOD_NOT_ALLOWED"
	CodeSaleNotActive         = "SALE_NOT_ACTIVE"
	CodeSoldOut               = "SOLD_OUT"
	CodeInsufficientStock     = "INSUFFICIENT_STOCK"
	CodePurchaseLimitExceeded = "PURCHASE_LIMIT_EXCEEDED"
	CodeInvalidState          = "INVALID_STATE"
	CodeAmountMismatch        = "AMOUNT_MISMATCH"
	CodePaymentNoReused       = "PAYMENT_NO_REUSED"
	CodeIdempotencyKeyReused  = "IDEMPOTENCY_KEY_REUSED"
	CodeUnavailable           = "UNAVAILABLE"
	CodeRateLimited           = "RATE_LIMITED"
	CodeInternal              = "INTERNAL"
	CodeStockCorrupt          = "STOCK_CORRUPT"
	CodeNotAdmitted           = "NOT_ADMITTED"      // waiting room: no live admission (waitingroom.go)
	CodeWaitingRoomOff        = "WAITING_ROOM_OFF"  // waiting room: the product has none on
	CodePayloadTooLarge       = "PAYLOAD_TOO_LARGE" // 413: the request body exceeds the route's limit
	CodeSalePaused            = "SALE_PAUSED"       // 409: an admin paused the sale (sale_admin.go)
	CodeSaleStarted           = "SALE_STARTED"      // 409: PATCH of a field that may not change once the sale opened
	CodeSaleEnded             = "SALE_ENDED"        // 409: PATCH of saleStart/saleEnd of an ended sale (final)
	// Fair drops (waitingroom.go, pow.go).
	CodePreQueueNotOpen     = "PRE_QUEUE_NOT_OPEN"    // 409: tickets only from preQueueSeconds before the opening
	CodeDrawClosed          = "DRAW_CLOSED"           // 409: a draw takes no entry after its close
	CodePowRequired         = "POW_REQUIRED"          // 403: the room asks a proof-of-work for a new ticket
	CodePowInvalid          = "POW_INVALID"           // 403: the proof-of-work does not verify, expired, or is another user's
	CodePowReused           = "POW_REUSED"            // 409: the proof-of-work was already used
	CodePowNotRequired      = "POW_NOT_REQUIRED"      // 409: a challenge asked of a room without proof-of-work
	CodeRoomStarted         = "ROOM_STARTED"          // 409: mode, preQueueSeconds, reserve fixed once a ticket exists
	CodeShuffleNotPublished = "SHUFFLE_NOT_PUBLISHED" // 409: the pre-queue list before the opening's shuffle
	CodeStockConflict       = "STOCK_CONFLICT"        // 409: Redis holds stock of an earlier product with the new product's id (admin.go)
	// CodeConflict is a 409 for a repairNo reused with different content.
	CodeConflict = "CONFLICT"
	// API error codes of the refund endpoint.
	CodeAlreadyRefunded = "ALREADY_REFUNDED" // 409: refunded before under another refundNo
	CodeNotRefundable   = "NOT_REFUNDABLE"   // 409: the payment is not REFUND_PENDING (it paid its order)
)

// apiError is an answer other than success. Handlers return one directly when
// the message depends on the request; everything else goes through errorTable.
type APIError struct {
	Status     int
	Code       string
	Message    string
	RetryAfter bool         // send Retry-After (503s)
	Details    []FieldError // INVALID_ARGUMENT of several fields: one entry per problem
}

// fieldError is one entry of an error's details: the body field at fault
// (its JSON name; "body" for the body as a whole) and what is wrong with it.
type FieldError struct {
	Field   string `json:"field"`
	Message string `json:"message"`
}

// invalidFields is the one 400 INVALID_ARGUMENT answering every problem of
// a body: details lists them, the message joins them. errs must not be empty.
func InvalidFields(errs []FieldError) *APIError {
	parts := make([]string, len(errs))
	for i, e := range errs {
		parts[i] = e.Message
	}
	msg := parts[0]
	if len(parts) > 1 {
		msg = fmt.Sprintf("%d problems: %s", len(parts), strings.Join(parts, "; "))
	}
	return &APIError{Status: fasthttp.StatusBadRequest, Code: CodeInvalidArgument, Message: msg, Details: errs}
}

// tooLarge is the 413 PAYLOAD_TOO_LARGE of a body over limit bytes.
func TooLarge(limit int) *APIError {
	return &APIError{Status: fasthttp.StatusRequestEntityTooLarge, Code: CodePayloadTooLarge,
		Message: fmt.Sprintf("request body exceeds %d bytes", limit)}
}

func (e *APIError) Error() string { return e.Code + ": " + e.Message }

// invalidArg is a 400 INVALID_ARGUMENT; the message names the field.
func InvalidArg(format string, args ...any) *APIError {
	return &APIError{Status: fasthttp.StatusBadRequest, Code: CodeInvalidArgument, Message: fmt.Sprintf(format, args...)}
}

// invalidState is a 409 INVALID_STATE.
func InvalidState(format string, args ...any) *APIError {
	return &APIError{Status: fasthttp.StatusConflict, Code: CodeInvalidState, Message: fmt.Sprintf(format, args...)}
}

// Gateway sentinels, for outcomes that have no sentinel in lua or persistence.
var (
	ErrProductNotFound = errors.New("gateway: product not found")
	ErrForbidden       = errors.New("gateway: admin role required")
	ErrBadSignature    = errors.New("gateway: bad payment signature")
	ErrLoginDisabled   = errors.New("gateway: demo login disabled")
	ErrNoRoute         = errors.New("gateway: no route")
	ErrNoMethod        = errors.New("gateway: method not allowed")
	ErrPowNotRequired  = errors.New("gateway: the room asks no proof-of-work")
	ErrNotShuffled     = errors.New("gateway: the shuffle is not published yet")
	// errPowInvalid: a solution that does not verify, has expired, or was
	// issued to another user or product.
	ErrPowInvalid = errors.New("gateway: proof-of-work invalid")
)

// errorTable maps sentinel errors to status and API code: the one place where
// errors become HTTP answers. The first entry that errors.Is matches wins.
var errorTable = []struct {
	err     error
	Status  int
	Code    string
	Message string
}{
	{lua.ErrKeyReused, 422, CodeIdempotencyKeyReused, "requestId was already used with a different payload"},
	{lua.ErrNotFound, 404, CodeProductNotFound, "product not found"},
	{ErrProductNotFound, 404, CodeProductNotFound, "product not found"},
	{lua.ErrNotActive, 409, CodeSaleNotActive, "the sale is not open"},
	{lua.ErrPaused, 409, CodeSalePaused, "the sale is paused; try again later"},
	{lua.ErrSoldOut, 409, CodeSoldOut, "sold out"},
	{lua.ErrInsufficient, 409, CodeInsufficientStock, "not enough stock left for this quantity"},
	{lua.ErrLimitExceeded, 409, CodePurchaseLimitExceeded, "this purchase would exceed the per-user limit"},
	{lua.ErrBadQuantity, 400, CodeInvalidArgument, "quantity exceeds the product's maximum per order (or quantity × price the largest order amount, 2^53 − 1)"},
	{lua.ErrNotAdmitted, 409, CodeNotAdmitted, "the waiting room is on: take a place in line (POST /api/products/{id}/queue) and order once admitted"},
	{lua.ErrRoomOff, 409, CodeWaitingRoomOff, "this product has no waiting room on: order directly"},
	{lua.ErrDrawClosed, 409, CodeDrawClosed, "the draw has closed: it takes no more entries"},
	{lua.ErrPowRequired, 403, CodePowRequired, "this waiting room asks a proof-of-work for a new ticket: solve GET /api/products/{id}/queue/challenge and send its payload as {\"altcha\": \"…\"}"},
	{ErrPowInvalid, 403, CodePowInvalid, "the proof-of-work does not verify, has expired, or was issued to another user or product: get a new challenge"},
	{lua.ErrPowReused, 409, CodePowReused, "this proof-of-work was already used: get a new challenge"},
	{ErrPowNotRequired, 409, CodePowNotRequired, "this waiting room asks no proof-of-work"},
	{lua.ErrRoomLocked, 409, CodeRoomStarted, "the pre-queue has tickets (or the room opened): mode, preQueueSeconds and reserve can no longer change"},
	{lua.ErrCommitted, 409, CodeConflict, "the waiting room is committed to another seed than the stored one: nothing changed (an operator must look at it)"},
	{ErrNotShuffled, 409, CodeShuffleNotPublished, "the pre-queue's shuffle is published at the opening"},
	{lua.ErrIncarnation, 409, CodeStockConflict, "Redis holds stock of an earlier product with this product's id " +
		"(another database's, or one created after the backup this MySQL database was restored from); nothing was created " +
		"and that stock was left as it is: see docs/production.md, \"Deployment identity\""},
	{lua.ErrStockCorrupt, 500, CodeStockCorrupt, "this product's stock data is corrupt and it cannot take orders until an operator repairs it; other products are not affected"},
	{persistence.ErrDrawOnePerOrder, 400, CodeInvalidArgument, "a draw sells one unit per winner: the product's maxPerOrder must be 1 while its waiting room is a draw"},
	{persistence.ErrNotFound, 404, CodeNotFound, "order not found"},
	{persistence.ErrInvalidState, 409, CodeInvalidState, "the order is not in a state that allows this"},
	{persistence.ErrAmount, 409, CodeAmountMismatch, "amount differs from the order's amount"},
	{persistence.ErrPaymentReused, 409, CodePaymentNoReused, "paymentNo was already used for another order"},
	{auth.ErrUnauthenticated, 401, CodeUnauthenticated, "missing or invalid bearer token"},
	{auth.ErrIdentityUnavailable, 503, CodeUnavailable, "your sign-in could not be looked up; retry shortly"},
	{ErrBadSignature, 401, CodeBadSignature, "missing or invalid X-Signature"},
	{ErrForbidden, 403, CodeForbidden, "admin role required"},
	{ErrLoginDisabled, 404, CodeNotFound, "demo login is disabled"},
	{ErrNoRoute, 404, CodeNotFound, "no such endpoint"},
	{ErrNoMethod, 405, CodeMethodNotAllowed, "method not allowed on this endpoint"},
	{lua.ErrClaimContended, 503, CodeUnavailable, "your concurrent orders are settling your waiting-room admission; retry shortly"},
	{gobreaker.ErrOpenState, 503, CodeUnavailable, "Redis is unavailable; retry shortly"},
	{lua.ErrNotReplicated, 503, CodeUnavailable, "the order is not yet safely stored; retry with the same requestId"},
	{gobreaker.ErrTooManyRequests, 503, CodeUnavailable, "Redis is unavailable; retry shortly"},
}

// toAPIError turns any error into the answer to send. Errors that are not in
// the table come from a dependency: what persistence.IsRetryable calls
// permanent (a MySQL server error such as a broken query, or ErrConflict) is a
// bug, 500 INTERNAL; anything else — a lost connection, a timeout, a Redis
// error — is 503 UNAVAILABLE with Retry-After.
// tableErrors[i] is the answer of errorTable[i], built once (never modified).
var tableErrors = func() []*APIError {
	out := make([]*APIError, len(errorTable))
	for i, t := range errorTable {
		out[i] = &APIError{Status: t.Status, Code: t.Code, Message: t.Message, RetryAfter: t.Status == 503}
	}
	return out
}()

func ToAPIError(err error) (e *APIError, known bool) {
	for i, t := range errorTable { // a bare sentinel, the hot case (409 SOLD_OUT): no allocation
		if err == t.err { //nolint:errorlint // a bare sentinel first, without allocating; wrapped ones are matched below
			return tableErrors[i], true
		}
	}
	// A variable of its own: one that errors.As may write to escapes to the
	// heap, and as the named result it did so on every call, the hot one too.
	var ae *APIError
	if errors.As(err, &ae) {
		return ae, true
	}
	for i, t := range errorTable {
		if errors.Is(err, t.err) {
			return tableErrors[i], true
		}
	}
	if !persistence.IsRetryable(err) { // a MySQL server error such as a broken query, or ErrConflict
		return &APIError{Status: 500, Code: CodeInternal, Message: "internal error"}, false
	}
	return &APIError{Status: 503, Code: CodeUnavailable, Message: "a dependency is unavailable; retry shortly", RetryAfter: true}, false
}

// Answers writes the error answers (and the JSON answers off the hot path)
// of one API: it logs what errorTable does not know and sends Retry-After
// with every 503. The zero value is not usable: Log must be set.
type Answers struct {
	Log        *slog.Logger
	RetryAfter string // Retry-After of 503s, whole seconds (RetryAfterSeconds)
}

// logCtx is the context of the failure log lines (never a request's).
var logCtx = context.Background()

// Fail answers err. Errors outside the table are logged (without the request
// body); breaker rejections are not, so an outage does not flood the log.
func (s *Answers) Fail(ctx *fasthttp.RequestCtx, err error) { s.FailWith(ctx, err, "", "") }

// FailWith is Fail for a request about orderNo and/or requestId (either may
// be ""): the log line of an unexpected error names them. The route's
// {orderNo} parameter is named without being passed.
func (s *Answers) FailWith(ctx *fasthttp.RequestCtx, err error, orderNo, requestID string) {
	e, known := ToAPIError(err)
	if !known {
		s.logFailure(ctx, e, err, orderNo, requestID)
	}
	if e.RetryAfter {
		ctx.Response.Header.Set("Retry-After", s.RetryAfter)
	}
	if e.Status == fasthttp.StatusUnauthorized && e.Code == CodeUnauthenticated {
		ctx.Response.Header.Set("WWW-Authenticate", "Bearer")
	}
	if len(e.Details) > 0 {
		writeErrorDetails(ctx, e)
		return
	}
	WriteError(ctx, e.Status, e.Code, e.Message)
}

// writeErrorDetails writes an error body with its details (off the hot path).
func writeErrorDetails(ctx *fasthttp.RequestCtx, e *APIError) {
	type body struct {
		Code    string       `json:"code"`
		Message string       `json:"message"`
		Details []FieldError `json:"details"`
	}
	b, err := json.Marshal(struct {
		Error body `json:"error"`
	}{body{e.Code, e.Message, e.Details}})
	if err != nil { // strings only: cannot happen
		WriteError(ctx, e.Status, e.Code, e.Message)
		return
	}
	WriteBody(ctx, e.Status, b)
}

// logFailure logs an unexpected error: warn for 503s, error for 500s.
func (s *Answers) logFailure(ctx *fasthttp.RequestCtx, e *APIError, err error, orderNo, requestID string) {
	lvl := slog.LevelWarn
	if e.Status == fasthttp.StatusInternalServerError {
		lvl = slog.LevelError
	}
	if !s.Log.Enabled(logCtx, lvl) {
		return
	}
	if orderNo == "" {
		orderNo, _ = ctx.UserValue("orderNo").(string)
	}
	attrs := []any{"method", string(ctx.Method()), "path", string(ctx.Path()), "status", e.Status, "err", err}
	if orderNo != "" {
		attrs = append(attrs, "orderNo", orderNo)
	}
	if requestID != "" {
		attrs = append(attrs, "requestId", requestID)
	}
	s.Log.Log(logCtx, lvl, "request failed", attrs...)
}

// writeError writes the error body.
func WriteError(ctx *fasthttp.RequestCtx, status int, code, message string) {
	var a [256]byte
	b := append(a[:0], `{"error":{"code":`...)
	b = AppendJSONString(b, code)
	b = append(b, `,"message":`...)
	b = AppendJSONString(b, message)
	b = append(b, "}}"...)
	WriteBody(ctx, status, b)
}

// retryAfterSeconds renders d as whole seconds, at least 1.
func RetryAfterSeconds(d float64) string {
	n := int64(d)
	if float64(n) < d {
		n++
	}
	return strconv.FormatInt(max(n, 1), 10)
}
