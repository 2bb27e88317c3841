package room

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"strconv"
	"strings"
	"time"

	altcha "github.com/altcha-org/altcha-lib-go"
	"github.com/valyala/fasthttp"

	"github.com/stampede-sh/stampede/auth"
	"github.com/stampede-sh/stampede/gateway/httpapi"
)

// A price on bots: a room may ask every new ticket (or draw entry) for a
// proof-of-work (RoomSettings.PowCost). The scheme is ALTCHA's (altcha.org,
// its v1 challenge, which the ALTCHA widget of npm package "altcha" v3 still
// solves): the gateway issues a challenge {algorithm SHA-256, challenge =
// hex SHA-256(salt ‖ n) for a secret random n ≤ maxnumber, maxnumber, salt,
// signature = hex HMAC-SHA256(key, challenge)}; the client finds n by trying
// 0, 1, 2, … (maxnumber/2 hashes on average) and sends the widget's payload,
// base64 of {algorithm, challenge, number, salt, signature}. Verifying it
// costs one SHA-256 and one HMAC (github.com/altcha-org/altcha-lib-go).
//
// The salt carries the challenge's terms as URL parameters, which the
// challenge hash binds (changing them needs a SHA-256 preimage): expires
// (unix s), p (the productId) and u (the userId it was issued to), in that
// order and each terminated by "&", the last too: the salt is
// "<24 hex>?expires=<s>&p=<id>&u=<id>&". The hash is of salt ‖ number, so
// without the terminator the number's leading digits could be moved into
// the salt (u=4 → u=42, same hash, same signature); verify parses the
// salt in exactly this form and compares every field as written here. A
// solution therefore works for one user, one product and a bounded time;
// that it works once is room_take.lua's: a new ticket marks the challenge
// used (a key in the room's slot, until it expires), and a second use is
// refused with POW_REUSED.
//
// The HMAC key is STAMPEDE_POW_SECRET (production checks it as it checks
// the other secrets), or one derived from the payment secret, which every
// production gateway holds (never from the JWT secret: a JWKS-only
// deployment has none, and HMAC of the empty key is public).

// powGate issues and verifies the challenges.
type powGate struct {
	key    string
	expiry time.Duration
}

// newPowGate is the gate of key secret, or without one of a key derived
// from paymentSecret (Config.PowSecret).
func newPowGate(secret, paymentSecret []byte, expiry time.Duration) powGate {
	key := secret
	if len(key) == 0 { // derived: one secret less to deploy, and not the payment secret itself
		m := hmac.New(sha256.New, paymentSecret)
		m.Write([]byte("stampede proof-of-work v2"))
		key = m.Sum(nil)
	}
	return powGate{key: hex.EncodeToString(key), expiry: expiry}
}

// challengeJSON is GET /api/products/{id}/queue/challenge: what the ALTCHA
// widget fetches (its challengeurl / challenge attribute).
type challengeJSON struct {
	Algorithm string `json:"algorithm"`
	Challenge string `json:"challenge"`
	MaxNumber int64  `json:"maxnumber"`
	Salt      string `json:"salt"`
	Signature string `json:"signature"`
}

// challenge issues a challenge of cost (maxnumber) for userID and productID.
func (g powGate) challenge(userID, productID, cost int64, now time.Time) (challengeJSON, error) {
	var r [12]byte
	if _, err := rand.Read(r[:]); err != nil {
		return challengeJSON{}, err
	}
	salt := powSalt(hex.EncodeToString(r[:]), now.Add(g.expiry).Unix(), productID, userID)
	c, err := altcha.CreateChallenge(altcha.ChallengeOptions{Algorithm: altcha.SHA256, MaxNumber: cost, HMACKey: g.key, Salt: salt})
	if err != nil {
		return challengeJSON{}, err
	}
	return challengeJSON{Algorithm: c.Algorithm, Challenge: c.Challenge, MaxNumber: c.MaxNumber, Salt: c.Salt, Signature: c.Signature}, nil
}

// powSalt is the salt of a challenge: "<random>?expires=<s>&p=<productId>&u=<userId>&".
func powSalt(random string, expires, productID, userID int64) string {
	b := make([]byte, 0, 96)
	b = append(b, random...)
	b = append(b, "?expires="...)
	b = strconv.AppendInt(b, expires, 10)
	b = append(b, "&p="...)
	b = strconv.AppendInt(b, productID, 10)
	b = append(b, "&u="...)
	b = strconv.AppendInt(b, userID, 10)
	return string(append(b, '&'))
}

// powSaltExpiry parses salt as powSalt writes it for userID and productID
// and returns its expiry (unix s); false for any other salt: another user
// or product, a field changed, added, moved or unterminated.
func powSaltExpiry(salt string, userID, productID int64) (int64, bool) {
	random, terms, ok := strings.Cut(salt, "?expires=")
	if !ok || len(random) != 24 || strings.Trim(random, "0123456789abcdef") != "" {
		return 0, false
	}
	exp, rest, ok := strings.Cut(terms, "&")
	if !ok {
		return 0, false
	}
	e, err := strconv.ParseInt(exp, 10, 64)
	if err != nil || strconv.FormatInt(e, 10) != exp {
		return 0, false
	}
	return e, rest == "p="+strconv.FormatInt(productID, 10)+"&u="+strconv.FormatInt(userID, 10)+"&"
}

// verify checks an ALTCHA payload for userID and productID at now: its
// signature, its solution, its expiry and its terms (the salt exactly as
// issued). It returns the challenge (64 hex digits) to mark used and how
// long the mark must live (until the challenge expires). errPowInvalid
// otherwise.
func (g powGate) verify(payload string, userID, productID int64, now time.Time) (challenge string, ttl time.Duration, err error) {
	raw, err := base64.StdEncoding.DecodeString(payload)
	if err != nil || len(raw) > 2048 {
		return "", 0, httpapi.ErrPowInvalid
	}
	var p altcha.Payload
	if err := json.Unmarshal(raw, &p); err != nil || p.Algorithm != string(altcha.SHA256) || len(p.Challenge) != 64 {
		return "", 0, httpapi.ErrPowInvalid
	}
	if _, err := hex.DecodeString(p.Challenge); err != nil {
		return "", 0, httpapi.ErrPowInvalid
	}
	exp, ok := powSaltExpiry(p.Salt, userID, productID)
	if !ok {
		return "", 0, httpapi.ErrPowInvalid
	}
	left := time.Unix(exp, 0).Sub(now)
	if left <= 0 {
		return "", 0, httpapi.ErrPowInvalid
	}
	ok, err = altcha.VerifySolutionSafe(p, g.key, false) // expiry checked above, on our clock
	if err != nil || !ok {
		return "", 0, httpapi.ErrPowInvalid
	}
	return p.Challenge, left, nil
}

// queueChallenge is GET /api/products/{id}/queue/challenge (buyer): a
// proof-of-work challenge for a new ticket in the product's room, bound to
// the caller, the product and Config.PowExpiry.
//
//	200 {"algorithm","challenge","maxnumber","salt","signature"}
//	404 PRODUCT_NOT_FOUND; 409 WAITING_ROOM_OFF; 409 POW_NOT_REQUIRED (the room asks none)
func (s *Room) queueChallenge(ctx *fasthttp.RequestCtx, c auth.Claims) {
	productID, ok := s.ProductID(ctx)
	if !ok {
		return
	}
	cost, err := s.roomPowCost(productID)
	if err != nil {
		s.ans.Fail(ctx, err)
		return
	}
	if cost <= 0 {
		s.ans.Fail(ctx, httpapi.ErrPowNotRequired)
		return
	}
	ch, err := s.pow.challenge(c.UserID, productID, cost, time.Now())
	if err != nil {
		s.ans.Fail(ctx, err)
		return
	}
	ctx.Response.Header.Set("Cache-Control", "no-store")
	s.ans.JSON(ctx, fasthttp.StatusOK, ch)
}

// VerifyPow checks a proof-of-work payload for userID and productID at now
// as POST /api/products/{id}/queue does (httpapi.ErrPowInvalid when it does
// not verify); it marks nothing used.
func (s *Room) VerifyPow(payload string, userID, productID int64, now time.Time) error {
	_, _, err := s.pow.verify(payload, userID, productID, now)
	return err
}
