package lua

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-sh/stampede/drop"
)

// The admission saga: how one admission to a sharded product's waiting room
// becomes at most one order (docs/spec.md §5.8).
//
// A sharded product's room lives in shard 0's slot, and the buyer's
// reservation runs on its home shard, another slot: no script can check the
// admission and take the stock at once, as reserve.lua does for a one-shard
// product. An order is therefore a small saga across the two slots, whose
// steps, keys and rules are all here:
//
//  1. claim (room_claim.lua, shard 0): the buyer's live admission is bound
//     to the intent (requestId) under a new random token, pending. A retry
//     of the same intent finds its own claim; another intent finds no
//     admission (NOT_ADMITTED), or, while another intent's claim is still
//     pending, settles that one first (step 4) and claims again.
//  2. reserve (reserve.lua, home shard) under the token: a reservation
//     writes the hold Keys.Hold(user, token) = requestId with itself,
//     atomically; a revoked token is refused (ErrClaimRevoked: give the
//     claim back, claim again), a hold of another intent too
//     (ErrNotAdmitted).
//  3. used (room_claim_used.lua, shard 0): after a reservation the claim is
//     marked used; a used claim is never given back.
//  4. settle, after an answer that reserved nothing (sold out, limit, a
//     replay, a reused requestId, …): revoke the token on the home shard
//     (hold_revoke.lua). HELD — a reservation exists under it, made by a
//     concurrent request of the same intent — marks the claim used.
//     REVOKED — nothing was reserved under it and nothing can be any more —
//     gives the admission back (room_claim_giveback.lua): live again until
//     its own deadline.
//
// The rules that follow:
//
//   - An admission is given back only after its token was revoked on the
//     home shard: nothing was reserved with it, under any requestId (the
//     hold is per token), and nothing will be. So one admission holds at
//     most one reservation, whatever requestIds, quantities, retries and
//     interleavings a buyer sends.
//   - A claim that led to a reservation is used. IDEMPOTENCY_KEY_REUSED and
//     a replay (DUPLICATE) never give an admission back unless the settle
//     finds the claim's token holds nothing: an intent the buyer placed
//     without this admission (before the room was on) keeps it, as
//     reserve.lua answers such a request for a one-shard product without
//     touching the admission.
//   - Retries of one intent are idempotent: the same claim, the same token,
//     the request record on the home shard.
//   - A Redis error between the steps (or a timeout: the step may have run)
//     leaves the claim pending and gives nothing back. The buyer's next
//     request resumes it: the same intent reserves under the same token;
//     another intent settles it first. A pending claim nobody resumes ends
//     with its key (the admission's deadline + 1 min): the admission is
//     spent unused, never doubled.
//
// A multi-slot order (a cart whose lines are held on several slots, keyed
// by (user, token), compensated by exactly the lines held) reuses steps 2
// and 4 per slot: reserve.lua's hold and hold_revoke.lua know nothing of
// rooms. The room's counters: claimed (claims taken and not given back),
// used (claims marked used); admitted = live + expired + claimed.

var (
	//go:embed room_claim.lua
	roomClaimSrc string
	//go:embed room_claim_used.lua
	roomClaimUsedSrc string
	//go:embed room_claim_giveback.lua
	roomClaimGiveBackSrc string
	//go:embed hold_revoke.lua
	holdRevokeSrc string

	roomClaimScript         = redis.NewScript(roomClaimSrc)
	roomClaimUsedScript     = redis.NewScript(roomClaimUsedSrc)
	roomClaimGiveBackScript = redis.NewScript(roomClaimGiveBackSrc)
	holdRevokeScript        = redis.NewScript(holdRevokeSrc)
)

func init() {
	all = append(all, roomClaimScript, roomClaimUsedScript, roomClaimGiveBackScript, holdRevokeScript)
}

// Sentinel errors of the admission saga.
var (
	// ErrClaimRevoked: reserve.lua refused a claim's token that was revoked
	// (its admission given back, or about to be). Nothing was reserved.
	ErrClaimRevoked = errors.New("lua: admission claim revoked")
	// ErrClaimContended: the buyer's concurrent requests kept revoking each
	// other's claims (AdmissionSaga.Order gave up after claimRounds).
	// Nothing was reserved; retrying is safe.
	ErrClaimContended = errors.New("lua: admission claim contended")
)

// holdMinTTL bounds a hold (and its revoked mark) from below: it must
// outlive its claim, which lives until the admission's deadline + 1 min (a
// window is at most an hour).
const holdMinTTL = 2 * time.Hour

// holdTTL is the life of a hold written with a reservation of record TTL
// ttl, whole seconds.
func holdTTL(ttl time.Duration) int64 { return int64(max(ttl, holdMinTTL) / time.Second) }

// claimRounds bounds the claim → reserve rounds of one order: a round
// ends early when the claim was revoked (ErrClaimRevoked) or another
// intent's pending claim had to be settled first.
const claimRounds = 3

// AdmissionClaim is a buyer's claim of its admission (room_claim.lua).
type AdmissionClaim struct {
	Code      ClaimCode
	Token     string // the claim's token ("" for a record written before tokens: counts as used)
	RequestID string // the intent it is bound to
	Deadline  time.Time
	Used      bool // a reservation was made with it
}

// ClaimCode is room_claim.lua's answer.
type ClaimCode int64

// Claim codes.
const (
	ClaimNotAdmitted  ClaimCode = 0 // no claim of this intent and no live admission
	ClaimTaken        ClaimCode = 1 // the claim is the asking intent's (new, or its retry's)
	ClaimOtherPending ClaimCode = 2 // another intent's claim is pending: settle it first
)

// AdmissionSaga runs a sharded room product's order (Order). RDB runs the
// room's steps; Do bounds each Redis step (a context with the caller's
// timeout, a circuit breaker); Reserve is the reservation on the home
// shard (Sharded.Reserve, pulls included).
type AdmissionSaga struct {
	RDB     redis.Scripter
	Do      func(fn func(ctx context.Context) error) error
	Reserve func(productID int64, shards, home int, a ReserveArgs) (ReserveResult, bool, error)
	// NewToken returns a new claim token (hex, unique: drop.NewTicketID
	// when nil).
	NewToken func() (string, error)
	// OnFault is told of a step after the reservation that failed (mark
	// used, settle): the claim stays pending and the buyer's next request
	// settles it. Optional.
	OnFault func(step string, productID, userID int64, err error)
}

// Order reserves args on the home shard with the buyer's admission to
// productID's room, spending it at most once (the file comment). Its
// answer is the reservation's (Sharded.Reserve): a nil error (reserved),
// ErrDuplicate, ErrKeyReused, a refusal, ErrNotAdmitted (no live admission,
// or it bought another intent), ErrClaimContended, or a Redis error (the
// claim, if taken, stays pending; retry the same requestId).
func (s *AdmissionSaga) Order(productID int64, shards, home int, args ReserveArgs) (ReserveResult, bool, error) {
	args.Claim = ""
	for range claimRounds {
		c, err := s.claim(productID, args.UserID, args.RequestID)
		if err != nil {
			return ReserveResult{}, false, err
		}
		if c.Code == ClaimOtherPending {
			if err := s.settle(productID, home, args, c); err != nil {
				return ReserveResult{}, false, err
			}
			continue
		}
		if c.Code == ClaimNotAdmitted || c.Token == "" {
			// No claim: a replay of an intent accepted before still
			// answers from its record (DUPLICATE comes first).
			res, dry, err := s.Reserve(productID, shards, home, args)
			if errors.Is(err, ErrRoomOn) {
				err = ErrNotAdmitted
			}
			return res, dry, err
		}
		a := args
		a.Claim = c.Token
		res, dry, err := s.Reserve(productID, shards, home, a)
		switch {
		case err == nil:
			if !c.Used {
				if _, uerr := s.markUsed(productID, args.UserID, c.Token); uerr != nil {
					s.fault("mark used", productID, args.UserID, uerr)
				}
			}
			return res, dry, nil
		case errors.Is(err, ErrClaimRevoked):
			if _, gerr := s.giveBack(productID, args.UserID, c.Token); gerr != nil {
				return ReserveResult{}, false, gerr
			}
			continue
		case !answered(err):
			return res, dry, err // the claim stays pending: the buyer's next request resumes it
		}
		if !c.Used {
			if serr := s.settle(productID, home, args, c); serr != nil {
				s.fault("settle", productID, args.UserID, serr)
			}
		}
		return res, dry, err
	}
	return ReserveResult{}, false, ErrClaimContended
}

// answered reports whether err is an answer of reserve.lua (it ran and
// reserved nothing), not a failure to run it.
func answered(err error) bool {
	var ce *CorruptError
	for _, o := range []error{ErrDuplicate, ErrKeyReused, ErrNotFound, ErrNotActive, ErrSoldOut, ErrInsufficient,
		ErrLimitExceeded, ErrBadQuantity, ErrPaused, ErrRoomOn, ErrNotAdmitted} {
		if errors.Is(err, o) {
			return true
		}
	}
	return errors.As(err, &ce)
}

// settle is step 4 for claim c of userID (args.UserID): revoke its token on
// the home shard, then mark it used (HELD) or give it back (REVOKED).
func (s *AdmissionSaga) settle(productID int64, home int, args ReserveArgs, c AdmissionClaim) error {
	held, err := s.revoke(ShardKeys(productID, home), args.UserID, c.Token, args.TTL)
	if err != nil {
		return err
	}
	if held {
		_, err = s.markUsed(productID, args.UserID, c.Token)
	} else {
		_, err = s.giveBack(productID, args.UserID, c.Token)
	}
	return err
}

func (s *AdmissionSaga) fault(step string, productID, userID int64, err error) {
	if s.OnFault != nil {
		s.OnFault(step, productID, userID, err)
	}
}

// claim is step 1 (room_claim.lua).
func (s *AdmissionSaga) claim(productID, userID int64, requestID string) (c AdmissionClaim, err error) {
	newToken := s.NewToken
	if newToken == nil {
		newToken = drop.NewTicketID
	}
	token, err := newToken()
	if err != nil {
		return c, fmt.Errorf("lua: claim token: %w", err)
	}
	err = s.Do(func(ctx context.Context) (err error) {
		c, err = ClaimAdmission(ctx, s.RDB, productID, userID, requestID, token)
		return err
	})
	return c, err
}

func (s *AdmissionSaga) markUsed(productID, userID int64, token string) (ok bool, err error) {
	err = s.Do(func(ctx context.Context) (err error) {
		ok, err = MarkClaimUsed(ctx, s.RDB, productID, userID, token)
		return err
	})
	return ok, err
}

func (s *AdmissionSaga) giveBack(productID, userID int64, token string) (ok bool, err error) {
	err = s.Do(func(ctx context.Context) (err error) {
		ok, err = GiveClaimBack(ctx, s.RDB, productID, userID, token)
		return err
	})
	return ok, err
}

func (s *AdmissionSaga) revoke(k Keys, userID int64, token string, ttl time.Duration) (held bool, err error) {
	err = s.Do(func(ctx context.Context) (err error) {
		held, _, err = RevokeHold(ctx, s.RDB, k, userID, token, ttl)
		return err
	})
	return held, err
}

// ClaimAdmission runs room_claim.lua: userID's live admission to
// productID's room is claimed for requestID under token (16 hex digits), or
// the claim this intent took before is returned (its own token).
func ClaimAdmission(ctx context.Context, rdb redis.Scripter, productID, userID int64, requestID, token string) (AdmissionClaim, error) {
	r := Room(productID)
	res, err := roomClaimScript.Run(ctx, rdb, []string{r.Admitted(), r.Claim(userID), r.State()}, userID, requestID, token).Slice()
	if err != nil {
		return AdmissionClaim{}, fmt.Errorf("lua: room claim: %w", scriptFault(err, r.base))
	}
	if len(res) != 5 {
		return AdmissionClaim{}, fmt.Errorf("lua: room claim: want 5 results, got %d", len(res))
	}
	code, ok1 := res[0].(int64)
	dl, ok2 := res[1].(int64)
	tok, ok3 := res[2].(string)
	rid, ok4 := res[3].(string)
	st, ok5 := res[4].(string)
	if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 || code < 0 || code > 2 {
		return AdmissionClaim{}, fmt.Errorf("lua: room claim: unexpected result %v", res)
	}
	c := AdmissionClaim{Code: ClaimCode(code), Token: tok, RequestID: rid, Used: st == "u"}
	if dl > 0 {
		c.Deadline = time.UnixMilli(dl).UTC()
	}
	return c, nil
}

// MarkClaimUsed runs room_claim_used.lua: userID's pending claim of token is
// marked used. false: not that token's claim, or used already.
func MarkClaimUsed(ctx context.Context, rdb redis.Scripter, productID, userID int64, token string) (bool, error) {
	r := Room(productID)
	n, err := roomClaimUsedScript.Run(ctx, rdb, []string{r.Claim(userID), r.State()}, token).Int()
	if err != nil {
		return false, fmt.Errorf("lua: room claim used: %w", scriptFault(err, r.base))
	}
	return n == 1, nil
}

// GiveClaimBack runs room_claim_giveback.lua: userID's pending claim of
// token is removed and its admission is live again. Only after RevokeHold
// answered not held for token. false: not that token's claim, or used.
func GiveClaimBack(ctx context.Context, rdb redis.Scripter, productID, userID int64, token string) (bool, error) {
	r := Room(productID)
	n, err := roomClaimGiveBackScript.Run(ctx, rdb, []string{r.Admitted(), r.Claim(userID), r.State()}, userID, token).Int()
	if err != nil {
		return false, fmt.Errorf("lua: room claim give back: %w", scriptFault(err, r.base))
	}
	return n == 1, nil
}

// RevokeHold runs hold_revoke.lua on shard k: held reports a reservation
// under (userID, token), with its requestId; otherwise the token is revoked
// there (for at least ttl, holdMinTTL) and reserve.lua refuses it from now
// on. Idempotent.
func RevokeHold(ctx context.Context, rdb redis.Scripter, k Keys, userID int64, token string, ttl time.Duration) (held bool, requestID string, err error) {
	res, err := holdRevokeScript.Run(ctx, rdb, []string{k.Hold(userID, token)}, holdTTL(ttl)).Slice()
	if err != nil {
		return false, "", fmt.Errorf("lua: hold revoke: %w", scriptFault(err, k.Tag()))
	}
	if len(res) != 2 {
		return false, "", fmt.Errorf("lua: hold revoke: want 2 results, got %d", len(res))
	}
	code, _ := res[0].(int64)
	rid, _ := res[1].(string)
	return code == 1, rid, nil
}
