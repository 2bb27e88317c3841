package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"github.com/stampede-sh/stampede/gateway"
	"github.com/stampede-sh/stampede/lua"
	"github.com/stampede-sh/stampede/persistence"
	"github.com/stampede-sh/stampede/pipeline"
)

func runServe(ctx context.Context, args []string, stdout io.Writer) error {
	cfg, err := parse("serve", args, nil)
	if err != nil {
		return err
	}
	logger := newLogger(cfg.LogLevel, os.Stderr)
	app, err := startApp(ctx, cfg, logger)
	if err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- app.wait() }()
	select {
	case err = <-done:
	case <-ctx.Done():
		// SIGTERM: every role drains (gateway stops accepting and finishes
		// requests in flight, writers write and acknowledge their batch,
		// consumers finish and ack messages in hand, the relay waits for
		// its confirms). Past ShutdownTimeout the process gives up.
		logger.Info("shutting down", "timeout", cfg.ShutdownTimeout.String())
		t := time.NewTimer(cfg.ShutdownTimeout)
		defer t.Stop()
		select {
		case err = <-done:
		case <-t.C:
			return fmt.Errorf("shutdown: roles still draining after %s", cfg.ShutdownTimeout)
		}
	}
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	if err == nil {
		logger.Info("stopped")
	}
	return err
}

// app is a running set of roles sharing one Redis client and one MySQL pool.
type app struct {
	cfg     *Config
	rdb     redis.UniversalClient
	store   *persistence.Store
	logger  *slog.Logger
	tel     *telemetry
	broker  *pipeline.BrokerHealth // every AMQP connection of the roles reports to it (blocked publishers, queues refusing publishes)
	group   *errgroup.Group
	cancel  context.CancelFunc
	closers []func() error // AMQP connections, closed after every role returned
}

// newRedis makes the shared Redis client: a *redis.Client for one address, a
// *redis.ClusterClient for several (the seeds of a Redis Cluster), or, with
// a Sentinel master name, a failover client (a *redis.Client that asks the
// Sentinels at the addresses for the current primary and follows every
// failover: connections to a demoted or dead primary are dropped and new
// ones go to the promoted replica, so no role needs a restart).
//
// On a cluster the client follows MOVED and ASK itself and retries TRYAGAIN
// (a multi-key script on a slot that is being migrated: some of its keys
// moved, some not) and CLUSTERDOWN with a short backoff: clusterRedirects
// attempts, clusterMinBackoff to clusterMaxBackoff apart, about 0.8s in all,
// so a slot migration of up to that long is invisible to callers (a
// gateway request is bounded by its RedisTimeout anyway). Redirections and
// retries within that budget are no errors to the caller, so they do not count
// against the gateway's circuit breaker. One address: unchanged defaults.
func newRedis(cfg *Config) redis.UniversalClient {
	opt := &redis.UniversalOptions{
		Addrs:        cfg.redisAddrs(),
		DB:           cfg.RedisDB,
		Password:     cfg.RedisPassword,
		PoolSize:     256,
		MinIdleConns: 16,
		DialTimeout:  2 * time.Second,
		// One retry: a dead Redis must open the gateway's breaker quickly
		// instead of holding each request through five dial attempts.
		DialerRetries: 1,
		ReadTimeout:   2 * time.Second,
		WriteTimeout:  2 * time.Second,
		MasterName:    cfg.RedisSentinelMaster,
	}
	if len(opt.Addrs) > 1 && opt.MasterName == "" {
		opt.MaxRedirects = clusterRedirects
		opt.MinRetryBackoff = clusterMinBackoff
		opt.MaxRetryBackoff = clusterMaxBackoff
	}
	return redis.NewUniversalClient(opt)
}

// Retry policy of the cluster client (newRedis). go-redis counts MOVED, ASK
// and retried errors (TRYAGAIN, CLUSTERDOWN, LOADING, connection errors)
// against the same MaxRedirects budget; its default of 3 is used up by a few
// TRYAGAIN answers during a slot migration, and the next MOVED then reached
// the caller.
const (
	clusterRedirects  = 16
	clusterMinBackoff = 8 * time.Millisecond
	clusterMaxBackoff = 64 * time.Millisecond
)

// startApp connects to the services, applies migrations when asked, and
// starts every selected role. The roles stop when ctx is cancelled; wait
// returns after they drained.
func startApp(ctx context.Context, cfg *Config, logger *slog.Logger) (*app, error) {
	roles, err := cfg.roleSet()
	if err != nil {
		return nil, err
	}
	if w := cfg.devWarning(); w != "" {
		logger.Warn(w)
	}
	store, err := persistence.Open(ctx, cfg.MySQLDSN)
	if err != nil {
		return nil, err
	}
	store.DB.SetMaxOpenConns(cfg.MySQLMaxConns)
	store.DB.SetMaxIdleConns(cfg.MySQLMaxConns)
	if cfg.Migrate {
		if _, err := persistence.Migrate(ctx, store.DB); err != nil {
			store.Close()
			return nil, err
		}
	} else if err := persistence.Validate(ctx, store.DB); err != nil {
		store.Close()
		return nil, err
	}
	rdb := newRedis(cfg)
	if err := lua.LoadAll(ctx, rdb); err != nil {
		store.Close()
		rdb.Close()
		return nil, fmt.Errorf("redis at %s: %w", cfg.RedisAddr, err)
	}
	// A Redis DB of another deployment (another database's stock) is
	// refused before any role touches it (deployment.go).
	if err := checkDeployment(ctx, cfg, store, rdb, logger); err != nil {
		store.Close()
		rdb.Close()
		return nil, err
	}
	// Refuse a Redis that may evict stock keys (gateway.CheckRedis), or
	// that cannot give the durability asked for (gateway.CheckDurability).
	err = gateway.CheckRedis(ctx, rdb, logger)
	if err == nil {
		err = gateway.CheckDurability(ctx, rdb, gateway.Durability(cfg.RedisDurability), cfg.RedisReplicaAcks, logger)
	}
	if err != nil {
		store.Close()
		rdb.Close()
		return nil, err
	}
	a := &app{cfg: cfg, rdb: rdb, store: store, logger: logger, tel: newTelemetry()}
	a.broker = pipeline.NewBrokerHealth(logger, a.tel.pipeline)
	rctx, cancel := context.WithCancel(ctx)
	g, gctx := errgroup.WithContext(rctx)
	a.group = g
	err = a.startTelemetry(gctx, g)
	if err == nil {
		err = a.startRoles(gctx, g, roles)
	}
	if err != nil {
		cancel()
		_ = g.Wait() // err, from before the cancel, is the one returned
		for _, c := range a.closers {
			_ = c()
		}
		store.Close()
		rdb.Close()
		return nil, err
	}
	a.cancel = cancel
	return a, nil
}

// wait blocks until every role has returned, then closes the shared clients.
func (a *app) wait() error {
	err := a.group.Wait()
	a.cancel()
	for _, c := range a.closers {
		_ = c() // best effort: the group's error is the result
	}
	a.rdb.Close()
	a.store.Close()
	return err
}

// StartInProcess starts the roles of cfg in this process (the benchmark's
// system under test, cmd/stampede-bench: migrations applied, warnings only in
// the log) and returns a function that stops them and waits until they
// drained.
func StartInProcess(ctx context.Context, cfg *Config) (stop func(), err error) {
	c := *cfg
	c.Migrate = true
	ctx, cancel := context.WithCancel(ctx)
	a, err := startApp(ctx, &c, newLogger("warn", os.Stderr))
	if err != nil {
		cancel()
		return nil, err
	}
	done := make(chan error, 1)
	go func() { done <- a.wait() }()
	return func() { cancel(); <-done }, nil //nolint:errcheck // a stop func: the roles' error was returned by wait
}
