package app

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/stampede-sh/stampede/pipeline/pipelinetest"
)

// serve in production mode stops at once when its RabbitMQ vhost does not
// exist, naming the vhost and the commands that create it. It used to
// start, answer /healthz and log the broker's 530 every 6 s from every AMQP
// role (issue 44). A push-only process, whose role needs the broker too,
// stops the same way.
func TestServeStopsWhenItsVhostIsMissing(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the roles")
	}
	unsetMode(t)
	t.Setenv("STAMPEDE_JWT_SECRET", goodJWT)
	t.Setenv("STAMPEDE_PAYMENT_SECRET", goodPay)
	args := serviceArgs(t)
	missing := fmt.Sprintf("stampede_test_missing_%06x", rand.Uint32()&0xffffff)
	for i := range args {
		if args[i] == "--amqp-url" {
			args[i+1] = strings.TrimSuffix(pipelinetest.BaseURL(), "/") + "/" + missing
		}
	}
	for _, roles := range []string{"gateway,writer,relay,consumer,sweeper,push", "push"} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		start := time.Now()
		err := run(ctx, append([]string{"serve", "--migrate", "--metrics-addr", "off", "--roles", roles}, args...), &bytes.Buffer{})
		cancel()
		if err == nil || errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("serve --roles %s on a missing vhost: %v after %v, want a refusal", roles, err, time.Since(start).Round(time.Millisecond))
		}
		for _, want := range []string{`RabbitMQ vhost "` + missing + `" does not exist`, "rabbitmqctl add_vhost " + missing, "set_permissions -p " + missing + " guest"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("--roles %s: refusal lacks %q: %v", roles, want, err)
			}
		}
		if roles == "push" {
			t.Logf("refusal: %v", err)
		}
	}
}
