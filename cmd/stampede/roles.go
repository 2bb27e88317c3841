package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/valyala/fasthttp/fasthttpadaptor"
	"golang.org/x/sync/errgroup"

	"github.com/stampede-sh/stampede/auth"
	"github.com/stampede-sh/stampede/gateway"
	"github.com/stampede-sh/stampede/pipeline"
	"github.com/stampede-sh/stampede/push"
)

// startRoles builds every selected role and starts it in g. Components are
// all built before any starts, so a configuration error starts nothing.
func (a *app) startRoles(ctx context.Context, g *errgroup.Group, roles map[string]bool) error {
	cfg, log := a.cfg, a.logger
	var runs []func(context.Context) error
	var closers []func() error

	newConn := func(name string) (*pipeline.Conn, error) {
		c, err := pipeline.NewConn(pipeline.ConnConfig{URL: cfg.AMQPURL, Name: name, Logger: log, Topology: cfg.topology()})
		if err != nil {
			return nil, err
		}
		closers = append(closers, c.Close)
		return c, nil
	}
	fail := func(err error) error {
		for _, c := range closers {
			c()
		}
		return err
	}

	if roles["gateway"] || roles["relay"] || roles["consumer"] {
		if err := checkTopology(ctx, cfg); err != nil {
			return fail(err)
		}
	}
	// One verifier of bearer tokens for the gateway and push: HS256 with the
	// shared secret, plus the identity provider's JWKS if configured.
	var verifier *auth.Verifier
	if roles["gateway"] || roles["push"] {
		v, err := auth.New(ctx, auth.Options{
			Secret: []byte(cfg.JWTSecret), JWKSURL: cfg.JWKSURL, Issuer: cfg.JWTIssuer, Audience: cfg.JWTAudience,
			AdminGroup: cfg.JWTAdminGroup, GroupsClaim: cfg.JWTGroupsClaim, Logger: log.With("component", "auth"),
		})
		if err != nil {
			return fail(err)
		}
		closers = append(closers, v.Close)
		verifier = v
	}
	production := cfg.Mode == modeProduction
	if roles["gateway"] {
		admins, _ := cfg.adminIDs()
		var ready func(ctx context.Context) error
		if probe, err := newConn("stampede-gateway-ready"); err == nil {
			ready = func(ctx context.Context) error {
				ch, err := probe.Channel(ctx)
				if err != nil {
					return fmt.Errorf("rabbitmq: %w", err)
				}
				return ch.Close()
			}
		} else {
			return fail(err)
		}
		opsConn, err := newConn("stampede-gateway-admin")
		if err != nil {
			return fail(err)
		}
		gw, err := gateway.New(gateway.Config{
			Addr:             cfg.HTTPAddr,
			JWTSecret:        []byte(cfg.JWTSecret),
			PaymentSecret:    []byte(cfg.PaymentSecret),
			DisableDemoLogin: !cfg.DemoLogin,
			AdminUsers:       admins,
			// Production: no free checkout, no Host echo in /api/config.
			DisableDemoCheckout: production,
			PushURLFromHost:     !production,
			PushURL:             cfg.PushURL,
			PushAddr:            cfg.PushAddr,
			Currency:            cfg.Currency,
			Verifier:            verifier,
			PayTimeout:          cfg.PayTimeout,
			NodeID:              int(cfg.NodeID),
			StaticDir:           cfg.StaticDir,
			ShutdownTimeout:     cfg.ShutdownTimeout * 3 / 4, // within the process's bound
			ReadyCheck:          ready,
			Ops:                 pipeline.Ops{Store: a.store, Redis: a.rdb, Conn: opsConn, PayTimeout: cfg.PayTimeout},
			Metrics:             a.tel.gateway,
			RateGlobal:          cfg.RateGlobal,
			RateGlobalBurst:     cfg.RateGlobalBurst,
			RateUser:            cfg.RateUser,
			RateUserBurst:       cfg.RateUserBurst,
			SoldOutTTL:          cfg.SoldOutTTL,
			ReservePipeline:     cfg.ReservePipeline,
			LookupPipeline:      cfg.LookupPipeline,
			SyncIntake:          cfg.Intake == "sync",
			RedisCheckInterval:  cfg.RedisCheckInterval,
		}, a.rdb, a.store, log.With("role", "gateway"))
		if err != nil {
			return fail(err)
		}
		if !production { // production: /metrics only on the metrics listener (startTelemetry)
			gw.Handle("GET", "/metrics", fasthttpadaptor.NewFastHTTPHandler(a.tel.handler()))
		}
		runs = append(runs, gw.Run)
	}
	if roles["writer"] {
		w, err := pipeline.NewWriter(a.store, a.rdb, pipeline.WriterConfig{
			BatchSize: cfg.WriterBatch, BatchWait: cfg.WriterWait, ClaimIdle: cfg.WriterClaimIdle, Logger: log.With("role", "writer"),
			FlushTimeout: min(5*time.Second, cfg.ShutdownTimeout/2), Metrics: a.tel.pipeline,
		})
		if err != nil {
			return fail(err)
		}
		runs = append(runs, w.Run)
	}
	// Several relays per process: while one waits for its batch's
	// confirms, another claims and publishes (SKIP LOCKED keeps their rows
	// apart; each has its own connection and a distinct lease owner).
	for i := range cfg.RelayWorkers {
		if !roles["relay"] {
			break
		}
		conn, err := newConn(fmt.Sprintf("stampede-relay-%d", i))
		if err != nil {
			return fail(err)
		}
		r, err := pipeline.NewRelay(a.store, conn, pipeline.RelayConfig{BatchSize: cfg.RelayBatch, Logger: log.With("role", "relay"),
			Metrics: a.tel.pipeline})
		if err != nil {
			return fail(err)
		}
		runs = append(runs, r.Run)
	}
	if roles["consumer"] {
		conn, err := newConn("stampede-consumer")
		if err != nil {
			return fail(err)
		}
		c, err := pipeline.NewConsumer(a.store, a.rdb, conn, pipeline.ConsumerConfig{
			Prefetch: cfg.ConsumerPrefetch, Workers: cfg.ConsumerWorkers, PayTimeout: cfg.PayTimeout,
			LockBatch: cfg.ConsumerBatch, LockBatchWait: cfg.ConsumerBatchWait, LockChannels: cfg.ConsumerLockChans,
			PerMessageLock: cfg.ConsumerLock == "message",
			MaxAttempts:    cfg.ConsumerMaxAttempts, Logger: log.With("role", "consumer"), Metrics: a.tel.pipeline,
		})
		if err != nil {
			return fail(err)
		}
		runs = append(runs, c.Run)
	}
	if roles["sweeper"] {
		reconcile := cfg.ReconcileInterval
		if reconcile == 0 {
			reconcile = -1 // off
		}
		retention := cfg.OutboxRetention
		if retention == 0 {
			retention = -1 // keep every row
		}
		s, err := pipeline.NewSweeper(a.store, pipeline.SweeperConfig{Interval: cfg.SweepInterval, Logger: log.With("role", "sweeper"),
			Metrics: a.tel.pipeline, Redis: a.rdb, ReconcileInterval: reconcile, OutboxRetention: retention})
		if err != nil {
			return fail(err)
		}
		runs = append(runs, s.Run)
	}
	if roles["push"] {
		hub, err := push.New(push.Config{Addr: cfg.PushAddr, MaxSocketsPerUser: cfg.PushMaxSockets, AllowedOrigins: cfg.pushOrigins()}, verifier,
			pushSnapshots{a.store}, cfg.AMQPURL, log.With("role", "push"))
		if err != nil {
			return fail(err)
		}
		if err := registerPushMetrics(a.tel.reg, func() int64 { return hub.Stats().Sockets },
			func() int64 { return hub.Stats().Evicted }); err != nil {
			return fail(err)
		}
		runs = append(runs, hub.Run, func(ctx context.Context) error {
			return feedProducts(ctx, a.rdb, a.store, hub, 250*time.Millisecond)
		})
	}
	for _, run := range runs {
		g.Go(func() error { return run(ctx) })
	}
	a.closers = append(a.closers, closers...)
	return nil
}

// checkTopology declares the configured topology once at start-up, so that a
// queue of the other type (or with another delivery limit) stops the process
// with pipeline.QueueMismatchError's explanation instead of every role
// retrying forever. A broker that does not answer within 3s is not an error
// here: the roles wait for it with backoff.
func checkTopology(ctx context.Context, cfg *Config) error {
	conn, err := pipeline.NewConn(pipeline.ConnConfig{URL: cfg.AMQPURL, Name: "stampede-topology-check", Topology: cfg.topology(),
		MinBackoff: 100 * time.Millisecond, MaxBackoff: time.Second})
	if err != nil {
		return err
	}
	defer conn.Close()
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	ch, err := conn.Channel(cctx)
	var mm *pipeline.QueueMismatchError
	if errors.As(err, &mm) {
		return err
	}
	if err == nil {
		ch.Close()
	}
	return nil
}
