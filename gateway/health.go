package gateway

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sony/gobreaker/v2"
	"github.com/valyala/fasthttp"

	"github.com/stampede-sh/stampede/gateway/httpapi"
	"github.com/stampede-sh/stampede/lua"
)

// readyProbe is a shard of product 0, which never exists (ids start at 1):
// running reserve against it executes the script and writes nothing.
var readyProbe = lua.ShardKeys(0, 0)

// Ready reports whether the gateway can serve orders: Redis answers and runs
// the reserve script (loading it if its cache was flushed), MySQL answers a
// ping, the last watch of Redis's settings found every node's
// maxmemory-policy noeviction (redischeck.go) and Config.ReadyCheck, if set,
// passes. The error names every
// dependency that failed, e.g. "redis: ...; mysql: ...". Its Redis probe
// bypasses the circuit breaker, so it tells when Redis is back, and a
// successful probe closes a half-open breaker; while the breaker is not
// closed the gateway is not ready (orders would still get 503).
func (s *Server) Ready(ctx context.Context) error {
	var errs []error
	_, err := lua.Reserve(ctx, s.rdb, readyProbe, lua.ReserveArgs{
		OrderNo: "readyz", UserID: 0, RequestID: "readyz", Quantity: 1, TTL: time.Second,
	})
	if !errors.Is(err, lua.ErrNotFound) {
		if err == nil {
			err = errors.New("reserve script accepted a probe for a missing product")
		}
		errs = append(errs, fmt.Errorf("redis: %w", err))
	} else if s.breaker.State() != gobreaker.StateClosed {
		// Redis answers, but orders would still get 503 until the breaker
		// closes: let this successful probe count as the breaker's trial
		// (possible once it is half-open) and stay not ready until closed.
		if done, aerr := s.breaker.Allow(); aerr == nil {
			done(nil)
		}
		if st := s.breaker.State(); st != gobreaker.StateClosed {
			errs = append(errs, fmt.Errorf("redis: answers again, circuit breaker still %s", st))
		}
	}
	if err := s.redisConfError(); err != nil { // redischeck.go: the policy changed at run time
		errs = append(errs, err)
	}
	if !s.nodeValid(time.Now()) {
		errs = append(errs, errors.New("no orderNo node id leased yet"))
	}
	if err := s.store.Ping(ctx); err != nil {
		errs = append(errs, fmt.Errorf("mysql: %w", err))
	}
	if s.cfg.ReadyCheck != nil {
		if err := s.cfg.ReadyCheck(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) == 0 {
		return nil
	}
	return &readyError{parts: errs}
}

// readyError is Ready's error: every dependency that failed, joined by
// "; ".
type readyError struct{ parts []error }

func (e *readyError) Error() string {
	msg := e.parts[0].Error()
	for _, p := range e.parts[1:] {
		msg += "; " + p.Error()
	}
	return msg
}

func (e *readyError) Unwrap() []error { return e.parts }

// PublicNotReady marks a readiness error (of Config.ReadyCheck) whose text
// holds no address or credential, "<dependency>: <reason>", so /readyz
// shows it whole, e.g. "rabbitmq: broker blocked publishers (low on
// memory)", instead of the dependency's name alone.
func PublicNotReady(err error) error { return &publicNotReady{err} }

type publicNotReady struct{ err error }

func (e *publicNotReady) Error() string { return e.err.Error() }
func (e *publicNotReady) Unwrap() error { return e.err }

// readyz is GET /readyz: 200 {"status":"ready"}, or 503 UNAVAILABLE whose
// message names the failed dependencies ("not ready: redis, mysql") and no
// more: the errors themselves, which carry internal addresses, go to the log.
func (s *Server) readyz(ctx *fasthttp.RequestCtx) {
	rctx, cancel := s.callCtx(s.cfg.ReadyTimeout)
	err := s.Ready(rctx)
	cancel()
	if err != nil {
		s.logNotReady(err)
		ctx.Response.Header.Set("Retry-After", s.ans.RetryAfter)
		httpapi.WriteError(ctx, fasthttp.StatusServiceUnavailable, httpapi.CodeUnavailable, "not ready: "+failedDependencies(err))
		return
	}
	httpapi.WriteBody(ctx, fasthttp.StatusOK, []byte(`{"status":"ready"}`))
}

// failedDependencies names the dependencies of a Ready error: the prefix
// before ": " of each of its "; "-separated parts ("redis", "mysql",
// "rabbitmq"), or "node id" for a missing node lease; a part marked
// PublicNotReady is shown whole.
func failedDependencies(err error) string {
	var names, public []string
	var parts []string
	var re *readyError
	if errors.As(err, &re) {
		for _, p := range re.parts {
			var pub *publicNotReady
			if errors.As(p, &pub) {
				public = append(public, pub.Error())
				continue
			}
			parts = append(parts, strings.Split(p.Error(), "; ")...)
		}
	} else {
		parts = strings.Split(err.Error(), "; ")
	}
	for _, part := range parts {
		name, _, ok := strings.Cut(part, ": ")
		switch {
		case ok && name != "" && !strings.ContainsAny(name, " /:@"):
		case strings.Contains(part, "node id"):
			name = "node id"
		default:
			name = "dependency"
		}
		if !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	return strings.Join(append(names, public...), ", ")
}

// notReadyLog limits the "not ready" log lines of readyz: a poller asking
// every few milliseconds gets one line per change of the error, or per 10s.
type notReadyLog struct {
	mu   sync.Mutex
	last string
	at   time.Time
}

func (s *Server) logNotReady(err error) {
	msg := err.Error()
	l := &s.notReady
	l.mu.Lock()
	if msg == l.last && time.Since(l.at) < 10*time.Second {
		l.mu.Unlock()
		return
	}
	l.last, l.at = msg, time.Now()
	l.mu.Unlock()
	s.log.Warn("not ready", "err", err)
}
