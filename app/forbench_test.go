package app

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

// A child of bench-scale runs with every setting of its parent.
func TestSettingEnvCarriesEverySetting(t *testing.T) {
	cfg, err := parse("bench-scale", []string{"--amqp-queue-type", "classic", "--consumer-workers", "3", "--pay-timeout", "7s"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	env := SettingEnv(cfg)
	flags, _ := settingFlags(t)
	if len(env) != len(flags) {
		t.Errorf("%d variables for %d settings", len(env), len(flags))
	}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	child, err := parse("serve", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	a, b := *child, *cfg
	a.command, a.explicit, b.command, b.explicit = "", nil, "", nil // how it was parsed, not a setting
	if !reflect.DeepEqual(a, b) {
		t.Errorf("child config differs:\n%+v\n%+v", a, b)
	}
	if child.Mode != modeDevelopment {
		t.Errorf("child of bench-scale in mode %q", child.Mode)
	}
	if child.AMQPQueueType != "classic" || child.ConsumerWorkers != 3 || child.PayTimeout != 7*time.Second {
		t.Errorf("child: %+v", *child)
	}
}
