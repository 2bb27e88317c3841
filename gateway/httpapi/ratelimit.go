package httpapi

import (
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
	"golang.org/x/time/rate"
)

// Token buckets in front of the order path (golang.org/x/time/rate): one
// global bucket per gateway instance and one bucket per user. A refused
// request answers 429 RATE_LIMITED with Retry-After and never reaches Redis.
//
// Per-user buckets live in userShards maps keyed by userId. Memory is bounded
// two ways: a shard sweeps out buckets idle longer than refillTime (a bucket
// idle that long is full again, so forgetting it changes no answer) at most
// once per refillTime, and a shard never holds more than perShardCap buckets
// (when full after a sweep it drops an arbitrary one, which only forgives that
// user early).

const (
	userShards  = 64
	perShardCap = 4096 // 262,144 buckets per gateway at most, ~100 B each
)

type RateLimiter struct {
	global    *rate.Limiter // nil: off
	userRate  rate.Limit    // 0: per-user buckets off
	userBurst int
	idle      time.Duration // a bucket idle this long is full: evictable
	shards    [userShards]userShard
}

type userShard struct {
	mu        sync.Mutex
	m         map[int64]*userBucket
	lastSweep time.Time
}

type userBucket struct {
	lim  *rate.Limiter
	seen time.Time
}

// newRateLimiter returns nil when both limits are off.
func NewRateLimiter(globalRate float64, globalBurst int, userRate float64, userBurst int) *RateLimiter {
	if globalRate <= 0 && userRate <= 0 {
		return nil
	}
	l := &RateLimiter{}
	if globalRate > 0 {
		l.global = rate.NewLimiter(rate.Limit(globalRate), max(globalBurst, 1))
	}
	if userRate > 0 {
		l.userRate, l.userBurst = rate.Limit(userRate), max(userBurst, 1)
		l.idle = max(time.Duration(float64(l.userBurst)/userRate*float64(time.Second)), time.Second)
		for i := range l.shards {
			l.shards[i].m = make(map[int64]*userBucket)
		}
	}
	return l
}

// allow takes one token from userID's bucket and then from the global one.
// When refused it returns how long until a token is due.
func (l *RateLimiter) Allow(userID int64, now time.Time) (bool, time.Duration) {
	if l.userRate > 0 {
		if ok, wait := l.allowUser(userID, now); !ok {
			return false, wait
		}
	}
	if l.global != nil && !l.global.AllowN(now, 1) {
		return false, tokenWait(l.global, now)
	}
	return true, 0
}

func (l *RateLimiter) allowUser(userID int64, now time.Time) (bool, time.Duration) {
	sh := &l.shards[uint64(userID)%userShards]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	b := sh.m[userID]
	if b == nil {
		if len(sh.m) >= perShardCap || now.Sub(sh.lastSweep) >= l.idle {
			sh.sweep(now, l.idle)
		}
		b = &userBucket{lim: rate.NewLimiter(l.userRate, l.userBurst)}
		sh.m[userID] = b
	}
	b.seen = now
	if b.lim.AllowN(now, 1) {
		return true, 0
	}
	return false, tokenWait(b.lim, now)
}

// sweep drops buckets idle for at least idle; if the shard is still full it
// drops arbitrary ones until there is room. Called with mu held.
func (sh *userShard) sweep(now time.Time, idle time.Duration) {
	sh.lastSweep = now
	for id, b := range sh.m {
		if now.Sub(b.seen) >= idle {
			delete(sh.m, id)
		}
	}
	for id := range sh.m {
		if len(sh.m) < perShardCap {
			break
		}
		delete(sh.m, id)
	}
}

// size is the number of per-user buckets held (tests).
func (l *RateLimiter) size() int {
	n := 0
	for i := range l.shards {
		l.shards[i].mu.Lock()
		n += len(l.shards[i].m)
		l.shards[i].mu.Unlock()
	}
	return n
}

// tokenWait is the time until lim has one token again.
func tokenWait(lim *rate.Limiter, now time.Time) time.Duration {
	missing := 1 - lim.TokensAt(now)
	if missing <= 0 || lim.Limit() <= 0 {
		return 0
	}
	return time.Duration(missing / float64(lim.Limit()) * float64(time.Second))
}

// TooMany answers 429 RATE_LIMITED with Retry-After (whole seconds, at
// least 1).
func TooMany(ctx *fasthttp.RequestCtx, wait time.Duration) {
	secs := int64(math.Ceil(wait.Seconds()))
	ctx.Response.Header.Set("Retry-After", strconv.FormatInt(max(secs, 1), 10))
	WriteError(ctx, fasthttp.StatusTooManyRequests, CodeRateLimited, "too many requests; retry after the time in Retry-After")
}
