package app

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/stampede-sh/stampede/pipeline"
)

// checkVhost dials the broker once at start-up (the first node of
// STAMPEDE_AMQP_URL that answers within 3 s) and stops the process when the
// broker refuses the connection with 530 NOT_ALLOWED: the URL's vhost does
// not exist, or its user may not use it. Without it every AMQP role retried
// the refused connection forever, logging the 530 every few seconds, and the
// process looked alive. A broker that does not answer is no error here: the
// roles wait for it with backoff. Errors name the vhost, the broker (no
// password) and the rabbitmqctl commands that fix it.
func checkVhost(ctx context.Context, cfg *Config) error {
	for _, raw := range pipeline.SplitAMQPURLs(cfg.AMQPURL) {
		u, err := amqp.ParseURI(raw)
		if err != nil {
			return fmt.Errorf("invalid config: STAMPEDE_AMQP_URL: %w", err)
		}
		conn, err := amqp.DialConfig(raw, amqp.Config{Dial: amqp.DefaultDial(3 * time.Second), Properties: amqp.Table{"connection_name": "stampede-vhost-check"}})
		if err == nil {
			conn.Close()
			return nil
		}
		var ae *amqp.Error
		if !errors.As(err, &ae) || ae.Code != amqp.NotAllowed {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			continue // not answering: try the next node; the roles wait for it
		}
		broker := fmt.Sprintf("%s:%d", u.Host, u.Port)
		vhost := u.Vhost
		grant := fmt.Sprintf(`rabbitmqctl set_permissions -p %s %s ".*" ".*" ".*"`, shellWord(vhost), shellWord(u.Username))
		if strings.Contains(ae.Reason, "not found") {
			return fmt.Errorf("RabbitMQ vhost %q does not exist on %s (the broker answered %d %s): create it (rabbitmqctl add_vhost %s; %s) or point STAMPEDE_AMQP_URL at an existing one",
				vhost, broker, ae.Code, ae.Reason, shellWord(vhost), grant)
		}
		return fmt.Errorf("RabbitMQ refuses user %q the vhost %q on %s (the broker answered %d %s): grant it (%s) or fix STAMPEDE_AMQP_URL",
			u.Username, vhost, broker, ae.Code, ae.Reason, grant)
	}
	return nil
}

// shellWord quotes s for a shell command line when it needs quoting.
func shellWord(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./:@") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
