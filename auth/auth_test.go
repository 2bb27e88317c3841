package auth_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stampede-sh/stampede/auth"
)

func TestIssueVerify(t *testing.T) {
	secret := []byte("s3cret")
	v := auth.NewVerifier(secret)
	tok, err := auth.Issue(secret, auth.MaxDirectUserID, true, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	c, err := v.Verify(tok)
	if err != nil || c.UserID != auth.MaxDirectUserID || !c.Admin {
		t.Fatalf("claims %+v err %v", c, err)
	}
	for name, bad := range map[string]string{
		"garbage": "x.y.z",
		"empty":   "",
	} {
		if _, err := v.Verify(bad); !errors.Is(err, auth.ErrUnauthenticated) {
			t.Errorf("%s: %v", name, err)
		}
	}
	other, _ := auth.Issue([]byte("other"), 1, false, time.Minute)
	if _, err := v.Verify(other); !errors.Is(err, auth.ErrUnauthenticated) {
		t.Errorf("wrong secret accepted")
	}
	expired, _ := auth.Issue(secret, 1, false, -time.Minute)
	if _, err := v.Verify(expired); !errors.Is(err, auth.ErrUnauthenticated) {
		t.Errorf("expired token accepted")
	}
	if _, err := auth.Issue(secret, 0, false, time.Minute); err == nil {
		t.Errorf("userId 0 issued")
	}
}
