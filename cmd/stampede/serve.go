package main

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

	"github.com/stampede-sh/stampede/lua"
	"github.com/stampede-sh/stampede/persistence"
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
	err = app.wait()
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// app is a running set of roles sharing one Redis client and one MySQL pool.
type app struct {
	cfg     *Config
	rdb     redis.UniversalClient
	store   *persistence.Store
	logger  *slog.Logger
	group   *errgroup.Group
	closers []func() error // AMQP connections, closed after every role returned
}

func newRedis(cfg *Config) redis.UniversalClient {
	return redis.NewUniversalClient(&redis.UniversalOptions{
		Addrs:        cfg.redisAddrs(),
		DB:           cfg.RedisDB,
		PoolSize:     256,
		MinIdleConns: 16,
		DialTimeout:  2 * time.Second,
		// One retry: a dead Redis must open the gateway's breaker quickly
		// instead of holding each request through five dial attempts.
		DialerRetries: 1,
		ReadTimeout:   2 * time.Second,
		WriteTimeout:  2 * time.Second,
	})
}

// startApp connects to the services, applies migrations when asked, and
// starts every selected role. The roles stop when ctx is cancelled; wait
// returns after they drained.
func startApp(ctx context.Context, cfg *Config, logger *slog.Logger) (*app, error) {
	roles, err := cfg.roleSet()
	if err != nil {
		return nil, err
	}
	store, err := persistence.Open(ctx, cfg.MySQLDSN)
	if err != nil {
		return nil, err
	}
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
	a := &app{cfg: cfg, rdb: rdb, store: store, logger: logger}
	g, gctx := errgroup.WithContext(ctx)
	a.group = g
	if err := a.startRoles(gctx, g, roles); err != nil {
		store.Close()
		rdb.Close()
		return nil, err
	}
	return a, nil
}

// wait blocks until every role has returned, then closes the shared clients.
func (a *app) wait() error {
	err := a.group.Wait()
	for _, c := range a.closers {
		c()
	}
	a.rdb.Close()
	a.store.Close()
	return err
}
