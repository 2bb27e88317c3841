package intake

import (
	"context"
	"errors"
	"strconv"

	"github.com/redis/go-redis/v9"
	"github.com/stampede-sh/stampede/gateway/rediscall"
)

// Request-record lookups in pipelines (Config.LookupPipeline, issue 19). A
// sold-out cache hit still reads the (user, product, requestId) record, so
// that a replay of an intent accepted on any gateway gets its orderNo; in a
// storm those GETs were one round trip each, about half of the gateway's CPU
// in system calls. Here the GETs of concurrent requests share round trips: a
// worker takes one waiting lookup, adds whatever else is already waiting (up
// to LookupPipeline, never waiting for more: a lone request goes out at
// once) and sends them as one pipeline. Redis answers each GET as before;
// only the network exchange is shared, so the answer is the same as one GET
// would give.

// lookupCall is one request-record lookup and its answer.
type lookupCall struct {
	key string
	val string
	err error
}

// lookupBatcher pipelines GETs of request records (pipeBatcher).
type lookupBatcher struct {
	*rediscall.PipeBatcher[lookupCall]
}

func newLookupBatcher(s *Intake, max int) *lookupBatcher {
	one := func(c *lookupCall) {
		c.err = s.redisCall(func(ctx context.Context) (err error) {
			c.val, err = s.rdb.Get(ctx, c.key).Result()
			return err
		})
	}
	cmds := make(chan []*redis.SliceCmd, rediscall.PipeWorkers) // one buffer per worker in flight
	for range rediscall.PipeWorkers {
		cmds <- make([]*redis.SliceCmd, 0, max)
	}
	many := func(calls []*lookupCall) {
		buf := (<-cmds)[:0]
		err := s.redisCall(func(ctx context.Context) error {
			pipe := s.rdb.Pipeline()
			for _, c := range calls {
				// MGET of one key: an absent record is a nil element, not
				// a redis.Nil error (whose handling in go-redis allocates).
				buf = append(buf, pipe.MGet(ctx, c.key))
			}
			_, err := pipe.Exec(ctx) // the first failed command's error
			return err
		})
		for i, c := range calls {
			if i < len(buf) {
				c.val, c.err = mgetOne(buf[i])
			} else { // the breaker refused: nothing was sent
				c.err = err
			}
		}
		clear(buf)
		cmds <- buf
	}
	return &lookupBatcher{rediscall.NewPipeBatcher(max, one, many)}
}

// get is GET key: the value, or redis.Nil.
func (b *lookupBatcher) get(key string) (string, error) {
	c := b.Do(lookupCall{key: key})
	return c.val, c.err
}

// mgetOne is the answer of MGET key as GET would give it.
func mgetOne(cmd *redis.SliceCmd) (string, error) {
	vals, err := cmd.Result()
	switch {
	case err != nil:
		return "", err
	case len(vals) != 1:
		return "", errors.New("gateway: MGET of one key answered " + strconv.Itoa(len(vals)) + " values")
	}
	v, ok := vals[0].(string)
	if !ok {
		return "", redis.Nil
	}
	return v, nil
}
