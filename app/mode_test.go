package app

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"strings"
	"testing"
)

const (
	goodJWT = "jwt-secret-of-the-shop-0123456789abcdef"
	goodPay = "payment-secret-of-the-shop-0123456789ab"
)

// unsetMode removes STAMPEDE_MODE (TestMain sets development) for one test.
func unsetMode(t *testing.T) {
	t.Setenv("STAMPEDE_MODE", "")
	os.Unsetenv("STAMPEDE_MODE")
}

func TestDefaultModes(t *testing.T) {
	unsetMode(t)
	t.Setenv("STAMPEDE_JWT_SECRET", goodJWT)
	t.Setenv("STAMPEDE_PAYMENT_SECRET", goodPay)
	cfg, err := parse("serve", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Mode != modeProduction || cfg.DemoLogin || cfg.MetricsAddr != defaultMetricsAddr {
		t.Fatalf("serve: mode %q, demo login %v, metrics %q; want production, false, %s", cfg.Mode, cfg.DemoLogin, cfg.MetricsAddr, defaultMetricsAddr)
	}
	if w := cfg.devWarning(); w != "" {
		t.Errorf("production logs %q", w)
	}
	for _, cmd := range []string{"demo", "bench", "bench-scale", "bench-push"} {
		var c Config
		var errs []error
		fs := newFlagSet(cmd, &c, &errs, nil)
		if err := fs.Parse(nil); err != nil || c.Mode != modeDevelopment {
			t.Errorf("%s: mode %q %v, want development", cmd, c.Mode, err)
		}
	}
	if _, err := parse("demo", []string{"--mode", "production"}, nil); err == nil || !strings.Contains(err.Error(), "development mode only") {
		t.Errorf("demo in production: %v", err)
	}
	if _, err := parse("serve", []string{"--mode", "staging"}, nil); err == nil || !strings.Contains(err.Error(), "STAMPEDE_MODE") {
		t.Errorf("unknown mode: %v", err)
	}
	// Explicit metrics settings win; "" and off mean none.
	for v, want := range map[string]string{"": "", "off": "", "127.0.0.1:9999": "127.0.0.1:9999"} {
		cfg, err := parse("serve", []string{"--metrics-addr", v}, nil)
		if err != nil || cfg.MetricsAddr != want {
			t.Errorf("--metrics-addr %q: %q %v, want %q", v, cfg.MetricsAddr, err, want)
		}
	}
}

// Production refuses to start with a missing, built-in or short secret,
// naming the setting; demo login and demo admins are refused too.
func TestProductionRefusesUnsafeSettings(t *testing.T) {
	unsetMode(t)
	for _, c := range []struct {
		name, jwt, pay string
		args           []string
		want           string // "" = accepted
	}{
		{"good", goodJWT, goodPay, nil, ""},
		{"no jwt", "", goodPay, nil, "STAMPEDE_JWT_SECRET is not set"},
		{"no payment", goodJWT, "", nil, "STAMPEDE_PAYMENT_SECRET is not set"},
		{"dev jwt", devJWTSecret, goodPay, nil, "STAMPEDE_JWT_SECRET is the built-in development key"},
		{"dev payment", goodJWT, devPaymentSecret, nil, "STAMPEDE_PAYMENT_SECRET is the built-in development key"},
		{"short jwt", "0123456789abcdef0123456789abcde", goodPay, nil, "STAMPEDE_JWT_SECRET is 31 bytes: production mode needs at least 32"},
		{"short payment", goodJWT, "short", nil, "STAMPEDE_PAYMENT_SECRET is 5 bytes"},
		{"demo login", goodJWT, goodPay, []string{"--demo-login"}, "STAMPEDE_DEMO_LOGIN"},
		{"demo admins", goodJWT, goodPay, []string{"--admin-users", "1"}, "STAMPEDE_ADMIN_USERS"},
		{"push needs the jwt secret", "", "", []string{"--roles", "push"}, "STAMPEDE_JWT_SECRET is not set"},
		{"push needs no payment secret", goodJWT, "", []string{"--roles", "push"}, ""},
		{"writer needs no secret", "", "", []string{"--roles", "writer"}, ""},
		{"bad JWKS URL", goodJWT, goodPay, []string{"--jwt-jwks-url", "file:///etc/keys"}, "STAMPEDE_JWT_JWKS_URL"},
		{"JWKS without audience", goodJWT, goodPay, []string{"--jwt-jwks-url", "https://id.example/jwks", "--jwt-issuer", "https://id.example/"}, "STAMPEDE_JWT_AUDIENCE must be set"},
		{"JWKS with issuer and audience", goodJWT, goodPay, []string{"--jwt-jwks-url", "https://id.example/jwks", "--jwt-issuer", "https://id.example/", "--jwt-audience", "shop"}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("STAMPEDE_JWT_SECRET", c.jwt)
			t.Setenv("STAMPEDE_PAYMENT_SECRET", c.pay)
			_, err := parse("serve", c.args, nil)
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Fatalf("error %v, want one containing %q", err, c.want)
			}
		})
	}
	t.Setenv("STAMPEDE_JWT_SECRET", "")
	if _, err := parse("token", []string{"--user", "1"}, func(fs *flag.FlagSet) { fs.Int64("user", 0, "") }); err == nil ||
		!strings.Contains(err.Error(), "STAMPEDE_JWT_SECRET") {
		t.Errorf("token without a secret in production: %v", err)
	}
	if _, err := parse("migrate", nil, nil); err != nil {
		t.Errorf("migrate needs no secret: %v", err)
	}
}

// -h never shows a secret, nor the password of a DSN or AMQP URL.
func TestHelpHidesSecrets(t *testing.T) {
	t.Setenv("STAMPEDE_JWT_SECRET", "the-jwt-secret-nobody-may-see-0001")
	t.Setenv("STAMPEDE_PAYMENT_SECRET", "the-payment-secret-nobody-may-see-01")
	t.Setenv("STAMPEDE_AMQP_URL", "amqp://shop:rabbit-pass-42@mq.internal:5672/")
	t.Setenv("STAMPEDE_MYSQL_DSN", "shop:mysql-pass-42@tcp(db.internal:3306)/stampede?parseTime=true")
	for _, cmd := range []string{"serve", "demo", "token"} {
		var cfg Config
		var errs []error
		fs := newFlagSet(cmd, &cfg, &errs, nil)
		var out bytes.Buffer
		fs.SetOutput(&out)
		if err := fs.Parse([]string{"-h"}); !errors.Is(err, flag.ErrHelp) {
			t.Fatal(err)
		}
		help := out.String()
		for _, secret := range []string{"nobody-may-see", "rabbit-pass-42", "mysql-pass-42", devJWTSecret, devPaymentSecret} {
			if strings.Contains(help, secret) {
				t.Errorf("%s -h shows %q", cmd, secret)
			}
		}
		if _, narrow := commandSettings[cmd]; !narrow && (!strings.Contains(help, "mq.internal") || !strings.Contains(help, "db.internal")) {
			t.Errorf("%s -h lost the non-secret part of the URLs", cmd)
		}
	}
}

func TestDevWarningIsOneLine(t *testing.T) {
	cfg, err := parse("serve", []string{"--admin-users", "7"}, nil) // TestMain: development
	if err != nil {
		t.Fatal(err)
	}
	w := cfg.devWarning()
	for _, want := range []string{"DEVELOPMENT MODE", "demo login", "demo checkout", "/metrics", "STAMPEDE_JWT_SECRET is the built-in",
		"STAMPEDE_PAYMENT_SECRET is the built-in", "STAMPEDE_ADMIN_USERS=7"} {
		if !strings.Contains(w, want) {
			t.Errorf("warning %q lacks %q", w, want)
		}
	}
	if strings.Contains(w, "\n") {
		t.Errorf("warning spans lines: %q", w)
	}
}
