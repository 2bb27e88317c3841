package pipeline

import (
	"errors"
	"log/slog"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/stampede-sh/stampede/persistence"
)

func TestBreakerOpensOnTransientFailuresOnly(t *testing.T) {
	cb := newBreaker("test", slog.New(slog.DiscardHandler))
	permanent := &mysql.MySQLError{Number: 1264, Message: "out of range"}
	deadlock := &mysql.MySQLError{Number: 1213, Message: "deadlock"}
	for range 2 * breakerFailures { // the server answered: never trips
		if err := guard(cb, func() error { return permanent }); !errors.Is(err, permanent) {
			t.Fatalf("permanent: %v", err)
		}
		if err := guard(cb, func() error { return deadlock }); !errors.Is(err, deadlock) {
			t.Fatalf("deadlock: %v", err)
		}
	}
	down := errors.New("dial tcp: connection refused")
	for range breakerFailures {
		guard(cb, func() error { return down })
	}
	called := false
	err := guard(cb, func() error { called = true; return nil })
	if called || !isBreakerRejection(err) || !errors.Is(err, ErrBreakerOpen) {
		t.Fatalf("open breaker ran the call (%v) or returned %v", called, err)
	}
	// Callers retry an open breaker like any outage.
	if !persistence.IsRetryable(err) {
		t.Fatal("open-state error is not retryable")
	}
}
