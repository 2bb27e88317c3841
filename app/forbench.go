package app

import (
	"context"
	"flag"
	"io"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-sh/stampede/auth"
)

// What cmd/stampede-bench uses of the process besides StartInProcess (serve.go).

// ErrUsage marks errors that print the usage text and exit with 2.
var ErrUsage = errUsage

// ModeDevelopment is the --mode of development (docs/production.md, "Modes").
const ModeDevelopment = modeDevelopment

// Parse binds the settings of command name plus extra flags, parses args and
// validates the configuration.
func Parse(name string, args []string, extra func(fs *flag.FlagSet)) (*Config, error) {
	return parse(name, args, extra)
}

// NewRedis is the Redis client of cfg, as the roles make it.
func NewRedis(cfg *Config) redis.UniversalClient { return newRedis(cfg) }

// TokenCache is the verifier's token cache for the setting value n (as serve's).
func TokenCache(n int) auth.CacheOptions { return tokenCache(n) }

// WaitReady waits until the gateway at base answers GET /readyz, at most timeout.
func WaitReady(ctx context.Context, base string, timeout time.Duration) error {
	return waitReady(ctx, base, timeout)
}

// AdoptQueueType lets the benchmark's in-process app run on a vhost that
// holds the queues of the other type, as the demo does (demo.go).
func AdoptQueueType(ctx context.Context, cfg *Config, args []string, out io.Writer) error {
	return adoptQueueType(ctx, cfg, args, out)
}

// SettingEnv is cfg as STAMPEDE_ environment variables (one per setting),
// so a child process runs with exactly the parent's settings, whether they
// came from the environment or from flags — and its secrets stay out of its
// command line, which any user can read.
func SettingEnv(cfg *Config) []string {
	var c Config
	var errs []error
	fs := newFlagSet("serve", &c, &errs, nil)
	c = *cfg // the flags point into c: they now read cfg's values
	var env []string
	fs.VisitAll(func(f *flag.Flag) {
		if name := settingVar(f.Usage); name != "" {
			env = append(env, name+"="+f.Value.String())
		}
	})
	return env
}

// settingVar is the STAMPEDE_ variable named at the end of a setting flag's
// help ("… [$STAMPEDE_X]"), or "".
func settingVar(usage string) string {
	i := strings.LastIndex(usage, "[$STAMPEDE_")
	if i < 0 || !strings.HasSuffix(usage, "]") {
		return ""
	}
	return usage[i+2 : len(usage)-1]
}
