package auth

import (
	"cmp"
	"context"
	"fmt"
	"sync/atomic"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"golang.org/x/sync/singleflight"
)

// SubjectMapper maps an identity provider's subject to Stampede's internal
// user id: the same (issuer, subject) always to the same id, on every
// process, creating the mapping on first sight; ids are FirstMappedUserID
// or above. persistence.Store implements it (table user_identity, unique on
// (issuer, subject)).
type SubjectMapper interface {
	MapSubject(ctx context.Context, issuer, subject string) (int64, error)
}

// subjectCache keeps the mappings a process has seen in an LRU (a mapping
// never changes, so an entry is valid for ever), so that a known buyer costs
// the mapper nothing: only the first token of a subject on each process asks
// it, and concurrent first tokens of one subject ask once (singleflight).
type subjectCache struct {
	m       SubjectMapper
	lru     *lru.Cache[string, int64]
	group   singleflight.Group
	timeout time.Duration
	calls   atomic.Int64 // mapper calls (tests)
}

func newSubjectCache(m SubjectMapper, size int, timeout time.Duration) *subjectCache {
	c, err := lru.New[string, int64](cmp.Or(size, 1<<17))
	if err != nil { // size ≤ 0 after the default: not reached
		panic(err)
	}
	return &subjectCache{m: m, lru: c, timeout: cmp.Or(timeout, 3*time.Second)}
}

// userID returns the user id of (issuer, subject). Both are printable
// (ValidSubject), so the NUL between them keeps keys apart.
func (s *subjectCache) userID(issuer, subject string) (int64, error) {
	key := issuer + "\x00" + subject
	if id, ok := s.lru.Get(key); ok {
		return id, nil
	}
	v, err, _ := s.group.Do(key, func() (any, error) {
		if id, ok := s.lru.Get(key); ok {
			return id, nil
		}
		s.calls.Add(1)
		ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
		defer cancel()
		id, err := s.m.MapSubject(ctx, issuer, subject)
		if err != nil {
			return int64(0), err
		}
		if id < FirstMappedUserID {
			return int64(0), fmt.Errorf("subject mapped to user id %d, below the mapped range (%d and up)", id, FirstMappedUserID)
		}
		s.lru.Add(key, id)
		return id, nil
	})
	return v.(int64), err
}
