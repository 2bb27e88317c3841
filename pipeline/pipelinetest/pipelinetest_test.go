package pipelinetest

import (
	"fmt"
	"math/rand/v2"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"
)

func vhosts(t *testing.T) []string {
	t.Helper()
	out, err := rabbitmqctlOut("-q", "list_vhosts", "name")
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(out)
}

// On a broker that is not the run's own, a test's vhost is deleted when the
// test ends; vhosts the tests did not create (a developer's, a recent one of
// another run) are never touched; one of this naming older than VhostLease
// is deleted.
func TestExternalBrokerDeletesOnlyWhatTheTestsCreated(t *testing.T) {
	t.Setenv("STAMPEDE_TEST_OWNED", "")
	suffix := fmt.Sprintf("%06x", rand.Uint32()&0xffffff)
	mine := "mydev_keep_" + suffix
	recent := "stampede_test_other_" + time.Now().UTC().Format(vhostTime) + suffix
	old := "stampede_test_old_" + time.Now().Add(-VhostLease-time.Hour).UTC().Format(vhostTime) + suffix
	defs := fmt.Sprintf(`{"vhosts": [{"name": %q}, {"name": %q}, {"name": %q}]}`, mine, recent, old)
	if err := rabbitmqctlIn([]byte(defs), "import_definitions"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, v := range []string{mine, recent} {
			if err := rabbitmqctl("delete_vhost", v); err != nil {
				t.Errorf("left behind: %v", err)
			}
		}
	})
	if err := sweepVhosts(time.Now()); err != nil {
		t.Fatal(err)
	}
	var name string
	t.Run("test", func(t *testing.T) {
		u, err := url.Parse(Vhost(t, "probe"))
		if err != nil {
			t.Fatal(err)
		}
		name = strings.TrimPrefix(u.Path, "/")
		if !vhostRE.MatchString(name) || name != VhostName(t, "probe") {
			t.Fatalf("vhost %q (VhostName %q) is not of this package's naming", name, VhostName(t, "probe"))
		}
		ch := Channel(t, Vhost(t, "probe"))
		if _, err := ch.QueueDeclare("probe", true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
	})
	have := vhosts(t)
	for _, v := range []string{mine, recent} {
		if !slices.Contains(have, v) {
			t.Errorf("vhost %s was deleted: the tests did not create it", v)
		}
	}
	if slices.Contains(have, old) {
		t.Errorf("vhost %s, left behind more than %v ago, is still there", old, VhostLease)
	}
	if slices.Contains(have, name) {
		t.Errorf("the test's vhost %s is still there after the test", name)
	}
}

// On the run's own broker the vhosts are pooled: the next test gets the
// last one's vhost with the pipeline's topology emptied.
func TestOwnedBrokerPoolsVhosts(t *testing.T) {
	u, err := url.Parse(BaseURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("STAMPEDE_TEST_OWNED", u.Host)
	// The broker may be a developer's, owned only for this test: the
	// vhosts pooled here are deleted at its end.
	t.Cleanup(func() {
		vhostPool.mu.Lock()
		idle := vhostPool.idle
		vhostPool.idle = nil
		vhostPool.mu.Unlock()
		for _, v := range idle {
			if err := rabbitmqctl("delete_vhost", v.Name); err != nil {
				t.Errorf("left behind: %v", err)
			}
		}
	})
	var first, second string
	t.Run("first", func(t *testing.T) {
		first = Vhost(t, "pool")
	})
	t.Run("second", func(t *testing.T) {
		second = Vhost(t, "pool")
		if got := Vhost(t, "other"); got == second {
			t.Fatal("two labels of one test share a vhost")
		}
	})
	if first != second {
		t.Fatalf("second test got %s, want the pooled %s", second, first)
	}
}
