package gateway

import (
	"context"
	"errors"
	"log/slog"

	"github.com/redis/go-redis/v9"
	"github.com/sony/gobreaker/v2"

	"github.com/stampede-sh/stampede/lua"
)

// Every Redis call of a request goes through one circuit breaker
// (sony/gobreaker). After BreakerFailures consecutive failures it opens and
// Redis-backed endpoints answer 503 UNAVAILABLE without waiting on Redis;
// after BreakerOpen it lets one probe through and closes again if the probe
// succeeds (SPEC §6: "Redis unreachable → 503 fast").

func newRedisBreaker(cfg Config, log *slog.Logger) *gobreaker.TwoStepCircuitBreaker[struct{}] {
	failures := uint32(cfg.BreakerFailures)
	return gobreaker.NewTwoStepCircuitBreaker[struct{}](gobreaker.Settings{
		Name:        "redis",
		MaxRequests: 1,
		Timeout:     cfg.BreakerOpen,
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

// redisCall runs fn behind the breaker with a RedisTimeout deadline. Answers
// of a script (lua sentinels) and redis.Nil count as success: only a failed
// round trip counts against Redis. lua.ErrStockCorrupt (unusable data of one
// product, or a script error on it) counts as success too: Redis answered,
// and one product's bad data must not open the breaker for every product. It returns fn's error, or the breaker's
// when the breaker is open.
func (s *Server) redisCall(fn func(ctx context.Context) error) error {
	done, err := s.breaker.Allow()
	if err != nil {
		return err
	}
	ctx, cancel := s.callCtx(s.cfg.RedisTimeout)
	err = fn(ctx)
	cancel()
	if isRedisFailure(err) {
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

func isRedisFailure(err error) bool {
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
