package lua

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

//go:embed buyers.lua
var buyersSrc string

var buyersScript = redis.NewScript(buyersSrc)

func init() { all = append(all, buyersScript) }

// BuyersState says what Buyers found.
type BuyersState int

const (
	BuyersUntracked BuyersState = iota // the shard may have buyers the set misses: do not use it
	BuyersUnchanged                    // the set is the caller's copy (same count, same incarnation)
	BuyersTooMany                      // more members than asked for: not sent
	BuyersMembers                      // the set, in BuyersResult.Users and .Incarnation
)

// BuyersResult is what Buyers answered.
type BuyersResult struct {
	State BuyersState
	// Count is the set's size (SCARD, the incarnation member included).
	Count int64
	// Users (BuyersMembers) are the set's userIds, unordered.
	Users []int64
	// Incarnation (BuyersMembers) is the set's incarnation member, "" for an
	// empty set.
	Incarnation string
}

// Buyers runs buyers.lua on shard k: the shard's buyers set, unless the
// caller's copy (count members, incarnation; 0 and "" without a copy) is
// still the set, or the set has more than max members. The set is trusted
// only on shards created by Load since reserve.lua keeps it.
func Buyers(ctx context.Context, rdb redis.Scripter, k Keys, count int64, incarnation string, max int) (BuyersResult, error) {
	res, err := buyersScript.Run(ctx, rdb, []string{k.Stock(), k.Buyers()}, count, incarnation, max).Slice()
	if err != nil {
		return BuyersResult{}, fmt.Errorf("lua: buyers: %w", scriptFault(err, k.Tag()))
	}
	if len(res) < 2 {
		return BuyersResult{}, fmt.Errorf("lua: unexpected buyers result %v", res)
	}
	code, ok1 := res[0].(int64)
	n, ok2 := res[1].(int64)
	if !ok1 || !ok2 {
		return BuyersResult{}, fmt.Errorf("lua: unexpected buyers result %v", res)
	}
	r := BuyersResult{Count: n}
	switch code {
	case 0:
		r.State = BuyersUntracked
		return r, nil
	case 1:
		r.State = BuyersUnchanged
		return r, nil
	case 2:
		r.State = BuyersTooMany
		return r, nil
	case 3:
	default:
		return BuyersResult{}, fmt.Errorf("%w %d from buyers", errUnknownCode, code)
	}
	var members []any
	if len(res) == 3 {
		members, _ = res[2].([]any)
	}
	if int64(len(members)) != n {
		return BuyersResult{}, fmt.Errorf("lua: buyers: %d members for a count of %d", len(members), n)
	}
	r.State = BuyersMembers
	r.Users = make([]int64, 0, len(members))
	for _, m := range members {
		s, _ := m.(string)
		if rest, ok := strings.CutPrefix(s, "e"); ok && rest != "" {
			r.Incarnation = s
			continue
		}
		id, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return BuyersResult{}, &CorruptError{Key: k.Buyers(), Detail: fmt.Sprintf("member %q is not a userId", s)}
		}
		r.Users = append(r.Users, id)
	}
	return r, nil
}
