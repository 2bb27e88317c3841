package lua

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// The lease of an orderNo node id (the gateway's NodeLease, which decides
// when to lease, renew and give up): the key NodeKey(id) holds the owner's
// string with a TTL.

var (
	nodeRenewScript   = redis.NewScript(nodeRenewSrc)
	nodeReleaseScript = redis.NewScript(nodeReleaseSrc)
)

// LeaseNode takes node id id for owner for ttl if no one holds it (SET NX):
// leased is false when it is held.
func LeaseNode(ctx context.Context, rdb redis.Cmdable, id int64, owner string, ttl time.Duration) (leased bool, err error) {
	return rdb.SetNX(ctx, NodeKey(id), owner, ttl).Result()
}

// RenewNode runs node_renew.lua: keeps id owner's for ttl more. held is false
// when another owner holds it (nothing changed); a lease that had expired
// and was free is taken again (held true).
func RenewNode(ctx context.Context, rdb redis.Scripter, id int64, owner string, ttl time.Duration) (held bool, err error) {
	res, err := nodeRenewScript.Run(ctx, rdb, []string{NodeKey(id)}, owner, ttl.Milliseconds()).Int64()
	if err != nil {
		return false, err
	}
	switch res {
	case 0:
		return false, nil
	case 1, 2:
		return true, nil
	}
	return false, fmt.Errorf("%w %d from node_renew", errUnknownCode, res)
}

// ReleaseNode runs node_release.lua: deletes the lease of id if owner still
// holds it.
func ReleaseNode(ctx context.Context, rdb redis.Scripter, id int64, owner string) error {
	return nodeReleaseScript.Run(ctx, rdb, []string{NodeKey(id)}, owner).Err()
}
