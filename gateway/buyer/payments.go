package buyer

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/stampede-sh/stampede/auth"
	"github.com/stampede-sh/stampede/gateway/httpapi"
	"github.com/stampede-sh/stampede/order"
	"github.com/stampede-sh/stampede/persistence"
)

// HeaderSignature carries the lower-case hex HMAC-SHA256 of a payment callback's raw
// body, keyed with Config.PaymentSecret.
const HeaderSignature = "X-Signature"

// Sign returns the X-Signature of a payment callback body: hex
// HMAC-SHA256(secret, body). Payment providers (and tests) use it.
func Sign(secret, body []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write(body)
	return hex.EncodeToString(m.Sum(nil))
}

// paymentCallback is POST /api/payments/callback
// {"orderNo", "paymentNo", "amount", "paidAt"} signed in X-Signature. It is
// idempotent per paymentNo: 200 {"result": "SUCCESS"} whether the payment
// paid the order, was seen before, or arrived for a closed order (recorded
// as REFUND_PENDING, the order stays as it is).
//
// 401 BAD_SIGNATURE, 400 INVALID_ARGUMENT, 404 (no such order), 409
// AMOUNT_MISMATCH, 409 INVALID_STATE (order still PROCESSING: retry later),
// 409 PAYMENT_NO_REUSED (the paymentNo already paid another order: a provider
// must not read SUCCESS for a payment that did nothing).
func (s *API) paymentCallback(ctx *fasthttp.RequestCtx) {
	if _, _, err := s.applyPayment(ctx.PostBody(), ctx.Request.Header.Peek(HeaderSignature)); err != nil {
		s.ans.Fail(ctx, err)
		return
	}
	httpapi.WriteBody(ctx, fasthttp.StatusOK, []byte(`{"result":"SUCCESS"}`))
}

// applyPayment is the one code path of every payment, the callback's and the
// demo checkout's: verify the signature of the raw body, decode it strictly,
// apply it with store.Pay.
func (s *API) applyPayment(body, signature []byte) (persistence.PayOutcome, persistence.Order, error) {
	if !s.validSignature(body, signature) {
		return 0, persistence.Order{}, httpapi.ErrBadSignature
	}
	var p persistence.Payment
	fields := [...]httpapi.Field{
		httpapi.StringField("orderNo", &p.OrderNo),
		httpapi.StringField("paymentNo", &p.PaymentNo),
		httpapi.IntField("amount", &p.Amount),
		httpapi.TimeField("paidAt", &p.PaidAt),
	}
	if err := httpapi.DecodeBody(body, s.cfg.MaxBodyBytes, fields[:]); err != nil {
		return 0, persistence.Order{}, err
	}
	switch {
	case !validOrderNo(p.OrderNo):
		return 0, persistence.Order{}, httpapi.InvalidArg("orderNo is not a Stampede orderNo")
	case !order.ValidRequestID(p.PaymentNo):
		return 0, persistence.Order{}, httpapi.InvalidArg("paymentNo must be 1 to 64 characters of [A-Za-z0-9._:-]")
	case p.Amount < 0:
		return 0, persistence.Order{}, httpapi.InvalidArg("amount must not be negative")
	case p.PaidAt.Year() < 1970 || p.PaidAt.Year() > 9999:
		return 0, persistence.Order{}, httpapi.InvalidArg("paidAt is out of range")
	}
	ctx, cancel := s.callCtx(s.cfg.StoreTimeout)
	defer cancel()
	out, o, err := s.store.Pay(ctx, p)
	if err == nil {
		s.statusCache(o) // PAID, or CANCELLED for a payment that came too late
	}
	if errors.Is(err, persistence.ErrInvalidState) {
		return 0, o, httpapi.InvalidState("order is still PROCESSING; retry the callback later")
	}
	return out, o, err
}

// validSignature checks X-Signature in constant time: exactly 64 lower-case
// hex digits (the one form the API documents; upper case is refused).
func (s *API) validSignature(body, signature []byte) bool {
	var got [sha256.Size]byte
	if len(signature) != hex.EncodedLen(sha256.Size) {
		return false
	}
	for _, c := range signature {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	if _, err := hex.Decode(got[:], signature); err != nil {
		return false
	}
	m := hmac.New(sha256.New, s.cfg.PaymentSecret)
	m.Write(body)
	return hmac.Equal(m.Sum(nil), got[:])
}

func validOrderNo(no string) bool {
	_, _, _, err := order.ParseNo(no)
	return err == nil
}

// demoPay is POST /api/orders/{orderNo}/pay, the demo checkout: for the
// caller's WAITING_PAY order it builds the callback a payment provider would
// send (paymentNo "demo-<orderNo>", the order's amount, now), signs it with
// the payment secret and applies it through applyPayment, the callback's own
// path. 200 order; 404; 409 INVALID_STATE when the order is not WAITING_PAY.
func (s *API) demoPay(ctx *fasthttp.RequestCtx, c auth.Claims) {
	no := httpapi.OrderNoParam(ctx)
	if no == "" {
		s.ans.Fail(ctx, persistence.ErrNotFound)
		return
	}
	sctx, cancel := s.callCtx(s.cfg.StoreTimeout)
	o, err := s.store.GetOrder(sctx, no)
	cancel()
	switch {
	case errors.Is(err, persistence.ErrNotFound):
		s.failNotStored(ctx, no, c.UserID)
		return
	case err != nil:
		s.ans.Fail(ctx, err)
		return
	case o.UserID != c.UserID:
		s.ans.Fail(ctx, persistence.ErrNotFound)
		return
	case o.Status != order.WaitingPay:
		s.ans.Fail(ctx, httpapi.InvalidState("order is %s; only WAITING_PAY orders can be paid", o.Status))
		return
	}
	body := demoCallback(o, time.Now())
	out, paid, err := s.applyPayment(body, []byte(Sign(s.cfg.PaymentSecret, body)))
	switch {
	case err != nil:
		s.ans.Fail(ctx, err)
	case out == persistence.PayRefundPending:
		// Closed between the read above and the payment: the money is
		// recorded for refund and the order stays closed.
		s.ans.Fail(ctx, httpapi.InvalidState("order is %s; the payment was recorded for refund", paid.Status))
	default:
		s.ans.JSON(ctx, fasthttp.StatusOK, httpapi.ToOrderJSON(paid))
	}
}

// demoCallback is the callback body of the demo checkout for o.
func demoCallback(o persistence.Order, now time.Time) []byte {
	b := make([]byte, 0, 160)
	b = append(b, `{"orderNo":`...)
	b = httpapi.AppendJSONString(b, o.OrderNo)
	b = append(b, `,"paymentNo":`...)
	b = httpapi.AppendJSONString(b, "demo-"+o.OrderNo)
	b = append(b, `,"amount":`...)
	b = strconv.AppendInt(b, o.Amount, 10)
	b = append(b, `,"paidAt":`...)
	b = httpapi.AppendJSONString(b, now.UTC().Format(time.RFC3339Nano))
	return append(b, '}')
}
