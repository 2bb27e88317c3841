package pipeline

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"time"
)

// backoff is an exponential delay with ±20 % jitter between min and max. Not
// safe for concurrent use; each loop keeps its own.
type backoff struct {
	min, max time.Duration
	cur      time.Duration
}

func newBackoff(min, max time.Duration) *backoff { return &backoff{min: min, max: max} }

// next returns the delay before the next attempt and doubles the following one.
func (b *backoff) next() time.Duration {
	if b.cur < b.min {
		b.cur = b.min
	}
	d := b.cur
	b.cur = min(b.cur*2, b.max)
	// Jitter keeps a fleet of instances from retrying in lockstep.
	j := time.Duration(rand.Int64N(int64(d)/5 + 1))
	if rand.IntN(2) == 0 {
		return d - j
	}
	return d + j
}

// reset makes the next delay min again.
func (b *backoff) reset() { b.cur = 0 }

// sleep waits d or until ctx is done; it reports whether the full d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// instanceName is "<hostname>-<pid>-<random hex>", unique per process.
func instanceName() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "stampede"
	}
	return fmt.Sprintf("%s-%d-%06x", host, os.Getpid(), rand.Uint32()&0xffffff)
}
