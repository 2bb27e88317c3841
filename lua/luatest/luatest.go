// Package luatest gives tests a Redis database of their own on the test
// server: a database the test claims while it is empty, empties between
// uses and gives back empty when it ends. It never empties a database it did
// not claim, so it is safe on a developer's own Redis. Use it only from
// _test.go files.
package luatest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Addr is the test Redis address, from STAMPEDE_TEST_REDIS_ADDR or
// 127.0.0.1:6379. `make test` points it at a server of the run's own
// (scripts/testservices.sh); on any other server the tests use only the
// databases they claim (Claim).
func Addr() string {
	if a := os.Getenv("STAMPEDE_TEST_REDIS_ADDR"); a != "" {
		return a
	}
	return "127.0.0.1:6379"
}

// Labels for New: calls of New in one test with the same label share one
// database. They are names, not database numbers: each test's database is
// whichever empty one Claim found. They lie outside any server's range of
// databases, so code that still uses one as a database number fails ("ERR
// DB index is out of range") instead of writing into another test's
// database; a child process gets the number from the client's
// Options().DB.
const (
	DBLua = 1001 + iota
	DBGateway
	DBPipeline
	DBPush
	DBCmd
	DBBench
	DBPersistence
	DBE2E
)

// ClaimKey is the key that marks a database as claimed by a test: its
// value is "<token>|<lease end, Unix ms>|<host>|<pid>". It sits outside
// Stampede's "stampede:" keys, so no Stampede code reads or counts it.
const ClaimKey = "stampede-test:claim"

// Lease is how long a claim holds without its process: a claim whose lease
// ended, or whose process on this host is gone (a run killed before its
// cleanup), may be taken over by the next claim, which empties the
// database first. Longer than any test binary runs (make test: -timeout 40m).
const Lease = 3 * time.Hour

// claimScript claims the selected database: it sets KEYS[1] to ARGV[1]
// when the database is empty (answer 1), or, when ARGV[2] is not empty and
// KEYS[1] still holds ARGV[2] (a stale claim, checked by the caller), it
// empties the database and sets KEYS[1] (answer 2). Otherwise it answers 0
// and changes nothing.
var claimScript = redis.NewScript(`
if redis.call('DBSIZE') == 0 then
  redis.call('SET', KEYS[1], ARGV[1])
  return 1
end
if ARGV[2] ~= '' and redis.call('GET', KEYS[1]) == ARGV[2] then
  redis.call('FLUSHDB')
  redis.call('SET', KEYS[1], ARGV[1])
  return 2
end
return 0`)

// flushScript empties the selected database if KEYS[1] holds ARGV[1] (our
// claim), and keeps the claim when ARGV[2] is "keep" (answer 1); otherwise
// it answers 0 and changes nothing.
var flushScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('FLUSHDB')
if ARGV[2] == 'keep' then
  redis.call('SET', KEYS[1], ARGV[1])
end
return 1`)

// Database is a database of the test server claimed by one caller.
type Database struct {
	Addr  string // the server, host:port
	DB    int    // the database number
	claim string // the value of ClaimKey that is ours
}

// Client returns a new client on the database; the caller closes it.
func (d *Database) Client() *redis.Client {
	return redis.NewClient(&redis.Options{Addr: d.Addr, DB: d.DB})
}

// Flush empties the database and keeps it claimed. It fails, changing
// nothing, when the claim is no longer ours.
func (d *Database) Flush(ctx context.Context) error { return d.flush(ctx, "keep") }

// Release empties the database and gives it back (an empty database is
// free to claim). It fails, changing nothing, when the claim is no longer
// ours.
func (d *Database) Release(ctx context.Context) error { return d.flush(ctx, "release") }

func (d *Database) flush(ctx context.Context, mode string) error {
	c := redis.NewClient(&redis.Options{Addr: d.Addr, DB: d.DB, PoolSize: 1})
	defer c.Close()
	n, err := flushScript.Run(ctx, c, []string{ClaimKey}, d.claim, mode).Int()
	if err != nil {
		return fmt.Errorf("luatest: %s redis db %d at %s: %w", mode, d.DB, d.Addr, err)
	}
	if n == 0 {
		return fmt.Errorf("luatest: redis db %d at %s is no longer claimed by this test (%s holds another claim): left as it is", d.DB, d.Addr, ClaimKey)
	}
	return nil
}

// Claim claims an empty database of the test server (Addr) for the caller,
// trying databases 1 to n-1 (n from CONFIG GET databases, 16 if the server
// does not say) from a random one on; database 0, where servers start, is
// never used. A database is claimed only while it holds no key at all, or
// when it holds only a stale claim's data (its lease ended, or its process on
// this host is gone). The caller calls Release when done.
func Claim(ctx context.Context) (*Database, error) {
	addr := Addr()
	n := databases(ctx, addr)
	if n < 2 {
		return nil, fmt.Errorf("luatest: redis at %s has %d database(s); the tests need one besides 0", addr, n)
	}
	ours := newClaim()
	start := rand.IntN(n - 1)
	var lastErr error
	for i := range n - 1 {
		db := 1 + (start+i)%(n-1)
		ok, err := claimDB(ctx, addr, db, ours)
		if err != nil {
			lastErr = err
			continue
		}
		if ok {
			return &Database{Addr: addr, DB: db, claim: ours}, nil
		}
	}
	if lastErr != nil {
		return nil, fmt.Errorf("luatest: claim a redis db at %s: %w (is Redis running? `make test` starts servers of its own; scripts/testservices.sh)", addr, lastErr)
	}
	return nil, fmt.Errorf("luatest: no empty redis db to claim at %s: databases 1-%d hold data or other runs' claims, and the tests never empty a database they did not claim (`make test` starts servers of its own; scripts/testservices.sh)", addr, n-1)
}

// claimDB claims database db at addr with value ours: at once if it is
// empty, or by taking over a stale claim.
func claimDB(ctx context.Context, addr string, db int, ours string) (bool, error) {
	c := redis.NewClient(&redis.Options{Addr: addr, DB: db, PoolSize: 1})
	defer c.Close()
	n, err := claimScript.Run(ctx, c, []string{ClaimKey}, ours, "").Int()
	if err != nil || n > 0 {
		return n > 0, err
	}
	have, err := c.Get(ctx, ClaimKey).Result()
	if errors.Is(err, redis.Nil) {
		return false, nil // someone's data, no claim
	}
	if err != nil || !staleClaim(have, time.Now()) {
		return false, err
	}
	n, err = claimScript.Run(ctx, c, []string{ClaimKey}, ours, have).Int()
	return n > 0, err
}

// databases is the server's number of databases (CONFIG GET databases; 16,
// Redis's default, when CONFIG is refused or renamed).
func databases(ctx context.Context, addr string) int {
	c := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 1})
	defer c.Close()
	m, err := c.ConfigGet(ctx, "databases").Result()
	if err != nil {
		return 16
	}
	n, err := strconv.Atoi(m["databases"])
	if err != nil {
		return 16
	}
	return n
}

var hostname = sync.OnceValue(func() string {
	h, _ := os.Hostname()
	return strings.ReplaceAll(h, "|", "_")
})

// newClaim is a fresh claim value: a random token, the lease's end, this
// host and process.
func newClaim() string {
	return fmt.Sprintf("%016x|%d|%s|%d", rand.Uint64(), time.Now().Add(Lease).UnixMilli(), hostname(), os.Getpid())
}

// staleClaim reports whether claim value v may be taken over at now: its
// lease ended, or it names a process of this host that no longer runs. A
// value of another shape is no claim of ours: never stale.
func staleClaim(v string, now time.Time) bool {
	f := strings.Split(v, "|")
	if len(f) != 4 {
		return false
	}
	end, err1 := strconv.ParseInt(f[1], 10, 64)
	pid, err2 := strconv.Atoi(f[3])
	if err1 != nil || err2 != nil {
		return false
	}
	if now.UnixMilli() > end {
		return true
	}
	return f[2] == hostname() && pid > 0 && errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}

var (
	testsMu sync.Mutex
	tests   = map[testing.TB]map[int]*Database{}
)

// New returns a client on the test's database of label (DBLua …: calls
// with the same label in one test share a database), emptied; the client
// is closed when the test ends, and the database emptied and given back.
// The database number, for a child process or a second client, is the
// client's Options().DB.
func New(t testing.TB, label int) *redis.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	testsMu.Lock()
	d := tests[t][label]
	testsMu.Unlock()
	if d != nil {
		if err := d.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	} else {
		var err error
		if d, err = Claim(ctx); err != nil {
			t.Fatal(err)
		}
		testsMu.Lock()
		if tests[t] == nil {
			tests[t] = map[int]*Database{}
			t.Cleanup(func() { release(t) })
		}
		tests[t][label] = d
		testsMu.Unlock()
	}
	c := d.Client()
	t.Cleanup(func() { c.Close() })
	return c
}

// Flush empties the database of c, a client New returned, and keeps it the
// test's: a FLUSHDB of its own would give the database away (an empty
// database is free to claim) while the test still uses it.
func Flush(ctx context.Context, c *redis.Client) error {
	opts := c.Options()
	var d *Database
	testsMu.Lock()
	for _, dbs := range tests {
		for _, x := range dbs {
			if x.Addr == opts.Addr && x.DB == opts.DB {
				d = x
			}
		}
	}
	testsMu.Unlock()
	if d == nil {
		return fmt.Errorf("luatest: redis db %d at %s is no test's database (luatest.New)", opts.DB, opts.Addr)
	}
	return d.Flush(ctx)
}

// release gives back every database of test t.
func release(t testing.TB) {
	testsMu.Lock()
	dbs := tests[t]
	delete(tests, t)
	testsMu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, d := range dbs {
		if err := d.Release(ctx); err != nil {
			t.Error(err)
		}
	}
}

// Private starts a Redis server of the test's own on a free loopback port
// (the redis-server binary, no persistence) and returns a client to it; the
// server is killed when the test ends. Tests that change server settings
// (CONFIG SET) use it, so packages running in parallel on the shared Redis
// never see the change.
func Private(t testing.TB) *redis.Client {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("luatest: no redis-server binary for a private Redis: %v (make services installs it)", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	cmd := exec.Command(bin, "--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--save", "", "--appendonly", "no",
		"--dir", t.TempDir(), "--daemonize", "no", "--maxmemory-policy", "noeviction")
	if err := cmd.Start(); err != nil {
		t.Fatalf("luatest: start redis-server: %v", err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + strconv.Itoa(port)})
	t.Cleanup(func() { c.Close() })
	deadline := time.Now().Add(10 * time.Second)
	for c.Ping(context.Background()).Err() != nil {
		if time.Now().After(deadline) {
			t.Fatalf("luatest: private redis-server on port %d did not answer", port)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return c
}
