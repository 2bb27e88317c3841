package pipeline

import (
	"context"
	"database/sql/driver"
	"errors"
	"io"
	"log/slog"
	"net"
	"syscall"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/sony/gobreaker/v2"

	"github.com/stampede-sh/stampede/persistence"
)

// Circuit breakers of the pipeline (sony/gobreaker/v2). Each writer, relay
// and consumer keeps one per dependency. After breakerFailures consecutive
// transient failures (persistence.IsRetryable: connection refused, timeout,
// deadlock, …) the breaker opens for breakerOpen: calls then fail at once
// with gobreaker.ErrOpenState, which every caller treats as transient — the
// writer and relay back off, the consumer sends the message to its delay
// queue — so an outage is probed once per breakerOpen instead of being
// hammered by every worker. Any MySQL server error (a constraint violation,
// but also a deadlock or lock wait timeout: contention, not an outage) means
// the server answered, and counts as success.
const (
	breakerFailures = 5
	breakerOpen     = 2 * time.Second
)

// ErrBreakerOpen is gobreaker's open-state error, for errors.Is.
var ErrBreakerOpen = gobreaker.ErrOpenState

type breaker = gobreaker.CircuitBreaker[struct{}]

func newBreaker(name string, log *slog.Logger) *breaker {
	return gobreaker.NewCircuitBreaker[struct{}](gobreaker.Settings{
		Name:        name,
		MaxRequests: 1,
		Timeout:     breakerOpen,
		ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= breakerFailures },
		IsSuccessful: func(err error) bool {
			var me *mysql.MySQLError // any server answer, deadlocks included: MySQL is up
			return err == nil || errors.Is(err, context.Canceled) || errors.As(err, &me) || !persistence.IsRetryable(err)
		},
		OnStateChange: func(name string, from, to gobreaker.State) {
			lvl := slog.LevelWarn
			if to == gobreaker.StateClosed {
				lvl = slog.LevelInfo
			}
			log.Log(context.Background(), lvl, "circuit breaker state changed", "breaker", name, "from", from.String(), "to", to.String())
		},
	})
}

// guard runs fn behind cb.
func guard(cb *breaker, fn func() error) error {
	_, err := cb.Execute(func() (struct{}, error) { return struct{}{}, fn() })
	return err
}

// isBreakerRejection reports a call the breaker refused without running it.
func isBreakerRejection(err error) bool {
	return errors.Is(err, gobreaker.ErrOpenState) || errors.Is(err, gobreaker.ErrTooManyRequests)
}

// outageRetryLevel is the delay queue level a message waits in while its
// dependency is unreachable (see isOutage).
const outageRetryLevel = 3

// isOutage reports an error that means the dependency did not answer at all:
// the breaker refused the call, or the connection failed (refused, reset,
// timed out, closed). A MySQL server error — a deadlock too — or a Redis
// script result is an answer, not an outage.
func isOutage(err error) bool {
	if err == nil {
		return false
	}
	if isBreakerRejection(err) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, driver.ErrBadConn) || errors.Is(err, mysql.ErrInvalidConn) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, context.DeadlineExceeded)
}
