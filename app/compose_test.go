package app

import (
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// composeService is the part of a docker-compose.yml service the test reads.
type composeService struct {
	Image         string            `yaml:"image"`
	Command       []string          `yaml:"command"`
	Environment   map[string]string `yaml:"environment"`
	Ports         []string          `yaml:"ports"`
	ContainerName string            `yaml:"container_name"`
	Healthcheck   struct {
		Test []string `yaml:"test"`
	} `yaml:"healthcheck"`
	DependsOn map[string]struct {
		Condition string `yaml:"condition"`
	} `yaml:"depends_on"`
}

// TestComposeScalesEveryRole keeps docker-compose.yml `--scale` friendly:
// every role is a service of its own running only that role, with no fixed
// container name and no published port (the lb service is the one entry
// point), waiting for the one-shot migrate service; gateways lease their
// node ids; every STAMPEDE_ variable set is one the binary reads, with a
// value it accepts.
func TestComposeScalesEveryRole(t *testing.T) {
	raw, err := os.ReadFile("../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Services map[string]composeService `yaml:"services"`
	}
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	known, _ := settingFlags(t)
	envs := map[string]bool{}
	for _, env := range known {
		envs[env] = true
	}
	for _, role := range allRoles {
		s, ok := doc.Services[role]
		if !ok {
			t.Errorf("no service %q", role)
			continue
		}
		if want := []string{"serve", "--roles", role}; !slices.Equal(s.Command, want) {
			t.Errorf("%s: command %q, want %q", role, s.Command, want)
		}
		if s.ContainerName != "" || len(s.Ports) > 0 {
			t.Errorf("%s: container_name %q, ports %q: cannot be scaled", role, s.ContainerName, s.Ports)
		}
		if d := s.DependsOn["migrate"]; d.Condition != "service_completed_successfully" {
			t.Errorf("%s: does not wait for migrate to complete (%q)", role, d.Condition)
		}
		if s.Image != "stampede:local" {
			t.Errorf("%s: image %q", role, s.Image)
		}
		if s.Environment["STAMPEDE_AMQP_QUEUE_TYPE"] != "quorum" {
			t.Errorf("%s: queue type %q, want quorum in the deployment", role, s.Environment["STAMPEDE_AMQP_QUEUE_TYPE"])
		}
		if s.Environment["STAMPEDE_NODE_ID"] != "-1" {
			t.Errorf("%s: STAMPEDE_NODE_ID %q: replicas must lease their node ids (-1)", role, s.Environment["STAMPEDE_NODE_ID"])
		}
		// The binary accepts the service's environment as it is.
		for k := range s.Environment {
			if strings.HasPrefix(k, "STAMPEDE_") && !envs[k] {
				t.Errorf("%s: %s is not a setting of the binary", role, k)
			}
		}
		// Production-like: production mode, secrets the user must set
		// (compose's ${VAR:?message} refuses to start without them).
		if s.Environment["STAMPEDE_MODE"] != "production" {
			t.Errorf("%s: STAMPEDE_MODE %q, want production", role, s.Environment["STAMPEDE_MODE"])
		}
		for _, k := range []string{"STAMPEDE_JWT_SECRET", "STAMPEDE_PAYMENT_SECRET"} {
			if v := s.Environment[k]; !strings.HasPrefix(v, "${"+k+":?") {
				t.Errorf("%s: %s is %q, want a ${%s:?…} placeholder the user must set", role, k, v, k)
			}
		}
		for k, v := range s.Environment {
			t.Setenv(k, composeValue(v))
		}
		cfg, err := parse("serve", s.Command[1:], nil)
		if err != nil {
			t.Errorf("%s: the binary refuses the service's settings: %v", role, err)
		} else if roles, _ := cfg.roleSet(); len(roles) != 1 || !roles[role] {
			t.Errorf("%s: runs roles %v", role, roles)
		}
		for k := range s.Environment {
			os.Unsetenv(k)
		}
	}
	if m := doc.Services["migrate"]; !slices.Equal(m.Command, []string{"migrate"}) {
		t.Errorf("migrate service command %q", m.Command)
	}
	lb := doc.Services["lb"]
	if len(lb.Ports) != 1 || !strings.HasPrefix(lb.Ports[0], "127.0.0.1:") {
		t.Errorf("lb ports %q: want one, on loopback", lb.Ports)
	}
	conf, err := os.ReadFile("../deploy/nginx/stampede.conf")
	if err != nil {
		t.Fatal(err)
	}
	// Exact lines: a URI after host:port in a variable proxy_pass would
	// replace every request's path.
	lines := map[string]bool{}
	for _, l := range strings.Split(string(conf), "\n") {
		lines[strings.TrimSpace(l)] = true
	}
	for _, want := range []string{"set $gateway http://gateway:8080;", "set $push http://push:8081;", "proxy_pass $gateway;",
		"proxy_pass $push;", "resolver 127.0.0.11 valid=5s ipv6=off;"} {
		if !lines[want] {
			t.Errorf("deploy/nginx/stampede.conf lacks the line %q", want)
		}
	}
	// Consumers get enough connections for their workers; the sum at the
	// documented scale stays below the server's max_connections.
	if c := doc.Services["consumer"].Environment["STAMPEDE_MYSQL_MAX_CONNS"]; c != "32" {
		t.Errorf("consumer pool %q, want 32 (3 handlers × 8 workers)", c)
	}
	mysqlCmd := strings.Join(doc.Services["mysql"].Command, " ")
	if !strings.Contains(mysqlCmd, "--max-connections=500") {
		t.Errorf("mysql command %q does not raise max_connections", mysqlCmd)
	}
	// The scale of docs/scaling.md's compose example.
	sum := 0
	for role, n := range map[string]int{"gateway": 3, "writer": 2, "relay": 2, "consumer": 3, "sweeper": 2, "push": 1} {
		pool, err := strconv.Atoi(doc.Services[role].Environment["STAMPEDE_MYSQL_MAX_CONNS"])
		if err != nil {
			t.Fatalf("%s: pool: %v", role, err)
		}
		sum += n * pool
	}
	if sum > 400 { // headroom below 500 for migrate, admins and monitoring
		t.Errorf("%d MySQL connections at the documented scale", sum)
	}
}

// composeVar is a compose interpolation: ${VAR}, ${VAR:?message}, ${VAR:-default}.
var composeVar = regexp.MustCompile(`\$\{([A-Z0-9_]+)(?::([?-])([^}]*))?\}`)

// composeValue is v as compose interpolates it when the user has set every
// required variable (to a secret of its own) and none of the optional ones.
func composeValue(v string) string {
	return composeVar.ReplaceAllStringFunc(v, func(m string) string {
		p := composeVar.FindStringSubmatch(m)
		if p[2] == "-" {
			return p[3]
		}
		return "c0mp0se-" + strings.ToLower(p[1]) + "-9f3a7c1e5b2d8046ae"
	})
}

// composeDoc is docker-compose.yml as far as the tests read it.
func composeDoc(t *testing.T, path string) map[string]composeService {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Services map[string]composeService `yaml:"services"`
	}
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	return doc.Services
}

// required reports whether v is, or contains, a ${VAR:?…} the user must set.
func required(v, name string) bool { return strings.Contains(v, "${"+name+":?") }

// TestComposeLeastPrivilege (issue 26): the deployment has no password-less
// or default-password service. MySQL: a root password from the environment,
// the roles as user stampede (DML only, deploy/mysql/init), migrations as
// stampede_migrate; RabbitMQ: user stampede with a password, no guest;
// Redis: requirepass, and every role sends the password; Grafana: a login,
// no anonymous Admin. Only lb publishes an application port; backing
// services publish none.
func TestComposeLeastPrivilege(t *testing.T) {
	svcs := composeDoc(t, "../docker-compose.yml")
	my := svcs["mysql"]
	if _, empty := my.Environment["MYSQL_ALLOW_EMPTY_PASSWORD"]; empty || !required(my.Environment["MYSQL_ROOT_PASSWORD"], "MYSQL_ROOT_PASSWORD") {
		t.Errorf("mysql environment %v: want MYSQL_ROOT_PASSWORD from the environment and no empty password", my.Environment)
	}
	initSQL, err := os.ReadFile("../deploy/mysql/init/10-stampede-users.sh")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"GRANT SELECT, INSERT, UPDATE, DELETE ON \\`stampede\\`.* TO 'stampede'@'%'",
		"GRANT ALL PRIVILEGES ON \\`stampede\\`.* TO 'stampede_migrate'@'%'", "${STAMPEDE_DB_PASSWORD}", "${STAMPEDE_MIGRATE_DB_PASSWORD}"} {
		if !strings.Contains(string(initSQL), want) {
			t.Errorf("deploy/mysql/init lacks %q", want)
		}
	}
	for _, v := range []string{"STAMPEDE_DB_PASSWORD", "STAMPEDE_MIGRATE_DB_PASSWORD"} {
		if !required(my.Environment[v], v) {
			t.Errorf("mysql: %s is %q, want it from the environment", v, my.Environment[v])
		}
	}
	if dsn := svcs["migrate"].Environment["STAMPEDE_MYSQL_DSN"]; !strings.HasPrefix(dsn, "stampede_migrate:") || !required(dsn, "STAMPEDE_MIGRATE_DB_PASSWORD") {
		t.Errorf("migrate DSN %q", dsn)
	}
	rb := svcs["rabbitmq"]
	if rb.Environment["RABBITMQ_DEFAULT_USER"] != "stampede" || !required(rb.Environment["RABBITMQ_DEFAULT_PASS"], "RABBITMQ_PASSWORD") {
		t.Errorf("rabbitmq environment %v", rb.Environment)
	}
	rd := svcs["redis"]
	if !strings.Contains(strings.Join(rd.Command, " "), "requirepass $$REDIS_PASSWORD\n") || !required(rd.Environment["REDIS_PASSWORD"], "REDIS_PASSWORD") {
		t.Errorf("redis: command %q, environment %v: want requirepass from the environment", rd.Command, rd.Environment)
	}
	for _, role := range allRoles {
		env := svcs[role].Environment
		if dsn := env["STAMPEDE_MYSQL_DSN"]; !strings.HasPrefix(dsn, "stampede:") || !required(dsn, "STAMPEDE_DB_PASSWORD") {
			t.Errorf("%s: MySQL DSN %q, want user stampede with its password from the environment", role, dsn)
		}
		if u := env["STAMPEDE_AMQP_URL"]; !strings.HasPrefix(u, "amqp://stampede:") || !required(u, "RABBITMQ_PASSWORD") || strings.Contains(u, "guest") {
			t.Errorf("%s: AMQP URL %q", role, u)
		}
		if !required(env["STAMPEDE_REDIS_PASSWORD"], "REDIS_PASSWORD") {
			t.Errorf("%s: STAMPEDE_REDIS_PASSWORD %q", role, env["STAMPEDE_REDIS_PASSWORD"])
		}
	}
	gf := svcs["grafana"]
	if gf.Environment["GF_AUTH_ANONYMOUS_ENABLED"] != "false" || gf.Environment["GF_AUTH_ANONYMOUS_ORG_ROLE"] != "" ||
		!required(gf.Environment["GF_SECURITY_ADMIN_PASSWORD"], "GRAFANA_ADMIN_PASSWORD") {
		t.Errorf("grafana environment %v: want a login with a password from the environment, no anonymous access", gf.Environment)
	}
	for name, s := range svcs {
		switch name {
		case "lb", "prometheus", "grafana":
			for _, p := range s.Ports {
				if !strings.HasPrefix(p, "127.0.0.1:") {
					t.Errorf("%s publishes %q beyond loopback", name, p)
				}
			}
		default:
			if len(s.Ports) > 0 {
				t.Errorf("%s publishes %q: only lb (and the observability profile) publish ports", name, s.Ports)
			}
		}
		for k, v := range s.Environment {
			if strings.HasPrefix(k, "STAMPEDE_") && strings.HasSuffix(k, "_ADDR") && strings.HasPrefix(v, "0.0.0.0:") &&
				k != "STAMPEDE_HTTP_ADDR" && k != "STAMPEDE_PUSH_ADDR" && k != "STAMPEDE_METRICS_ADDR" {
				t.Errorf("%s: %s=%s listens on every interface", name, k, v)
			}
		}
	}
	// The development services file is for loopback only.
	for name, s := range composeDoc(t, "../deploy/services.compose.yml") {
		for _, p := range s.Ports {
			if !strings.HasPrefix(p, "127.0.0.1:") {
				t.Errorf("deploy/services.compose.yml: %s publishes %q beyond loopback", name, p)
			}
		}
	}
}

// passwordArg is a password, secret or key variable given as a command's
// argument or option (-p"$X", -a "$X", --requirepass "$X", --password=$X).
var passwordArg = regexp.MustCompile(`(^|\s)-{1,2}[A-Za-z-]*(\s+|=)?["']?\$\$?\{?[A-Z_]*(PASSWORD|PASS|SECRET)`)

// TestComposePasswordsOffCommandLines: no service command, healthcheck or
// MySQL init script passes a password as an argument, which every user of
// the host sees in ps (before: redis-server --requirepass, redis-cli -a,
// mysqladmin -p and mysql -p did). Passwords go in the environment
// (MYSQL_PWD, REDISCLI_AUTH) or on standard input.
func TestComposePasswordsOffCommandLines(t *testing.T) {
	var lines []string
	for name, s := range composeDoc(t, "../docker-compose.yml") {
		for _, part := range append(append([]string{}, s.Command...), s.Healthcheck.Test...) {
			for _, l := range strings.Split(part, "\n") {
				lines = append(lines, name+": "+l)
			}
		}
	}
	script, err := os.ReadFile("../deploy/mysql/init/10-stampede-users.sh")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(script), "\n") {
		lines = append(lines, "deploy/mysql/init: "+l)
	}
	checked := 0
	for _, l := range lines {
		if strings.Contains(l, "PASSWORD") {
			checked++
		}
		if passwordArg.MatchString(l) {
			t.Errorf("a password on a command line: %s", l)
		}
	}
	if checked < 4 {
		t.Fatalf("only %d lines name a password: the test reads nothing", checked)
	}
}

// pinnedImage: an exact version (three numbers, or Debian's two), with an
// optional variant, or a digest; never latest, a bare name or a major alone.
var pinnedImage = regexp.MustCompile(`^[a-z0-9./_-]+(:v?\d+\.\d+(\.\d+)?(-[a-z0-9.-]+)?(@sha256:[0-9a-f]{64})?|@sha256:[0-9a-f]{64})$`)

// TestImagesPinnedAndNonRoot (issue 26): every base image of the Dockerfile
// and every image of both compose files is pinned to an exact version; the
// image runs as a non-root user and sets no 0.0.0.0 listen address of its
// own; serve does not migrate (its MySQL user may not).
func TestImagesPinnedAndNonRoot(t *testing.T) {
	raw, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	var froms []string
	user := ""
	for _, l := range strings.Split(string(raw), "\n") {
		f := strings.Fields(l)
		switch {
		case len(f) >= 2 && f[0] == "FROM":
			froms, user = append(froms, f[1]), "" // USER counts after the last FROM
		case len(f) >= 2 && f[0] == "USER":
			user = f[1]
		case len(f) >= 1 && f[0] == "ENV" && strings.Contains(l, "0.0.0.0"):
			t.Errorf("Dockerfile sets a listen address on every interface: %q", l)
		case len(f) >= 1 && f[0] == "CMD" && strings.Contains(l, "migrate"):
			t.Errorf("Dockerfile CMD migrates: %q", l)
		}
	}
	if len(froms) != 2 {
		t.Fatalf("Dockerfile FROM lines %q", froms)
	}
	images := froms
	for _, file := range []string{"../docker-compose.yml", "../deploy/services.compose.yml"} {
		for name, s := range composeDoc(t, file) {
			if s.Image != "stampede:local" {
				images = append(images, s.Image)
			}
			_ = name
		}
	}
	for _, img := range images {
		if !pinnedImage.MatchString(img) {
			t.Errorf("image %q is not pinned to an exact version", img)
		}
	}
	uid, _, _ := strings.Cut(user, ":")
	if n, err := strconv.Atoi(uid); user == "" || uid == "root" || (err == nil && n == 0) {
		t.Errorf("the image runs as %q: want a non-root user", user)
	}
}
