package app

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/stampede-sh/stampede/pipeline"
)

// readyHandler is GET /readyz of the metrics listener (STAMPEDE_METRICS_ADDR),
// the readiness of the roles that have no HTTP port of their own (writer,
// relay, consumer, sweeper; the gateway's port has its own /readyz). It
// checks what the process's roles use — MySQL always; Redis unless the
// process runs only the relay; RabbitMQ (a channel opens) for the relay,
// consumer, gateway and push roles — and the broker's health as the roles
// saw it (pipeline.BrokerHealth: publishers blocked by a resource alarm, a
// queue nacking every publish). 200 {"status":"ready"}; 503
// {"status":"not ready","problems":[…]}, each problem the dependency's name
// ("mysql", "redis", "rabbitmq") or the broker's own words ("rabbitmq:
// broker blocked publishers (low on memory)"); the errors themselves, which
// carry addresses, go to the log.
func (a *app) readyHandler(probe *pipeline.Conn) http.Handler {
	roles, _ := a.cfg.roleSet()
	needRedis := len(roles) != 1 || !roles["relay"]
	needRabbit := roles["relay"] || roles["consumer"] || roles["gateway"] || roles["push"]
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		var problems []string
		fail := func(name string, err error) {
			problems = append(problems, name)
			a.logger.Warn("not ready", "dependency", name, "err", err)
		}
		if err := a.store.Ping(ctx); err != nil {
			fail("mysql", err)
		}
		if needRedis {
			if err := a.rdb.Ping(ctx).Err(); err != nil {
				fail("redis", err)
			}
		}
		if needRabbit {
			if ch, err := probe.Channel(ctx); err != nil {
				fail("rabbitmq", err)
			} else {
				_ = ch.Close()
			}
		}
		if err := a.broker.Ready(); err != nil {
			problems = append(problems, err.Error())
		}
		w.Header().Set("Content-Type", "application/json")
		if len(problems) > 0 {
			w.WriteHeader(http.StatusServiceUnavailable)
			_ = json.NewEncoder(w).Encode(map[string]any{"status": "not ready", "problems": problems})
			return
		}
		_, _ = w.Write([]byte(`{"status":"ready"}` + "\n"))
	})
}
