package gateway

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/url"
	"strconv"
	"time"

	altcha "github.com/altcha-org/altcha-lib-go"
	"github.com/valyala/fasthttp"

	"github.com/stampede-sh/stampede/auth"
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
// (unix s), u (the userId it was issued to) and p (the productId). A
// solution therefore works for one user, one product and a bounded time;
// that it works once is room_take.lua's: a new ticket marks the challenge
// used (a key in the room's slot, until it expires), and a second use is
// refused with POW_REUSED.

// errPowInvalid: a solution that does not verify, has expired, or was
// issued to another user or product.
var errPowInvalid = errors.New("gateway: proof-of-work invalid")

// powGate issues and verifies the challenges.
type powGate struct {
	key    string
	expiry time.Duration
}

func newPowGate(secret []byte, jwtSecret []byte, expiry time.Duration) powGate {
	key := secret
	if len(key) == 0 { // derived: one secret less to deploy, and not the JWT secret itself
		m := hmac.New(sha256.New, jwtSecret)
		m.Write([]byte("stampede proof-of-work v1"))
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
	exp := now.Add(g.expiry)
	c, err := altcha.CreateChallenge(altcha.ChallengeOptions{Algorithm: altcha.SHA256, MaxNumber: cost, HMACKey: g.key,
		Expires: &exp, Params: url.Values{"u": {strconv.FormatInt(userID, 10)}, "p": {strconv.FormatInt(productID, 10)}}})
	if err != nil {
		return challengeJSON{}, err
	}
	return challengeJSON{Algorithm: c.Algorithm, Challenge: c.Challenge, MaxNumber: c.MaxNumber, Salt: c.Salt, Signature: c.Signature}, nil
}

// verify checks an ALTCHA payload for userID and productID at now: its
// signature, its solution, its expiry and its terms. It returns the
// challenge (64 hex digits) to mark used and how long the mark must live
// (until the challenge expires). errPowInvalid otherwise.
func (g powGate) verify(payload string, userID, productID int64, now time.Time) (challenge string, ttl time.Duration, err error) {
	raw, err := base64.StdEncoding.DecodeString(payload)
	if err != nil || len(raw) > 2048 {
		return "", 0, errPowInvalid
	}
	var p altcha.Payload
	if err := json.Unmarshal(raw, &p); err != nil || p.Algorithm != string(altcha.SHA256) || len(p.Challenge) != 64 {
		return "", 0, errPowInvalid
	}
	if _, err := hex.DecodeString(p.Challenge); err != nil {
		return "", 0, errPowInvalid
	}
	params := altcha.ExtractParams(p)
	exp, err := strconv.ParseInt(params.Get("expires"), 10, 64)
	if err != nil || params.Get("u") != strconv.FormatInt(userID, 10) || params.Get("p") != strconv.FormatInt(productID, 10) {
		return "", 0, errPowInvalid
	}
	left := time.Unix(exp, 0).Sub(now)
	if left <= 0 {
		return "", 0, errPowInvalid
	}
	ok, err := altcha.VerifySolutionSafe(p, g.key, false) // expiry checked above, on our clock
	if err != nil || !ok {
		return "", 0, errPowInvalid
	}
	return p.Challenge, left, nil
}

// queueChallenge is GET /api/products/{id}/queue/challenge (buyer): a
// proof-of-work challenge for a new ticket in the product's room, bound to
// the caller, the product and Config.PowExpiry.
//
//	200 {"algorithm","challenge","maxnumber","salt","signature"}
//	404 PRODUCT_NOT_FOUND; 409 WAITING_ROOM_OFF; 409 POW_NOT_REQUIRED (the room asks none)
func (s *Server) queueChallenge(ctx *fasthttp.RequestCtx, c auth.Claims) {
	productID, ok := s.roomProductID(ctx)
	if !ok {
		return
	}
	cost, err := s.roomPowCost(productID)
	if err != nil {
		s.fail(ctx, err)
		return
	}
	if cost <= 0 {
		s.fail(ctx, errPowNotRequired)
		return
	}
	ch, err := s.pow.challenge(c.UserID, productID, cost, time.Now())
	if err != nil {
		s.fail(ctx, err)
		return
	}
	ctx.Response.Header.Set("Cache-Control", "no-store")
	s.writeJSON(ctx, fasthttp.StatusOK, ch)
}
