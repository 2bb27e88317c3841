package auth

import "time"

// SetClock replaces v's clock (the cache's and the token checks'); call it
// before v is used.
func SetClock(v *Verifier, now func() time.Time) { v.clock = now }
