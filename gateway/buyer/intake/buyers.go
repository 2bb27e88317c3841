package intake

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stampede-sh/stampede/lua"
)

// Buyers of sold-out products (Config.SoldOutBuyers, issue 19). A sold-out
// cache hit must still answer a replay of an accepted intent with its
// orderNo, so it read the request record in Redis: one round trip per
// rejection, most of a sold-out answer's cost. But only a user who holds an
// accepted intent for the product can have a record to replay, and there are
// at most as many of them as units sold. reserve.lua adds the user of every
// acceptance to the shard's buyers set (lua.Keys.Buyers); a gateway that
// holds the product sold out keeps a copy of the set of the user's home shard
// and answers a user not in it 409 SOLD_OUT from memory. A user in it still
// gets the record lookup, and so the orderNo of an intent accepted on any
// gateway.
//
// The bound. A copy read by a call sent at time t holds every intent accepted
// before t (an acceptance and its SADD are one script) and is used strictly
// before t + SoldOutTTL, then read again (from SoldOutTTL/2 on, in the
// background, so hits keep their copy meanwhile). An intent accepted later —
// only possible once released stock sells again — is therefore unknown to a
// gateway's copy for less than SoldOutTTL, the bound within which that
// gateway sells released stock again at all; its replays on that gateway may
// get 409 SOLD_OUT meanwhile. An intent this gateway accepts itself drops its
// copy of the shard at once (a read in flight that may have missed it is
// discarded), so its own replays are never refused.
//
// A reread costs O(1) in Redis while the set is unchanged (buyers.lua
// compares the count and the set's incarnation member). A shard whose set has
// more than SoldOutBuyers members, or that was created before reserve.lua
// kept the set (lua.BuyersUntracked), is answered by the record lookups as
// before. Memory: 8 bytes a buyer, per sold-out product shard that got hits.
type buyerCache struct {
	ttl time.Duration // SoldOutTTL
	max int           // Config.SoldOutBuyers; 0: off
	m   sync.Map      // buyerKey → *buyerEntry
	wg  sync.WaitGroup
}

type buyerKey struct {
	productID int64
	shard     int
}

type buyerEntry struct {
	snap    atomic.Pointer[buyerSnap] // nil: none yet, or dropped by an acceptance
	loading atomic.Bool               // a read is in flight
	mu      sync.Mutex                // orders gen and storing a read's copy
	gen     uint64                    // bumped by every acceptance of this gateway
}

// buyerSnap is one read of a shard's buyers set.
type buyerSnap struct {
	sent   int64 // unix ns: the read was sent at or after
	usable bool  // false: untracked or too many; the record lookups answer
	users  []int64
	count  int64 // the set's count and incarnation, for the next read
	inc    string
}

// nonBuyer reports whether userID certainly holds no accepted intent in the
// shard, by the gateway's copy of its buyers set; false when not known. It
// starts a read of the set when there is no copy or the copy is half its
// life old.
func (s *Intake) nonBuyer(productID int64, shard int, userID int64, now time.Time) bool {
	c := &s.buyers
	if c.max <= 0 || c.ttl <= 0 {
		return false
	}
	k := buyerKey{productID, shard}
	v, ok := c.m.Load(k)
	if !ok {
		v, _ = c.m.LoadOrStore(k, new(buyerEntry))
	}
	e := v.(*buyerEntry)
	sn := e.snap.Load()
	age := time.Duration(0)
	if sn != nil {
		age = time.Duration(now.UnixNano() - sn.sent)
	}
	if sn == nil || age < 0 || age >= c.ttl/2 {
		s.readBuyers(k, e, sn)
	}
	if sn == nil || !sn.usable || age >= c.ttl || age < 0 {
		return false
	}
	_, found := slices.BinarySearch(sn.users, userID)
	return !found
}

// readBuyers reads the shard's buyers set in the background, unless a read
// is in flight already.
func (s *Intake) readBuyers(k buyerKey, e *buyerEntry, prev *buyerSnap) {
	if !e.loading.CompareAndSwap(false, true) {
		return
	}
	s.buyers.wg.Go(func() {
		defer e.loading.Store(false)
		e.mu.Lock()
		gen := e.gen
		e.mu.Unlock()
		sent := time.Now()
		var count int64
		var inc string
		if prev != nil && prev.usable {
			count, inc = prev.count, prev.inc
		}
		var res lua.BuyersResult
		err := s.redisCall(func(ctx context.Context) (err error) {
			res, err = lua.Buyers(ctx, s.rdb, lua.ShardKeys(k.productID, k.shard), count, inc, s.buyers.max)
			return err
		})
		sn := &buyerSnap{sent: sent.UnixNano(), count: res.Count}
		if err != nil {
			// The record lookups answer meanwhile; hits read again from
			// SoldOutTTL/2 on, not at once (a failing Redis is not hit in a
			// loop).
			s.log.Debug("read buyers set", "productId", k.productID, "shard", k.shard, "err", err)
			res.State = lua.BuyersUntracked
		}
		switch res.State {
		case lua.BuyersUnchanged: // the previous copy, or a set still empty
			sn.usable, sn.inc = true, inc
			if prev != nil && prev.usable {
				sn.users = prev.users
			}
		case lua.BuyersMembers:
			slices.Sort(res.Users)
			sn.usable, sn.users, sn.inc = true, res.Users, res.Incarnation
		}
		e.mu.Lock()
		if e.gen == gen { // no acceptance here since the read was sent
			e.snap.Store(sn)
		}
		e.mu.Unlock()
	})
}

// accepted drops the copy of the shard's buyers set after this gateway
// accepted an intent there: the next hit reads the set again.
func (s *Intake) acceptedBuyer(productID int64, shard int) {
	if s.buyers.max <= 0 {
		return
	}
	v, ok := s.buyers.m.Load(buyerKey{productID, shard})
	if !ok {
		return
	}
	e := v.(*buyerEntry)
	e.mu.Lock()
	e.gen++
	e.snap.Store(nil)
	e.mu.Unlock()
}
