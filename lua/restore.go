package lua

import (
	"context"
	_ "embed"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

//go:embed restore.lua
var restoreSrc string

var restoreScript = redis.NewScript(restoreSrc)

// Restore runs restore.lua: puts back the lost reservation of orderNo
// (quantity units, the user's held count, its idempotency record with status
// if missing) once per order. The caller must have established the loss
// (pipeline.RepairLostWrites). restored is false when it was restored
// before. ErrNotFound: no stock hash. ttl is what is left of the record's
// lifetime (at least 1s).
func Restore(ctx context.Context, rdb redis.Scripter, k Keys, orderNo string, userID int64, requestID string, quantity int64, status string, ttl time.Duration) (restored bool, err error) {
	res, err := restoreScript.Run(ctx, rdb,
		[]string{k.Stock(), k.Request(userID, requestID), k.User(userID), k.Restored(orderNo), k.Buyers()},
		orderNo, quantity, max(int64(ttl/time.Second), 1), status, userID,
	).Slice()
	if err != nil {
		return false, fmt.Errorf("lua: restore %s: %w", orderNo, scriptFault(err, k.Tag()))
	}
	return appliedOnce(res, "restore")
}
