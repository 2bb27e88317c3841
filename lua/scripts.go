package lua

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed reserve.lua
	reserveSrc string
	//go:embed release.lua
	releaseSrc string
	//go:embed load.lua
	loadSrc string
	//go:embed adjust.lua
	adjustSrc string
	//go:embed transfer_out.lua
	transferOutSrc string
	//go:embed transfer_in.lua
	transferInSrc string
	//go:embed status.lua
	statusSrc string
	//go:embed node_renew.lua
	nodeRenewSrc string
	//go:embed node_release.lua
	nodeReleaseSrc string
	//go:embed prune.lua
	pruneSrc string
	//go:embed sale.lua
	saleSrc string
)

// Sentinel errors returned by the script wrappers.
var (
	ErrDuplicate      = errors.New("lua: duplicate request")       // same intent seen: use the returned orderNo
	ErrKeyReused      = errors.New("lua: requestId reused")        // same requestId, different payload
	ErrNotFound       = errors.New("lua: product not loaded")      // no stock hash
	ErrNotActive      = errors.New("lua: sale not active")         // outside the sale window
	ErrSoldOut        = errors.New("lua: sold out")                // available = 0
	ErrInsufficient   = errors.New("lua: insufficient stock")      // 0 < available < quantity
	ErrLimitExceeded  = errors.New("lua: purchase limit exceeded") // per-user limit
	ErrBadQuantity    = errors.New("lua: bad quantity")            // < 1 or > max per order
	ErrPaused         = errors.New("lua: sale paused")             // an admin paused the sale (sale.lua)
	ErrNegativeAdjust = errors.New("lua: adjustment below zero")   // adjust would make available < 0
	// ErrIncarnation: Redis holds stock of another product that had the
	// same id (an IncarnationError says which key and incarnations).
	ErrIncarnation = errors.New("lua: stock of another product with this id")
	// ErrStockCorrupt: the data of one product shard cannot be used — a
	// numeric field of its stock hash (or a user's counter, or an
	// idempotency record) is not an integer, a key has the wrong type, or a
	// script failed at run time on it. It is a fault of that product's data,
	// not of Redis: callers must not count it against Redis (circuit
	// breaker, readiness) and must keep serving other products.
	ErrStockCorrupt = errors.New("lua: stock data corrupt")
	errUnknownCode  = errors.New("lua: unknown script return code")
)

// CorruptError is the ErrStockCorrupt of one call: what was found unusable.
// errors.Is(err, ErrStockCorrupt) holds for it.
type CorruptError struct {
	Key    string // the shard's key prefix (Keys.Tag) or the key at fault
	Detail string // the field reserve.lua rejected, or Redis's error text
}

func (e *CorruptError) Error() string {
	return "lua: stock data corrupt at " + e.Key + ": " + e.Detail
}

func (e *CorruptError) Unwrap() error { return ErrStockCorrupt }

// scriptFault turns an error reply that a script raised while running on a
// shard's data — a Lua runtime error ("ERR user_script:…", "ERR Error
// running script" before Redis 7), an error of a command the script called
// on a value it cannot work on ("ERR hash value is not an integer … script:
// …"), or WRONGTYPE — into a *CorruptError for key. Everything else (a
// connection error, a timeout, OOM, LOADING, READONLY, BUSY, NOSCRIPT, a
// cluster redirection) is returned as it is: that is Redis, not the data.
func scriptFault(err error, key string) error {
	var re redis.Error
	if err == nil || !errors.As(err, &re) || errors.Is(err, redis.Nil) {
		return err
	}
	msg := re.Error()
	code, _, _ := strings.Cut(msg, " ")
	inScript := strings.Contains(msg, "user_script") || strings.Contains(msg, "Error running script") || strings.Contains(msg, " script: ")
	if (code == "ERR" && inScript) || code == "WRONGTYPE" {
		return &CorruptError{Key: key, Detail: msg}
	}
	return err
}

var (
	reserveScript = redis.NewScript(reserveSrc)
	releaseScript = redis.NewScript(releaseSrc)
	loadScript    = redis.NewScript(loadSrc)
	adjustScript  = redis.NewScript(adjustSrc)
	xferOutScript = redis.NewScript(transferOutSrc)
	xferInScript  = redis.NewScript(transferInSrc)
	statusScript  = redis.NewScript(statusSrc)
	saleScript    = redis.NewScript(saleSrc)
	all           = []*redis.Script{reserveScript, releaseScript, loadScript, adjustScript, xferOutScript, xferInScript, statusScript}
)

// LoadAll loads every script into the script cache of rdb (on a cluster
// client: of every master). Needed only before pipelining scripts with
// EVALSHA; Run-based wrappers reload by themselves.
func LoadAll(ctx context.Context, rdb redis.Scripter) error {
	for _, s := range all {
		if err := s.Load(ctx, rdb).Err(); err != nil {
			return fmt.Errorf("lua: load script: %w", err)
		}
	}
	return nil
}

// ReserveArgs is one purchase intent.
type ReserveArgs struct {
	OrderNo   string        // used if the intent is new
	UserID    int64         //
	RequestID string        // validated by the caller
	Quantity  int64         //
	TTL       time.Duration // life of the idempotency record, >= the pay timeout
	// Sync reserves without appending to the intake stream: the caller
	// writes the order to MySQL itself (STAMPEDE_INTAKE=sync). The result
	// then carries UnitPrice and AcceptedAt.
	Sync bool
	// Admission passes the product's waiting-room admissions (waitingroom.go)
	// so that reserve.lua checks and uses the user's admission when the room
	// is on. Without it a product whose room is on answers ErrRoomOn.
	// One-shard products only (the key is in shard 0's slot).
	Admission bool
	// Claim is the token of the buyer's claim of its admission to a
	// sharded product's room (admission.go, AdmissionSaga): the
	// reservation is made under it (the shard's Hold key records it) unless
	// it was revoked (ErrClaimRevoked) or bought another intent already
	// (ErrNotAdmitted). "" = no claim: a shard under a room answers
	// ErrRoomOn.
	Claim string
}

// ReserveResult is what reserve answered.
type ReserveResult struct {
	OrderNo   string // the new orderNo, or the stored one for ErrDuplicate and ErrKeyReused
	Available int64  // units left in the shard after the call (0 when unknown; ErrDuplicate: -1 when unknown)
	// Status is, for ErrDuplicate, the order's last status known to Redis
	// (SetStatus): "PROCESSING" until the pipeline reported another one.
	Status string
	// UnitPrice and AcceptedAt (the script's Redis TIME) are set on success
	// with ReserveArgs.Sync only.
	UnitPrice  int64
	AcceptedAt time.Time
}

// Reserve runs reserve.lua for one shard. It returns a nil error when stock
// was taken; ErrDuplicate or ErrKeyReused with the stored orderNo; ErrNotFound,
// ErrNotActive, ErrPaused, ErrSoldOut, ErrInsufficient, ErrLimitExceeded or ErrBadQuantity
// when nothing was reserved; any other error is Redis's (nothing is known to
// have been reserved: the caller must not retry with a different orderNo
// without replaying the same requestId).
func Reserve(ctx context.Context, rdb redis.Scripter, k Keys, a ReserveArgs) (ReserveResult, error) {
	keys, argv := reserveKV(k, a)
	res, err := reserveScript.Run(ctx, rdb, keys, argv...).Slice()
	return reserveResult(k, res, err)
}

func reserveKV(k Keys, a ReserveArgs) ([]string, []any) {
	mode := "stream"
	if a.Sync {
		mode = "sync"
	}
	keys := []string{k.Stock(), k.Request(a.UserID, a.RequestID), k.User(a.UserID), k.Order(a.OrderNo), k.Intake(), k.Buyers()}
	argv := []any{a.OrderNo, a.UserID, a.RequestID, a.Quantity, int64(a.TTL / time.Second), mode}
	switch {
	case a.Claim != "":
		keys = append(keys, k.Hold(a.UserID, a.Claim))
		argv = append(argv, "claimed", holdTTL(a.TTL))
	case a.Admission:
		keys = append(keys, k.RoomAdmitted())
	}
	return keys, argv
}

// reserveResult maps reserve.lua's answer to a result and sentinel error.
func reserveResult(k Keys, res []any, err error) (ReserveResult, error) {
	if err != nil {
		return ReserveResult{}, fmt.Errorf("lua: reserve: %w", scriptFault(err, k.Tag()))
	}
	var extra []any
	var status string
	switch len(res) {
	case 5:
		res, extra = res[:3], res[3:]
	case 4:
		status, _ = res[3].(string)
		res = res[:3]
	}
	code, no, avail, err := triple(res)
	if err != nil {
		return ReserveResult{}, err
	}
	r := ReserveResult{OrderNo: no, Available: avail}
	switch code {
	case 0:
		if extra != nil {
			pr, ok1 := extra[0].(int64)
			ms, ok2 := extra[1].(int64)
			if !ok1 || !ok2 {
				return r, fmt.Errorf("lua: unexpected reserve result %v", extra)
			}
			r.UnitPrice, r.AcceptedAt = pr, time.UnixMilli(ms).UTC()
		}
		return r, nil
	case 1:
		r.Status = status
		if r.Status == "" {
			r.Status = "PROCESSING"
		}
		return r, ErrDuplicate
	case 2:
		return r, ErrKeyReused
	case 3:
		return r, ErrNotFound
	case 4:
		return r, ErrNotActive
	case 5:
		return r, ErrSoldOut
	case 6:
		return r, ErrInsufficient
	case 7:
		return r, ErrLimitExceeded
	case 8:
		return r, ErrBadQuantity
	case 10:
		return r, ErrRoomOn
	case 11:
		return r, ErrNotAdmitted
	case 12:
		return r, ErrPaused
	case 13:
		return r, ErrClaimRevoked
	case 9:
		return ReserveResult{}, &CorruptError{Key: k.Tag(), Detail: "field " + no + " is not an integer"}
	}
	return r, fmt.Errorf("%w %d from reserve", errUnknownCode, code)
}

// ReserveCall is one reservation of a ReserveMany batch: Keys and Args in,
// Result and Err out (as Reserve would return them).
type ReserveCall struct {
	Keys   Keys
	Args   ReserveArgs
	Result ReserveResult
	Err    error
}

// ReserveMany runs reserve.lua for every call in one pipeline (one write and
// one read per connection instead of one round trip per call). Each call gets
// the result Reserve would have given. Calls answered NOSCRIPT (a flushed
// script cache; nothing ran for them) are run again after loading the script,
// and calls a Redis Cluster refused before running them (TRYAGAIN while their
// slot migrates, CLUSTERDOWN, a redirection left over) are run again alone;
// a call that ran and is repeated for any reason answers ErrDuplicate with
// its orderNo, never a second reservation.
func ReserveMany(ctx context.Context, rdb redis.Cmdable, calls []ReserveCall) {
	cmds := make([]*redis.Cmd, len(calls))
	pipe := rdb.Pipeline()
	for i := range calls {
		keys, argv := reserveKV(calls[i].Keys, calls[i].Args)
		cmds[i] = reserveScript.EvalSha(ctx, pipe, keys, argv...)
	}
	_, _ = pipe.Exec(ctx) // errors are per command
	loaded := false
	for i, cmd := range cmds {
		res, err := cmd.Slice()
		if notRun(err) {
			// Cluster: the slot is being migrated (TRYAGAIN), the cluster
			// is reconfiguring (CLUSTERDOWN) or the pipeline ran out of
			// redirections. The script did not run: run the call alone,
			// where the client retries and follows redirections.
			calls[i].Result, calls[i].Err = Reserve(ctx, rdb, calls[i].Keys, calls[i].Args)
			continue
		}
		if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
			if !loaded {
				loaded = true
				if lerr := reserveScript.Load(ctx, rdb).Err(); lerr != nil {
					calls[i].Err = fmt.Errorf("lua: reserve: load script: %w", lerr)
					continue
				}
			}
			calls[i].Result, calls[i].Err = Reserve(ctx, rdb, calls[i].Keys, calls[i].Args)
			continue
		}
		calls[i].Result, calls[i].Err = reserveResult(calls[i].Keys, res, err)
	}
}

// notRun reports a Redis Cluster answer meaning the command was refused
// before it ran: TRYAGAIN, CLUSTERDOWN, MOVED or ASK. A cluster client
// retries these for single commands; in a pipeline they reach the caller.
func notRun(err error) bool {
	if err == nil {
		return false
	}
	if redis.IsTryAgainError(err) || redis.IsClusterDownError(err) {
		return true
	}
	return redis.HasErrorPrefix(err, "MOVED ") || redis.HasErrorPrefix(err, "ASK ")
}

// Release runs release.lua: gives quantity units of orderNo back to the shard
// at most once. released is false when the marker showed an earlier release.
// ErrNotFound means the shard's stock hash is missing and nothing changed.
func Release(ctx context.Context, rdb redis.Scripter, k Keys, orderNo string, userID, quantity int64, markerTTL time.Duration) (released bool, available int64, err error) {
	res, err := releaseScript.Run(ctx, rdb,
		[]string{k.Stock(), k.User(userID), k.Released(orderNo)},
		quantity, int64(markerTTL/time.Second),
	).Slice()
	if err != nil {
		return false, 0, fmt.Errorf("lua: release %s: %w", orderNo, scriptFault(err, k.Tag()))
	}
	code, available, err := pair(res)
	if err != nil {
		return false, 0, err
	}
	switch code {
	case 1:
		return true, available, nil
	case 0:
		return false, available, nil
	case -1:
		return false, 0, ErrNotFound
	}
	return false, 0, fmt.Errorf("%w %d from release", errUnknownCode, code)
}

// ReleaseCall is one order's release for ReleaseMany, with its answer.
type ReleaseCall struct {
	Keys     Keys
	OrderNo  string
	UserID   int64
	Quantity int64
	// Released and Err are Release's answers for this call.
	Released bool
	Err      error
}

// ReleaseMany runs Release for every call in one pipeline (EVALSHA; a call
// the pipeline could not run — NOSCRIPT after a script flush, a cluster
// redirection — is run again on its own, which loads the script), and
// fills each call's answer. It returns the first call's error, if any.
// The scripts must be loaded (LoadAll) for the pipeline to run them.
func ReleaseMany(ctx context.Context, rdb redis.Cmdable, calls []ReleaseCall, markerTTL time.Duration) error {
	if len(calls) == 0 {
		return nil
	}
	cmds := make([]*redis.Cmd, len(calls))
	pipe := rdb.Pipeline()
	for i, c := range calls {
		cmds[i] = releaseScript.EvalSha(ctx, pipe, []string{c.Keys.Stock(), c.Keys.User(c.UserID), c.Keys.Released(c.OrderNo)},
			c.Quantity, int64(markerTTL/time.Second))
	}
	_, _ = pipe.Exec(ctx) // errors are per command
	var first error
	for i, cmd := range cmds {
		c := &calls[i]
		res, err := cmd.Slice()
		if notRun(err) || (err != nil && redis.HasErrorPrefix(err, "NOSCRIPT")) {
			c.Released, _, c.Err = Release(ctx, rdb, c.Keys, c.OrderNo, c.UserID, c.Quantity, markerTTL)
		} else if err != nil {
			c.Err = fmt.Errorf("lua: release %s: %w", c.OrderNo, scriptFault(err, c.Keys.Tag()))
		} else {
			c.Released, c.Err = appliedOnce(res, "release")
		}
		if c.Err != nil && first == nil {
			first = c.Err
		}
	}
	return first
}

// IncarnationError is an ErrIncarnation: the stock data at Key belongs to
// another incarnation of the product id than the one being loaded.
type IncarnationError struct {
	Key   string // the stock hash or intake stream found
	Found string // its incarnation ("" if it carries none)
	Want  string // the product's
}

func (e *IncarnationError) Error() string {
	found := e.Found
	if found == "" {
		found = "none"
	}
	want := e.Want
	if want == "" {
		want = "none"
	}
	return fmt.Sprintf("lua: %s holds stock of another product with this id (incarnation %s, this product's %s): "+
		"another database's, or one created after the backup this MySQL was restored from; it is never adopted", e.Key, found, want)
}

func (e *IncarnationError) Unwrap() error { return ErrIncarnation }

// ShardStock is what load.lua writes for one shard.
type ShardStock struct {
	// Incarnation is the product's (persistence.Product.Incarnation): a
	// new hash gets it, an existing one must carry the same.
	Incarnation  string
	Available    int64 // set only if the shard is new
	Total        int64
	Price        int64 // minor units
	PerUserLimit int64 // 0 = none
	MaxPerOrder  int64
	SaleStart    time.Time
	SaleEnd      time.Time
}

// Load creates the shard's stock hash, or refreshes its metadata without
// touching available. created tells which; available is the shard's count
// after. A hash of another incarnation (s.Incarnation) is left untouched:
// *IncarnationError (ErrIncarnation).
func Load(ctx context.Context, rdb redis.Scripter, k Keys, s ShardStock) (created bool, available int64, err error) {
	res, err := loadScript.Run(ctx, rdb, []string{k.Stock()},
		s.Available, s.Total, s.Price, s.PerUserLimit, s.MaxPerOrder,
		s.SaleStart.UnixMilli(), s.SaleEnd.UnixMilli(), s.Incarnation,
	).Slice()
	if err != nil {
		return false, 0, fmt.Errorf("lua: load: %w", err)
	}
	if len(res) == 3 {
		if code, _ := res[0].(int64); code == -2 {
			found, _ := res[2].(string)
			return false, 0, &IncarnationError{Key: k.Stock(), Found: found, Want: s.Incarnation}
		}
	}
	code, available, err := pair(res)
	if err != nil {
		return false, 0, err
	}
	return code == 1, available, nil
}

// Adjust runs adjust.lua: available += delta once per repairNo. applied is
// false when repairNo was applied before. ErrNotFound: no stock hash;
// ErrNegativeAdjust: the result would be negative (nothing changed).
func Adjust(ctx context.Context, rdb redis.Scripter, k Keys, repairNo string, delta int64, markerTTL time.Duration) (applied bool, available int64, err error) {
	res, err := adjustScript.Run(ctx, rdb, []string{k.Stock(), k.Adjusted(repairNo)},
		delta, int64(markerTTL/time.Second)).Slice()
	if err != nil {
		return false, 0, fmt.Errorf("lua: adjust %s: %w", repairNo, scriptFault(err, k.Tag()))
	}
	code, available, err := pair(res)
	if err != nil {
		return false, 0, err
	}
	switch code {
	case 1:
		return true, available, nil
	case 0:
		return false, available, nil
	case -1:
		return false, 0, ErrNotFound
	case -2:
		return false, available, ErrNegativeAdjust
	}
	return false, 0, fmt.Errorf("%w %d from adjust", errUnknownCode, code)
}

// SetStatus runs status.lua: records st as the last known status of orderNo
// in the idempotency record of (userID, requestID) in shard k, so replays of
// the request answer it without MySQL. It never moves a record's status
// backwards and never touches a record of another order; set is false when
// nothing changed (no record, another order's, or a status already as far).
// The record keeps its TTL. Call it after the transition committed.
func SetStatus(ctx context.Context, rdb redis.Scripter, k Keys, userID int64, requestID, orderNo, st string) (set bool, err error) {
	n, err := statusScript.Run(ctx, rdb, []string{k.Request(userID, requestID)}, orderNo, st).Int()
	if err != nil {
		return false, fmt.Errorf("lua: set status of %s: %w", orderNo, scriptFault(err, k.Tag()))
	}
	return n == 1, nil
}

// StatusUpdate is one SetStatus call of SetStatusMany.
type StatusUpdate struct {
	Keys      Keys
	UserID    int64
	RequestID string
	OrderNo   string
	Status    string
}

// SetStatusMany runs status.lua for every update in one pipeline (a cluster
// client splits it per node): one round trip for a batch of transitions. A
// call the pipeline could not run (NOSCRIPT, a cluster redirection) is run
// again alone. It returns the first error; the other updates are still made.
func SetStatusMany(ctx context.Context, rdb redis.Cmdable, updates []StatusUpdate) error {
	if len(updates) == 0 {
		return nil
	}
	cmds := make([]*redis.Cmd, len(updates))
	pipe := rdb.Pipeline()
	for i, u := range updates {
		cmds[i] = statusScript.EvalSha(ctx, pipe, []string{u.Keys.Request(u.UserID, u.RequestID)}, u.OrderNo, u.Status)
	}
	_, _ = pipe.Exec(ctx) // errors are per command
	var first error
	for i, cmd := range cmds {
		err := cmd.Err()
		if notRun(err) || (err != nil && redis.HasErrorPrefix(err, "NOSCRIPT")) {
			u := updates[i]
			_, err = SetStatus(ctx, rdb, u.Keys, u.UserID, u.RequestID, u.OrderNo, u.Status)
		}
		if err != nil && first == nil {
			first = fmt.Errorf("lua: set status of %s: %w", updates[i].OrderNo, err)
		}
	}
	return first
}

func triple(res []any) (code int64, s string, n int64, err error) {
	if len(res) != 3 {
		return 0, "", 0, fmt.Errorf("lua: want 3 results, got %d", len(res))
	}
	code, ok1 := res[0].(int64)
	s, ok2 := res[1].(string)
	n, ok3 := res[2].(int64)
	if !ok1 || !ok2 || !ok3 {
		return 0, "", 0, fmt.Errorf("lua: unexpected result %v", res)
	}
	return code, s, n, nil
}

func pair(res []any) (code, n int64, err error) {
	if len(res) != 2 {
		return 0, 0, fmt.Errorf("lua: want 2 results, got %d", len(res))
	}
	code, ok1 := res[0].(int64)
	n, ok2 := res[1].(int64)
	if !ok1 || !ok2 {
		return 0, 0, fmt.Errorf("lua: unexpected result %v", res)
	}
	return code, n, nil
}

// appliedOnce decodes the {code, _} answer of a script that applies a change
// at most once (sale, restore, transfer_in): 1 applied (true), 0 already
// applied or superseded (false), -1 ErrNotFound; any other code is an error
// naming script.
func appliedOnce(res []any, script string) (bool, error) {
	code, _, err := pair(res)
	if err != nil {
		return false, err
	}
	switch code {
	case 1:
		return true, nil
	case 0:
		return false, nil
	case -1:
		return false, ErrNotFound
	}
	return false, fmt.Errorf("%w %d from %s", errUnknownCode, code, script)
}
