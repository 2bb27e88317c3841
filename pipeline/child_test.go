package pipeline_test

import (
	"os"
	"strconv"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-sh/stampede/lua/luatest"
	"github.com/stampede-sh/stampede/persistence/persistencetest"
)

// The environment variables that hand a test's MySQL database and Redis
// database to a child test process it starts (TestLockBatchChildProcess,
// TestWriterLockChildProcess): the databases are the test's own, not fixed
// names or numbers.
const (
	childMySQLEnv   = "STAMPEDE_TEST_CHILD_MYSQL_DSN"
	childRedisDBEnv = "STAMPEDE_TEST_CHILD_REDIS_DB"
)

// childEnviron is os.Environ() with e's MySQL database and Redis database
// for a child test process.
func (e *env) childEnviron() []string {
	return append(os.Environ(),
		childMySQLEnv+"="+persistencetest.DSN(persistencetest.Name(e.store)),
		childRedisDBEnv+"="+strconv.Itoa(e.rdb.Options().DB))
}

// childRedis is, in a child test process, a client on its parent test's
// Redis database.
func childRedis(t *testing.T) *redis.Client {
	db, err := strconv.Atoi(os.Getenv(childRedisDBEnv))
	if err != nil {
		t.Fatalf("%s: %v", childRedisDBEnv, err)
	}
	return redis.NewClient(&redis.Options{Addr: luatest.Addr(), DB: db})
}
