package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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
	b := &roleBuilder{a: a, cfg: a.cfg, log: a.logger}
	fail := func(err error) error {
		for _, c := range b.closers {
			_ = c() // the failure being returned matters, not the cleanup's
		}
		return err
	}
	if roles["gateway"] || roles["relay"] || roles["consumer"] || roles["push"] {
		if err := checkVhost(ctx, b.cfg); err != nil { // vhost.go
			return fail(err)
		}
		if err := checkTopology(ctx, b.cfg); err != nil {
			return fail(err)
		}
	}
	if roles["gateway"] || roles["push"] {
		if err := b.buildVerifier(ctx); err != nil {
			return fail(err)
		}
	}
	for _, r := range []struct {
		role  string
		build func() error
	}{
		{"gateway", b.gateway}, {"writer", b.writer}, {"relay", b.relays},
		{"consumer", b.consumer}, {"sweeper", b.sweeper}, {"push", b.push},
	} {
		if !roles[r.role] {
			continue
		}
		if err := r.build(); err != nil {
			return fail(err)
		}
	}
	for _, run := range b.runs {
		g.Go(func() error { return run(ctx) })
	}
	a.closers = append(a.closers, b.closers...)
	return nil
}

// roleBuilder builds the roles of one process: one method per role, each
// appending its Run functions to runs and what must be closed to closers.
type roleBuilder struct {
	a        *app
	cfg      *Config
	log      *slog.Logger
	verifier *auth.Verifier // gateway and push
	runs     []func(context.Context) error
	closers  []func() error
}

// conn opens a named AMQP connection, closed with the process.
func (b *roleBuilder) conn(name string) (*pipeline.Conn, error) {
	c, err := pipeline.NewConn(pipeline.ConnConfig{URL: b.cfg.AMQPURL, Name: name, Logger: b.log, Topology: b.cfg.topology(),
		Health: b.a.broker})
	if err != nil {
		return nil, err
	}
	b.closers = append(b.closers, c.Close)
	return c, nil
}

// buildVerifier makes the one verifier of bearer tokens for the gateway and
// push: the identity providers' JWKS tokens (their subjects mapped to user
// ids through MySQL's user_identity, cached in memory), and HS256 ones of
// the shared secret where enabled.
func (b *roleBuilder) buildVerifier(ctx context.Context) error {
	o := b.cfg.verifierOptions()
	o.Subjects = b.a.store
	o.Logger = b.log.With("component", "auth")
	v, err := auth.New(ctx, o)
	if err != nil {
		return err
	}
	b.closers = append(b.closers, v.Close)
	b.verifier = v
	return nil
}

func (b *roleBuilder) gateway() error {
	production := b.cfg.Mode == modeProduction
	admins, _ := b.cfg.adminIDs()
	var ready func(ctx context.Context) error
	if probe, err := b.conn("stampede-gateway-ready"); err == nil {
		ready = func(ctx context.Context) error {
			ch, err := probe.Channel(ctx)
			if err != nil {
				return fmt.Errorf("rabbitmq: %w", err)
			}
			if err := ch.Close(); err != nil {
				return fmt.Errorf("rabbitmq: %w", err)
			}
			// The other roles of this process: a broker blocking their
			// publishes, a queue refusing them (not secret: shown as is).
			if err := b.a.broker.Ready(); err != nil {
				return gateway.PublicNotReady(err)
			}
			return nil
		}
	} else {
		return err
	}
	opsConn, err := b.conn("stampede-gateway-admin")
	if err != nil {
		return err
	}
	signer := b.cfg.signer()
	gw, err := gateway.New(gateway.Config{
		Addr:             b.cfg.HTTPAddr,
		JWTSecret:        []byte(b.cfg.JWTSecret),
		PaymentSecret:    []byte(b.cfg.PaymentSecret),
		Signer:           &signer,
		DisableDemoLogin: !b.cfg.DemoLogin,
		AdminUsers:       admins,
		// Production: no free checkout, no Host echo in /api/config.
		DisableDemoCheckout: production,
		PushURLFromHost:     !production,
		PushURL:             b.cfg.PushURL,
		PushAddr:            b.cfg.PushAddr,
		Currency:            b.cfg.Currency,
		Verifier:            b.verifier,
		PayTimeout:          b.cfg.PayTimeout,
		NodeID:              int(b.cfg.NodeID),
		StaticDir:           b.cfg.StaticDir,
		ShutdownTimeout:     b.cfg.ShutdownTimeout * 3 / 4, // within the process's bound
		ReadyCheck:          ready,
		Ops:                 pipeline.Ops{Store: b.a.store, Redis: b.a.rdb, Conn: opsConn, PayTimeout: b.cfg.PayTimeout},
		Metrics:             b.a.tel.gateway,
		RateGlobal:          b.cfg.RateGlobal,
		RateGlobalBurst:     b.cfg.RateGlobalBurst,
		RateUser:            b.cfg.RateUser,
		RateUserBurst:       b.cfg.RateUserBurst,
		RateUserRead:        b.cfg.RateUserRead,
		RateUserReadBurst:   b.cfg.RateUserReadBurst,
		SoldOutTTL:          b.cfg.SoldOutTTL,
		SoldOutBuyers:       b.cfg.SoldOutBuyers,
		ReservePipeline:     b.cfg.ReservePipeline,
		LookupPipeline:      b.cfg.LookupPipeline,
		SyncIntake:          b.cfg.Intake == "sync",
		Durability:          gateway.Durability(b.cfg.RedisDurability),
		ReplicaAcks:         b.cfg.RedisReplicaAcks,
		ReplicaWait:         b.cfg.RedisReplicaWait,
		RedisCheckInterval:  b.cfg.RedisCheckInterval,
		RoomWindow:          b.cfg.RoomWindow,
		RoomPipeline:        b.cfg.RoomPipeline,
		PowSecret:           []byte(b.cfg.PowSecret),
		PowExpiry:           b.cfg.PowExpiry,
	}, b.a.rdb, b.a.store, b.log.With("role", "gateway"))
	if err != nil {
		return err
	}
	if !production { // production: /metrics only on the metrics listener (startTelemetry)
		gw.Handle("GET", "/metrics", fasthttpadaptor.NewFastHTTPHandler(b.a.tel.handler()))
	}
	b.runs = append(b.runs, gw.Run)
	return nil
}

func (b *roleBuilder) writer() error {
	w, err := pipeline.NewWriter(b.a.store, b.a.rdb, pipeline.WriterConfig{
		BatchSize: b.cfg.WriterBatch, BatchWait: b.cfg.WriterWait, ClaimIdle: b.cfg.WriterClaimIdle, Logger: b.log.With("role", "writer"),
		FlushTimeout: min(5*time.Second, b.cfg.ShutdownTimeout/2), Metrics: b.a.tel.pipeline,
		ReplicaAcks: writerReplicaAcks(b.cfg), ReplicaWait: b.cfg.RedisReplicaWait,
		LockOrders: b.cfg.ConsumerLock == "writer", PayTimeout: b.cfg.PayTimeout,
	})
	if err != nil {
		return err
	}
	b.runs = append(b.runs, w.Run)
	return nil
}

func (b *roleBuilder) relays() error {
	// Several relays per process: while one waits for its batch's
	// confirms, another claims and publishes (SKIP LOCKED keeps their rows
	// apart; each has its own connection and a distinct lease owner).
	for i := range b.cfg.RelayWorkers {
		conn, err := b.conn(fmt.Sprintf("stampede-relay-%d", i))
		if err != nil {
			return err
		}
		r, err := pipeline.NewRelay(b.a.store, conn, pipeline.RelayConfig{BatchSize: b.cfg.RelayBatch, Logger: b.log.With("role", "relay"),
			Metrics: b.a.tel.pipeline})
		if err != nil {
			return err
		}
		b.runs = append(b.runs, r.Run)
	}
	return nil
}

func (b *roleBuilder) consumer() error {
	conn, err := b.conn("stampede-consumer")
	if err != nil {
		return err
	}
	// Retries and dead letters on a connection of their own: during a
	// resource alarm RabbitMQ blocks a connection that publishes, and the
	// consumers' acknowledgements on it would wait for the alarm's end.
	pubConn, err := b.conn("stampede-consumer-publish")
	if err != nil {
		return err
	}
	c, err := pipeline.NewConsumer(b.a.store, b.a.rdb, conn, pipeline.ConsumerConfig{
		Prefetch: b.cfg.ConsumerPrefetch, Workers: b.cfg.ConsumerWorkers, PayTimeout: b.cfg.PayTimeout,
		LockBatch: b.cfg.ConsumerBatch, LockBatchWait: b.cfg.ConsumerBatchWait, LockChannels: b.cfg.ConsumerLockChans,
		MaxAttempts: b.cfg.ConsumerMaxAttempts, Logger: b.log.With("role", "consumer"), Metrics: b.a.tel.pipeline,
		PublishConn: pubConn,
	})
	if err != nil {
		return err
	}
	b.runs = append(b.runs, c.Run)
	return nil
}

func (b *roleBuilder) sweeper() error {
	reconcile := b.cfg.ReconcileInterval
	if reconcile == 0 {
		reconcile = -1 // off
	}
	retention := b.cfg.OutboxRetention
	if retention == 0 {
		retention = -1 // keep every row
	}
	s, err := pipeline.NewSweeper(b.a.store, pipeline.SweeperConfig{Interval: b.cfg.SweepInterval, Workers: b.cfg.SweepWorkers, Logger: b.log.With("role", "sweeper"),
		Metrics: b.a.tel.pipeline, Redis: b.a.rdb, ReconcileInterval: reconcile, OutboxRetention: retention})
	if err != nil {
		return err
	}
	b.runs = append(b.runs, s.Run)
	// The waiting-room pacer (pipeline/pacer.go) goes with the sweeper: any
	// number of them may run, their admission steps share one budget.
	pc, err := pipeline.NewPacer(b.a.store, b.a.rdb, pipeline.PacerConfig{Rate: b.cfg.RoomRate, Ceiling: b.cfg.RoomCeiling,
		Window: b.cfg.RoomWindow, TargetBacklog: b.cfg.RoomTargetBacklog, Overbook: b.cfg.RoomOverbook, Metrics: pipeline.NewRoomMetrics(b.a.tel.reg), Failures: b.a.tel.pipeline,
		Logger: b.log.With("role", "sweeper")})
	if err != nil {
		return err
	}
	b.runs = append(b.runs, pc.Run)
	return nil
}

func (b *roleBuilder) push() error {
	hub, err := push.New(push.Config{Addr: b.cfg.PushAddr, MaxSocketsPerUser: b.cfg.PushMaxSockets, AllowedOrigins: b.cfg.pushOrigins(),
		HandshakeUserRate: offIfZero(b.cfg.PushUserRate), HandshakeAddrRate: offIfZero(b.cfg.PushAddrRate),
		Lines: roomTickets{b.a.rdb}}, b.verifier,
		pushSnapshots{b.a.store}, b.cfg.AMQPURL, b.log.With("role", "push"))
	if err != nil {
		return err
	}
	if err := registerPushMetrics(b.a.tel.reg, func() int64 { return hub.Stats().Sockets },
		func() int64 { return hub.Stats().Evicted }); err != nil {
		return err
	}
	b.runs = append(b.runs, hub.Run, func(ctx context.Context) error {
		return feedProducts(ctx, b.a.rdb, b.a.store, hub, 250*time.Millisecond, b.log.With("role", "push"), b.a.tel.pipeline)
	}, func(ctx context.Context) error {
		return feedLines(ctx, b.a.rdb, b.a.store, hub, 250*time.Millisecond, b.log.With("role", "push"), b.a.tel.pipeline) // room.go
	})
	return nil
}

// checkTopology declares the configured topology once at start-up, so that a
// queue of the other type (or with another delivery limit) stops the process
// with pipeline.QueueMismatchError's explanation, and a vhost that belongs to
// another deployment with vhostRefusal's, instead of every role retrying
// forever. A broker that does not answer within 3s is not an error here: the
// roles wait for it with backoff.
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
	var de *pipeline.VhostDeploymentError
	if errors.As(err, &de) {
		return vhostRefusal(cfg, de)
	}
	if err == nil {
		ch.Close()
	}
	return nil
}

// offIfZero is a push handshake rate of the configuration: 0 (no limit) is
// push's -1.
func offIfZero(r float64) float64 {
	if r == 0 {
		return -1
	}
	return r
}

// tokenCache sizes the verifier's cache of verified tokens: n tokens, none
// for 0.
func tokenCache(n int) auth.CacheOptions {
	if n == 0 {
		return auth.CacheOptions{Size: -1}
	}
	return auth.CacheOptions{Size: n}
}

// writerReplicaAcks is WriterConfig.ReplicaAcks: the replicas a writer waits
// for before storing entries, with Redis durability replicated only.
func writerReplicaAcks(cfg *Config) int {
	if cfg.RedisDurability == string(gateway.DurabilityReplicated) {
		return cfg.RedisReplicaAcks
	}
	return 0
}
