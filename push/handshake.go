package push

import (
	"math"
	"net"
	"net/http"
	"strconv"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"golang.org/x/time/rate"
)

// Handshake limits (issue 26): a socket's handshake costs a token check and,
// once authenticated, a read of the user's recent orders; one user (or one
// address) opening sockets in a loop must not turn that into a database
// load. Two token buckets (golang.org/x/time/rate), each ten seconds' worth:
// per client address before the token is looked at (429 before the upgrade:
// nothing is parsed), and per user after it and before any read
// (Config.HandshakeAddrRate, HandshakeUserRate). The buckets live in LRUs
// of handshakeKeys entries each, so memory is bounded; a bucket evicted
// early only forgives its key.

const handshakeKeys = 1 << 16

// handshakeLimiter is one kind of bucket; nil: no limit.
type handshakeLimiter struct {
	rate    rate.Limit
	burst   int
	buckets *lru.Cache[string, *rate.Limiter]
}

func newHandshakeLimiter(perSecond float64) *handshakeLimiter {
	if perSecond <= 0 {
		return nil
	}
	c, err := lru.New[string, *rate.Limiter](handshakeKeys)
	if err != nil { // a positive size: not reached
		panic(err)
	}
	return &handshakeLimiter{rate: rate.Limit(perSecond), burst: max(1, int(math.Ceil(10*perSecond))), buckets: c}
}

// allow takes a token of key's bucket; false with the wait before the next
// one when it is empty.
func (l *handshakeLimiter) allow(key string, now time.Time) (bool, time.Duration) {
	if l == nil {
		return true, 0
	}
	b, ok := l.buckets.Get(key)
	if !ok {
		b = rate.NewLimiter(l.rate, l.burst)
		if prev, found, _ := l.buckets.PeekOrAdd(key, b); found {
			b = prev
		}
	}
	r := b.ReserveN(now, 1)
	if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now)
		return false, d
	}
	return true, 0
}

// clientAddr is the address a handshake came from: the peer's IP, or "" for
// a loopback peer (not limited: see Config.HandshakeAddrRate).
func clientAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return ""
	}
	return host
}

// retryAfter is d as a Retry-After value: whole seconds, at least 1.
func retryAfter(d time.Duration) string {
	return strconv.FormatInt(max(1, int64(math.Ceil(d.Seconds()))), 10)
}
