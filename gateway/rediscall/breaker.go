// Package rediscall runs the gateway's Redis calls: every one under a
// deadline and one circuit breaker (Breaker), and those of concurrent
// requests in shared pipelines (PipeBatcher). The buyer's and the
// operator's APIs and the waiting room share one Breaker.
package rediscall

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sony/gobreaker/v2"

	"github.com/stampede-sh/stampede/lua"
)

// Every Redis call of a request goes through one circuit breaker
// (sony/gobreaker). After BreakerFailures consecutive failures it opens and
// Redis-backed endpoints answer 503 UNAVAILABLE without waiting on Redis;
// after BreakerOpen it lets one probe through and closes again if the probe
// succeeds (docs/spec.md §6: "Redis unreachable → 503 fast").

// Breaker is the gateway's one Redis circuit breaker with the deadline of
// every call it lets through.
type Breaker struct {
	cb      *gobreaker.TwoStepCircuitBreaker[struct{}]
	timeout time.Duration // one Redis call (Config.RedisTimeout)
}

// NewBreaker opens after failures consecutive failed calls, stays open for
// open, and gives each call timeout.
func NewBreaker(failures int, open, timeout time.Duration, log *slog.Logger) *Breaker {
	return &Breaker{cb: newRedisBreaker(uint32(failures), open, log), timeout: timeout}
}

// State is the breaker's state.
func (b *Breaker) State() gobreaker.State { return b.cb.State() }

// Allow is the breaker's two-step admission (a probe that bypasses Call).
func (b *Breaker) Allow() (done func(error), err error) { return b.cb.Allow() }

func newRedisBreaker(failures uint32, open time.Duration, log *slog.Logger) *gobreaker.TwoStepCircuitBreaker[struct{}] {
	return gobreaker.NewTwoStepCircuitBreaker[struct{}](gobreaker.Settings{
		Name:        "redis",
		MaxRequests: 1,
		Timeout:     open,
		ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= failures },
		OnStateChange: func(name string, from, to gobreaker.State) {
			lvl := slog.LevelWarn
			if to == gobreaker.StateClosed {
				lvl = slog.LevelInfo
			}
			log.Log(context.Background(), lvl, "circuit breaker state changed", "breaker", name, "from", from.String(), "to", to.String())
		},
	})
}

// Call runs fn behind the breaker with a RedisTimeout deadline. Answers
// of a script (lua sentinels) and redis.Nil count as success: only a failed
// round trip counts against Redis. lua.ErrStockCorrupt (unusable data of one
// product, or a script error on it) counts as success too: Redis answered,
// and one product's bad data must not open the breaker for every product. It returns fn's error, or the breaker's
// when the breaker is open.
func (b *Breaker) Call(fn func(ctx context.Context) error) error {
	done, err := b.cb.Allow()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), b.timeout)
	err = fn(ctx)
	cancel()
	if IsFailure(err) {
		done(err)
	} else {
		done(nil)
	}
	return err
}

// scriptOutcomes are the answers of the Lua scripts: Redis worked.
var scriptOutcomes = []error{
	lua.ErrDuplicate, lua.ErrKeyReused, lua.ErrNotFound, lua.ErrNotActive, lua.ErrSoldOut,
	lua.ErrInsufficient, lua.ErrLimitExceeded, lua.ErrBadQuantity, lua.ErrNegativeAdjust, lua.ErrStockCorrupt, redis.Nil,
	lua.ErrNotReplicated, // WAIT answered: too few replicas in time is not a Redis failure
	lua.ErrPaused, lua.ErrNotAdmitted, lua.ErrRoomOn, lua.ErrRoomOff, lua.ErrPreQueueNotOpen, lua.ErrDrawClosed,
	lua.ErrPowRequired, lua.ErrPowReused, lua.ErrTicketIDTaken, lua.ErrRoomLocked, lua.ErrCommitted,
	lua.ErrClaimRevoked, lua.ErrClaimContended,
}

// IsFailure tells a failed round trip to Redis from an answer of a script.
func IsFailure(err error) bool {
	if err == nil {
		return false
	}
	for _, o := range scriptOutcomes {
		if errors.Is(err, o) {
			return false
		}
	}
	return true
}

// IsConnError tells an error about reaching Redis from one about the command.
func IsConnError(err error) bool {
	var re redis.Error
	return !errors.As(err, &re)
}
