package room

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"
)

var testPaySecret = []byte("gateway-test-payment-secret")

// solve finds the number of a challenge the fast way a bot would: one
// SHA-256 per try, no allocation, no hex encoding.
func solve(c challengeJSON) (int64, bool) {
	want, _ := hex.DecodeString(c.Challenge)
	buf := append([]byte(nil), c.Salt...)
	for n := int64(0); n <= c.MaxNumber; n++ {
		b := strconv.AppendInt(buf, n, 10)
		if h := sha256.Sum256(b); bytes.Equal(h[:], want) {
			return n, true
		}
	}
	return 0, false
}

func payloadOf(c challengeJSON, n int64) string {
	b, _ := json.Marshal(map[string]any{"algorithm": c.Algorithm, "challenge": c.Challenge, "number": n, "salt": c.Salt,
		"signature": c.Signature, "took": 1})
	return base64.StdEncoding.EncodeToString(b)
}

// Verifying a solution costs microseconds (docs/sale-lifecycle.md, "A price on bots").
func BenchmarkPowVerify(b *testing.B) {
	g := newPowGate(nil, []byte("bench-payment-secret"), 5*time.Minute)
	c, err := g.challenge(42, 7, 1000, time.Now())
	if err != nil {
		b.Fatal(err)
	}
	n, _ := solve(c)
	p := payloadOf(c, n)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if _, _, err := g.verify(p, 42, 7, time.Now()); err != nil {
			b.Fatal(err)
		}
	}
}

// Solving costs about cost/2 hashes on average: the time per challenge of
// a native solver at each cost (a bot farm's price; docs/sale-lifecycle.md "A price on
// bots").
func BenchmarkPowSolve(b *testing.B) {
	g := newPowGate(nil, []byte("bench-payment-secret"), 5*time.Minute)
	for _, cost := range []int64{10_000, 100_000, 1_000_000} {
		b.Run(strconv.FormatInt(cost, 10), func(b *testing.B) {
			var tries int64
			for i := range b.N {
				c, err := g.challenge(int64(i), 7, cost, time.Now())
				if err != nil {
					b.Fatal(err)
				}
				n, ok := solve(c)
				if !ok {
					b.Fatal("no solution")
				}
				tries += n + 1
			}
			b.ReportMetric(float64(tries)/float64(b.N), "hashes/op")
		})
	}
}

var updateAltcha = flag.Bool("update-altcha", false, "rewrite testdata/altcha_vector.json")

// altchaVector is testdata/altcha_vector.json, which
// client/tests/altcha.test.js solves with the ALTCHA widget's own solver
// (npm altcha, the v1 challenge as the widget converts it): the widget and
// this gateway must agree on the number and the payload.
type altchaVector struct {
	Note      string        `json:"note"`
	Key       string        `json:"key"` // HMAC key (hex) of the gate that issued it
	UserID    int64         `json:"userId"`
	ProductID int64         `json:"productId"`
	Challenge challengeJSON `json:"challenge"`
	Number    int64         `json:"number"`
	Payload   string        `json:"payload"`
}

// The gateway verifies the payload built from the widget's solution of a
// challenge it issued (and the vector file is this gate's).
func TestAltchaVector(t *testing.T) {
	g := powGate{key: "00112233445566778899aabbccddeeff", expiry: 100 * 365 * 24 * time.Hour}
	path := "../testdata/altcha_vector.json" // read by client/tests/altcha.test.js too
	if *updateAltcha {
		c, err := g.challenge(42, 7, 5000, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
		if err != nil {
			t.Fatal(err)
		}
		n, ok := solve(c)
		if !ok {
			t.Fatal("no solution")
		}
		b, _ := json.MarshalIndent(altchaVector{Note: "go test ./gateway -run TestAltchaVector -update-altcha; read by client/tests/altcha.test.js",
			Key: g.key, UserID: 42, ProductID: 7, Challenge: c, Number: n, Payload: payloadOf(c, n)}, "", " ")
		if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var v altchaVector
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	g.key = v.Key
	if n, ok := solve(v.Challenge); !ok || n != v.Number {
		t.Fatalf("the vector's number %d, solved %d", v.Number, n)
	}
	ch, ttl, err := g.verify(v.Payload, v.UserID, v.ProductID, time.Now())
	if err != nil || ch != v.Challenge.Challenge || ttl <= 0 {
		t.Fatalf("verify the vector's payload: %q %v %v", ch, ttl, err)
	}
	// The payload as the widget builds it (its field order and its "took")
	// verifies too.
	widget := base64.StdEncoding.EncodeToString([]byte(fmt.Sprintf(`{"algorithm":"SHA-256","challenge":%q,"number":%d,"salt":%q,"signature":%q,"took":123.4}`,
		v.Challenge.Challenge, v.Number, v.Challenge.Salt, v.Challenge.Signature)))
	if _, _, err := g.verify(widget, v.UserID, v.ProductID, time.Now()); err != nil {
		t.Fatalf("the widget's payload: %v", err)
	}
	if _, _, err := g.verify(widget, v.UserID+1, v.ProductID, time.Now()); err == nil {
		t.Fatal("the vector verified for another user")
	}
}

// A solution stays with the user (and product) it was issued to: moving the
// number's leading digit into the salt keeps the hash and the signature
// but would turn u=4 into u=4d — refused (before, user 4d got a ticket and
// user 4 then POW_REUSED).
func TestProofOfWorkSolutionCannotMoveToAnotherUser(t *testing.T) {
	g := newPowGate([]byte("pow-test-secret-c81f0a7e5d2b9461e3"), []byte("pay"), time.Minute)
	now := time.Now()
	for tries := 0; ; tries++ {
		c, err := g.challenge(4, 7, 1000, now)
		if err != nil {
			t.Fatal(err)
		}
		n, ok := solve(c)
		digits := strconv.FormatInt(n, 10)
		if !ok || len(digits) < 2 || digits[1] == '0' { // a spliced number keeps no leading zero
			continue
		}
		if _, _, err := g.verify(payloadOf(c, n), 4, 7, now); err != nil {
			t.Fatalf("the honest solution: %v", err)
		}
		forged := c
		forged.Salt += digits[:1]
		rest, _ := strconv.ParseInt(digits[1:], 10, 64)
		victim := int64(40 + digits[0] - '0')
		if _, _, err := g.verify(payloadOf(forged, rest), victim, 7, now); err == nil {
			t.Fatalf("user 4's solution (number %d) moved to user %d by digit splicing (salt %q)", n, victim, forged.Salt)
		}
		return
	}
}

// Without a PoW secret the key is derived from the payment secret, which
// every production gateway holds: never from an empty JWT secret, whose
// derivation anyone can compute (a JWKS-only deployment's, before: a forged
// challenge with number 0 verified).
func TestProofOfWorkKeyIsSecretWithoutAJWTSecret(t *testing.T) {
	public := hmac.New(sha256.New, nil)
	public.Write([]byte("stampede proof-of-work v1"))
	forger := powGate{key: hex.EncodeToString(public.Sum(nil)), expiry: time.Minute}
	// The gateway's room without a PoW secret (the gateway passes no JWT
	// secret to the room at all).
	srv := New(Config{PaymentSecret: testPaySecret, PowExpiry: time.Minute}, Deps{})
	now := time.Now()
	c, err := forger.challenge(5, 7, 10, now)
	if err != nil {
		t.Fatal(err)
	}
	n, _ := solve(c)
	if _, _, err := srv.pow.verify(payloadOf(c, n), 5, 7, now); err == nil {
		t.Fatal("a challenge signed with the key derived from an empty JWT secret verified")
	}
	if srv.pow.key == forger.key || srv.pow.key != newPowGate(nil, testPaySecret, time.Minute).key {
		t.Fatal("the key is not the one derived from the payment secret")
	}
}
