package main

import (
	"os"
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
	DependsOn     map[string]struct {
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
	raw, err := os.ReadFile("../../docker-compose.yml")
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
			if strings.HasPrefix(v, "${") {
				v = "compose-test-secret-0123456789abcdef-" + k // what the user sets
			}
			t.Setenv(k, v)
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
	conf, err := os.ReadFile("../../deploy/nginx/stampede.conf")
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
