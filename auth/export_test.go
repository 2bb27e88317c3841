package auth

import "time"

// SetClock replaces v's clock (the cache's and the token checks'); call it
// before v is used.
func SetClock(v *Verifier, now func() time.Time) { v.clock = now }

// FullChecks is the number of tokens v checked in full (cache misses).
func FullChecks(v *Verifier) int64 { return v.checks.Load() }

// MapperCalls is the number of times v asked its SubjectMapper.
func MapperCalls(v *Verifier) int64 {
	if v.subjects == nil {
		return 0
	}
	return v.subjects.calls.Load()
}
