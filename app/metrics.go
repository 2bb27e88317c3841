package app

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	amqp "github.com/rabbitmq/amqp091-go"
	"golang.org/x/sync/errgroup"

	"github.com/stampede-sh/stampede/gateway"
	"github.com/stampede-sh/stampede/pipeline"
)

// telemetry is one process's Prometheus registry and the collectors its
// roles report into. It is built per app (never the global default
// registry), so tests can run many apps in one process.
type telemetry struct {
	reg      *prometheus.Registry
	gateway  *gateway.Metrics
	pipeline *pipeline.Metrics
}

func newTelemetry() *telemetry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return &telemetry{reg: reg, gateway: gateway.NewMetrics(reg), pipeline: pipeline.NewMetrics(reg)}
}

// handler serves the registry in the Prometheus exposition format. A
// collector that fails leaves its series out instead of failing the scrape.
func (t *telemetry) handler() http.Handler {
	return promhttp.HandlerFor(t.reg, promhttp.HandlerOpts{
		ErrorHandling:       promhttp.ContinueOnError,
		MaxRequestsInFlight: 4,
		Timeout:             10 * time.Second,
	})
}

// registerPushMetrics exports the push role's WebSocket series from the
// hub's own counters, read at scrape time:
//
//	stampede_ws_connections       gauge: open, authenticated sockets (push.Stats.Sockets)
//	stampede_ws_dropped_total     counter: sockets closed as slow consumers (push.Stats.Evicted)
//
// The push wiring calls it once per process, e.g.
//
//	registerPushMetrics(a.tel.reg, func() int64 { return hub.Stats().Sockets }, func() int64 { return hub.Stats().Evicted })
func registerPushMetrics(reg prometheus.Registerer, sockets, dropped func() int64) error {
	return errors.Join(
		reg.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "stampede_ws_connections",
			Help: "Open, authenticated WebSocket connections of the push role.",
		}, func() float64 { return float64(sockets()) })),
		reg.Register(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "stampede_ws_dropped_total",
			Help: "WebSocket clients the push role disconnected as slow consumers (send buffer full).",
		}, func() float64 { return float64(dropped()) })),
	)
}

// startTelemetry registers the scrape-time state collector and starts the
// optional metrics listener (GET /metrics, GET /readyz) and pprof listener
// in g. The gateway role mounts
// GET /metrics on its own port (startRoles).
func (a *app) startTelemetry(ctx context.Context, g *errgroup.Group) error {
	cfg := a.cfg
	conn, err := pipeline.NewConn(pipeline.ConnConfig{
		URL: cfg.AMQPURL, Name: "stampede-metrics", Logger: a.logger,
		Setup: func(*amqp.Channel) error { return nil }, // inspect only, never declare
	})
	if err != nil {
		return err
	}
	a.closers = append(a.closers, conn.Close)
	a.tel.reg.MustRegister(pipeline.NewStateCollector(pipeline.StateConfig{
		Redis: a.rdb, Store: a.store, Conn: conn, Metrics: a.tel.pipeline,
		StuckAfter: cfg.StuckAfter, Logger: a.logger.With("component", "metrics"),
	}))
	if cfg.MetricsAddr != "" {
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", a.tel.handler())
		mux.Handle("GET /readyz", a.readyHandler(conn)) // readyz.go
		if err := a.listen(ctx, g, "metrics", cfg.MetricsAddr, mux); err != nil {
			return err
		}
	}
	if cfg.PprofAddr != "" {
		// No /debug/pprof/cmdline: the command line may carry secrets given
		// as flags (issue 26). Production refuses a non-loopback address
		// (validateMode); development warns.
		mux := pprofMux()
		if host, _, _ := net.SplitHostPort(cfg.PprofAddr); !isLoopback(host) {
			a.logger.Warn("pprof listener is not on loopback; keep it off public networks", "addr", cfg.PprofAddr)
		}
		if err := a.listen(ctx, g, "pprof", cfg.PprofAddr, mux); err != nil {
			return err
		}
	}
	return nil
}

// pprofMux serves net/http/pprof's profiles (the index, profile, symbol,
// trace and the named profiles such as heap and goroutine), without the
// cmdline handler: the index links to it, the path answers 404.
func pprofMux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/debug/pprof/cmdline" {
			http.NotFound(w, r)
			return
		}
		pprof.Index(w, r)
	})
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// listen serves h on addr until ctx is cancelled. The listener is opened
// here, so a taken port fails the start.
func (a *app) listen(ctx context.Context, g *errgroup.Group, name, addr string, h http.Handler) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("%s listener: %w", name, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	a.logger.Info(name+" listening", "addr", ln.Addr().String())
	g.Go(func() error {
		errc := make(chan error, 1)
		go func() { errc <- srv.Serve(ln) }()
		select {
		case err := <-errc:
			return fmt.Errorf("%s listener: %w", name, err)
		case <-ctx.Done():
		}
		sctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil {
			srv.Close()
		}
		<-errc //nolint:errcheck // ErrServerClosed after the shutdown
		return nil
	})
	return nil
}
