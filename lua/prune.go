package lua

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

var pruneScript = redis.NewScript(pruneSrc)

// PruneConsumers runs prune.lua on intake stream stream: deletes from group
// the consumers with no pending entry idle at least idle, except keep, or
// only only when it is not empty. It returns how many it deleted. Redis's
// errors are returned as they are (a missing group is a redis.Error).
func PruneConsumers(ctx context.Context, rdb redis.Scripter, stream, group string, idle time.Duration, keep, only string) (int, error) {
	return pruneScript.Run(ctx, rdb, []string{stream}, group, idle.Milliseconds(), keep, only).Int()
}
