package lua

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Stock transfers between the shards of one product (hot-SKU sharding).
//
// A product created with N shards has N stock hashes, each under its own hash
// tag, so no script can touch two shards at once. Units move in two steps
// that cannot lose or double them across a crash:
//
//  1. transfer_out.lua on the donor: available -= n and the transfer
//     (id → "<to> <n>") recorded in the donor's Transfers hash, atomically;
//  2. transfer_in.lua on the receiver: available += n once, guarded by the
//     marker TransferIn(id); then HDEL of the donor's record.
//
// Between 1 and the HDEL the units are in flight: counted nowhere. Whoever
// crashes there leaves the record behind, and RepairTransfers (run by any
// gateway before it calls a product sold out) applies it; the marker makes a
// repeat of step 2 a no-op, so a repair racing the original mover is safe.

// Transfer is one recorded, not yet confirmed transfer of a donor shard.
type Transfer struct {
	ID    string
	To    int   // receiving shard
	Units int64 // units taken from the donor
}

// TransferOut runs transfer_out.lua: takes up to want units from shard from
// (keys k) for shard to, recording the transfer under id. moved is 0 when the
// donor is dry. ErrNotFound: no stock hash.
func TransferOut(ctx context.Context, rdb redis.Scripter, k Keys, id string, to int, want int64) (moved int64, err error) {
	res, err := xferOutScript.Run(ctx, rdb, []string{k.Stock(), k.Transfers()}, id, to, want).Slice()
	if err != nil {
		return 0, fmt.Errorf("lua: transfer out %s: %w", id, scriptFault(err, k.Tag()))
	}
	code, n, err := pair(res)
	if err != nil {
		return 0, err
	}
	switch code {
	case 1, 0:
		return n, nil
	case -1:
		return 0, ErrNotFound
	}
	return 0, fmt.Errorf("%w %d from transfer_out", errUnknownCode, code)
}

// TransferIn runs transfer_in.lua on the receiving shard (keys k): adds units
// once per transfer id. applied is false when it was applied before.
func TransferIn(ctx context.Context, rdb redis.Scripter, k Keys, id string, units int64, markerTTL time.Duration) (applied bool, err error) {
	res, err := xferInScript.Run(ctx, rdb, []string{k.Stock(), k.TransferIn(id)}, units, int64(markerTTL/time.Second)).Slice()
	if err != nil {
		return false, fmt.Errorf("lua: transfer in %s: %w", id, scriptFault(err, k.Tag()))
	}
	return appliedOnce(res, "transfer_in")
}

// CompleteTransfer applies transfer t recorded at donor shard from of
// productID to its receiver and deletes the donor's record. Safe to repeat
// and to run concurrently with another completion of the same transfer.
func CompleteTransfer(ctx context.Context, rdb redis.Cmdable, productID int64, from int, t Transfer, markerTTL time.Duration) error {
	if _, err := TransferIn(ctx, rdb, ShardKeys(productID, t.To), t.ID, t.Units, markerTTL); err != nil {
		return err
	}
	if err := rdb.HDel(ctx, ShardKeys(productID, from).Transfers(), t.ID).Err(); err != nil {
		return fmt.Errorf("lua: transfer %s: clear record: %w", t.ID, err)
	}
	return nil
}

// Move takes up to want units from shard from and adds them to shard to:
// TransferOut then CompleteTransfer. moved is 0 when the donor was dry. An
// error after TransferOut leaves a pending transfer for RepairTransfers.
func Move(ctx context.Context, rdb redis.Cmdable, productID int64, from, to int, id string, want int64, markerTTL time.Duration) (moved int64, err error) {
	moved, err = TransferOut(ctx, rdb, ShardKeys(productID, from), id, to, want)
	if err != nil || moved == 0 {
		return 0, err
	}
	t := Transfer{ID: id, To: to, Units: moved}
	if err := CompleteTransfer(ctx, rdb, productID, from, t, markerTTL); err != nil {
		return moved, err
	}
	return moved, nil
}

// PendingTransfers lists the transfers recorded at shard k and not yet
// confirmed applied.
func PendingTransfers(ctx context.Context, rdb redis.Cmdable, k Keys) ([]Transfer, error) {
	m, err := rdb.HGetAll(ctx, k.Transfers()).Result()
	if err != nil {
		return nil, fmt.Errorf("lua: pending transfers: %w", err)
	}
	out := make([]Transfer, 0, len(m))
	for id, v := range m {
		to, units, ok := strings.Cut(v, " ")
		t := Transfer{ID: id}
		var e1, e2 error
		t.To, e1 = strconv.Atoi(to)
		t.Units, e2 = strconv.ParseInt(units, 10, 64)
		if !ok || e1 != nil || e2 != nil {
			return nil, fmt.Errorf("lua: malformed transfer record %q = %q: %w", id, v, &CorruptError{Key: k.Transfers(), Detail: "malformed transfer record"})
		}
		out = append(out, t)
	}
	return out, nil
}

// RepairTransfers completes every pending transfer of productID's shards
// (0 … shards-1) and returns how many it completed. Run it before calling a
// sharded product sold out: units in flight are counted in no shard.
func RepairTransfers(ctx context.Context, rdb redis.Cmdable, productID int64, shards int, markerTTL time.Duration) (int, error) {
	n := 0
	var errs []error
	for sh := range shards {
		ts, err := PendingTransfers(ctx, rdb, ShardKeys(productID, sh))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, t := range ts {
			if err := CompleteTransfer(ctx, rdb, productID, sh, t, markerTTL); err != nil {
				errs = append(errs, err)
				continue
			}
			n++
		}
	}
	return n, errors.Join(errs...)
}
