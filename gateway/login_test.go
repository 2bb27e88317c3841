package gateway

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stampede-sh/stampede/auth"
)

func issueWith(secret []byte, userID int64) (string, error) {
	return auth.Issue(secret, userID, false, time.Hour)
}

func TestLogin(t *testing.T) {
	e := newEnv(t)
	v := auth.NewVerifier(testJWTSecret)
	for _, tc := range []struct {
		user  int64
		admin bool
	}{{42, false}, {adminID, true}, {auth.MaxDirectUserID, false}} {
		r := e.do("POST", "/api/auth/login", "", map[string]int64{"userId": tc.user})
		if r.status != 200 {
			t.Fatalf("login %d: %s", tc.user, r)
		}
		var b struct {
			Token  string
			UserID json.Number
		}
		d := json.NewDecoder(strings.NewReader(string(r.body)))
		d.UseNumber()
		if err := d.Decode(&b); err != nil {
			t.Fatal(err)
		}
		c, err := v.Verify(b.Token)
		if err != nil || c.UserID != tc.user || c.Admin != tc.admin || b.UserID.String() != json.Number(itoa(tc.user)).String() {
			t.Fatalf("login %d: claims %+v %v, body %s", tc.user, c, err, r.body)
		}
		// Admin tokens live at most an hour, buyers' at most a day.
		bound := auth.MaxTokenTTL
		if tc.admin {
			bound = auth.MaxAdminTokenTTL
		}
		if left := time.Until(c.Expires); left > bound || left < bound-time.Minute {
			t.Errorf("login %d: token valid %v more, want about %v", tc.user, left, bound)
		}
	}
	for _, body := range []string{
		`{"userId":0}`, `{"userId":-1}`, `{"userId":1.0}`, `{"userId":"42"}`, `{"userId":9223372036854775808}`,
		`{"userId":1,"role":"admin"}`, `{}`, `{"userid":1}`,
		// The mapped range belongs to identity-provider subjects.
		`{"userId":1000000000000000}`, `{"userId":9223372036854775807}`,
	} {
		r := e.do("POST", "/api/auth/login", "", malformed(body))
		msg := r.wantError(t, 400, CodeInvalidArgument)
		if !strings.Contains(msg, "userId") && !strings.Contains(msg, "role") && !strings.Contains(msg, "userid") {
			t.Errorf("%s: message %q names no field", body, msg)
		}
	}
	// A token from the login authenticates.
	r := e.do("POST", "/api/auth/login", "", `{"userId":5}`)
	var b struct{ Token string }
	json.Unmarshal(r.body, &b)
	if r := e.do("GET", "/api/orders", b.Token, nil); r.status != 200 {
		t.Fatalf("list with login token: %s", r)
	}
}

func TestLoginDisabled(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.DisableDemoLogin = true })
	e.do("POST", "/api/auth/login", "", `{"userId":42}`).wantError(t, 404, CodeNotFound)
}

func itoa(n int64) string { b, _ := json.Marshal(n); return string(b) }
