package gateway

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"testing"
)

// solveChallenge fetches a challenge for user and product through the API
// and solves it as the ALTCHA widget does (SHA-256 of salt ‖ n for n = 0,
// 1, …), returning the widget's payload.
func solveChallenge(t *testing.T, e *env, user, pid int64) string {
	t.Helper()
	r := e.do("GET", fmt.Sprintf("/api/products/%d/queue/challenge", pid), token(t, user), nil)
	if r.status != 200 {
		t.Fatalf("challenge: %s", r)
	}
	var c challengeJSON
	if err := json.Unmarshal(r.body, &c); err != nil {
		t.Fatal(err)
	}
	n, ok := solve(c)
	if !ok {
		t.Fatalf("challenge %+v has no solution up to maxnumber", c)
	}
	return payloadOf(c, n)
}

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

// challengeJSON decodes GET /api/products/{id}/queue/challenge.
type challengeJSON struct {
	Algorithm string `json:"algorithm"`
	Challenge string `json:"challenge"`
	MaxNumber int64  `json:"maxnumber"`
	Salt      string `json:"salt"`
	Signature string `json:"signature"`
}
