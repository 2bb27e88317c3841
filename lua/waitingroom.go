package lua

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// The waiting room of a product (room_take.lua, room_admit.lua, room_set.lua;
// the admission check is in reserve.lua, or room_claim.lua for a sharded
// product; the pre-queue's shuffle in room_place.lua and room_publish.lua,
// room_drop.go). Every key lives under the hash tag of the product's stock
// shard 0, so the ticket counter, the line, the admissions and the stock
// hash's room flag are in one Redis Cluster slot: a one-shard product's
// reserve.lua checks the admission in its own round trip; a sharded one's
// gateway claims it on shard 0 first and reserves on the home shard after.

var (
	//go:embed room_take.lua
	roomTakeSrc string
	//go:embed room_admit.lua
	roomAdmitSrc string
	//go:embed room_set.lua
	roomSetSrc string
	//go:embed room_mark.lua
	roomMarkSrc string

	roomTakeScript  = redis.NewScript(roomTakeSrc)
	roomAdmitScript = redis.NewScript(roomAdmitSrc)
	roomSetScript   = redis.NewScript(roomSetSrc)
	roomMarkScript  = redis.NewScript(roomMarkSrc)
)

func init() {
	all = append(all, roomTakeScript, roomAdmitScript, roomSetScript, roomMarkScript)
}

// Sentinel errors of the waiting room.
var (
	// ErrRoomOn: reserve.lua found the product's room on but was not given
	// the admissions key (ReserveArgs.Admission false) or, for a sharded
	// product, the claim (ReserveArgs.Claimed false). Nothing was written;
	// call again with Admission set, or after Claim.
	ErrRoomOn = errors.New("lua: waiting room on")
	// ErrNotAdmitted: the room is on and the user holds no live admission.
	ErrNotAdmitted = errors.New("lua: not admitted")
	// ErrRoomOff: the product has no waiting room on (Take).
	ErrRoomOff = errors.New("lua: waiting room off")
	// ErrPreQueueNotOpen: the pre-queue opens later (Place.OpensAt); no ticket.
	ErrPreQueueNotOpen = errors.New("lua: pre-queue not open yet")
	// ErrDrawClosed: a draw takes no entry after its close.
	ErrDrawClosed = errors.New("lua: draw closed")
	// ErrPowRequired: the room asks a proof-of-work for a new ticket.
	ErrPowRequired = errors.New("lua: proof-of-work required")
	// ErrPowReused: the proof-of-work was already used.
	ErrPowReused = errors.New("lua: proof-of-work already used")
	// ErrTicketIDTaken: the ticket id is already a pre-queued ticket's; take
	// again with another (practically never: 64 random bits).
	ErrTicketIDTaken = errors.New("lua: ticket id taken")
	// ErrRoomLocked: the pre-queue has a ticket or the room opened: its mode,
	// pre-queue length and reserve list can no longer change (SetRoom).
	ErrRoomLocked = errors.New("lua: waiting room started")
	// ErrCommitted: the room published another commitment already; its seed
	// never changes (SetRoom).
	ErrCommitted = errors.New("lua: waiting room committed to another seed")
)

// RoomMode is how a room orders its buyers.
type RoomMode string

// Room modes.
const (
	// ModeFIFO: the pre-queue is shuffled at the opening, later tickets
	// queue behind in arrival order.
	ModeFIFO RoomMode = "fifo"
	// ModeRandom: every waiting ticket (pre-queued or not) is admitted
	// lowest random key first (drop.RandomKey).
	ModeRandom RoomMode = "random"
	// ModeDraw: entries until the opening; then the shuffle picks as many
	// winners as units, and a reserve list; nobody else gets in.
	ModeDraw RoomMode = "draw"
)

// ValidMode reports whether m is a known mode.
func ValidMode(m RoomMode) bool { return m == ModeFIFO || m == ModeRandom || m == ModeDraw }

func (r RoomKeys) all() []string {
	return []string{r.Stock(), r.State(), r.Line(), r.Tickets(), r.Admitted()}
}

// PlaceState is where a buyer stands in a waiting room.
type PlaceState string

// Place states.
const (
	PlaceWaiting   PlaceState = "WAITING"   // in line (a draw: on the reserve list)
	PlaceAdmitted  PlaceState = "ADMITTED"  // may order until Deadline (a draw: won)
	PlaceSoldOut   PlaceState = "SOLD_OUT"  // waiting, but nothing is left (the place is kept)
	PlacePreQueue  PlaceState = "PRE_QUEUE" // before the opening: no position yet (a draw: entered)
	PlaceShuffling PlaceState = "SHUFFLING" // the opening passed, the shuffle is not published yet
	PlaceExpired   PlaceState = "EXPIRED"   // draw: the win was not used in time and passed on
	PlaceOrdered   PlaceState = "ORDERED"   // draw: the win was used by an order
	PlaceLost      PlaceState = "LOST"      // draw: not drawn
)

// Place is a buyer's ticket and where it stands.
type Place struct {
	Ticket   string     // opaque ticket id (drop.NewTicketID); "" for SOLD_OUT without a ticket
	State    PlaceState //
	Mode     RoomMode
	Position int64 // WAITING, SOLD_OUT: tickets ahead, this one included (1 = next); 0 in random mode
	// ShufflePosition is a pre-queued ticket's place in the published
	// shuffle (1 = first), what a buyer recomputes from public data; 0 for
	// a ticket taken after the opening, and in random mode.
	ShufflePosition int64
	Deadline        time.Time // ADMITTED: the admission ends then (Redis clock)
	Rate            float64   // admissions per second of the pacer's last step (0: unknown yet)
	IssuedAt        time.Time // when the ticket was given
	// OpensAt is the opening (the sale's start); with ErrPreQueueNotOpen,
	// when the pre-queue opens.
	OpensAt time.Time
	Waiting int64 // random mode: tickets in the pool
}

// TakeArgs is one POST /api/products/{id}/queue.
type TakeArgs struct {
	UserID int64
	// TicketID is given to the user if it gets a new ticket (drop.NewTicketID).
	TicketID string
	// PowChallenge is the challenge of a proof-of-work the caller verified
	// for this user and product ("" = none); it is marked used for PowTTL
	// when it buys a new ticket.
	PowChallenge string
	PowTTL       time.Duration
	// CheckLimit refuses a new ticket (ErrLimitExceeded) to a user who
	// already holds the product's per-user limit in units, who could only
	// waste an admission: one-shard products only (the user's units are
	// counted in shard 0's slot, the room's; a sharded product counts them
	// on the user's home shard, which one script cannot read with the room).
	CheckLimit bool
}

// takeKV is one room_take.lua call for calls, all of one product: the
// room's seven keys, then the used-mark key of each call that brings a
// proof-of-work and the units-held key of each call that checks the
// per-user limit; five ARGV a call.
func takeKV(productID int64, calls []*TakeCall) ([]string, []any) {
	base := takeKeys.of(productID)
	keys := base[:len(base):len(base)] // the first append copies: the cached slice stays as it is
	argv := make([]any, 0, 5*len(calls))
	for _, c := range calls {
		a := &c.Args
		k, h := 0, 0
		if a.PowChallenge != "" {
			keys = append(keys, Room(productID).Pow(a.PowChallenge))
			k = len(keys) // Lua's 1-based index
		}
		if a.CheckLimit {
			keys = append(keys, ShardKeys(productID, 0).User(a.UserID))
			h = len(keys)
		}
		argv = append(argv, a.UserID, a.TicketID, k, max(a.PowTTL.Milliseconds(), 1), h)
	}
	return keys, argv
}

// takeKeys caches room_take.lua's seven fixed KEYS of a product: a ticket
// is the hot path of a sale and building the key strings a call was a good
// part of its allocations. The slices are shared read only (takeKV appends
// to a copy; go-redis copies the keys into each command's arguments).
var takeKeys = keyCache{m: map[int64][]string{}}

// keyCache is a bounded map productID → room_take.lua's keys.
type keyCache struct {
	mu sync.RWMutex
	m  map[int64][]string
}

// keyCacheMax bounds keyCache: past it keys are built per call, uncached.
const keyCacheMax = 4096

func (kc *keyCache) of(productID int64) []string {
	kc.mu.RLock()
	keys, ok := kc.m[productID]
	kc.mu.RUnlock()
	if ok {
		return keys
	}
	r := Room(productID)
	keys = []string{r.Stock(), r.State(), r.Line(), r.Tickets(), r.Admitted(), r.Pre(), r.Fresh()}
	kc.mu.Lock()
	if len(kc.m) < keyCacheMax {
		kc.m[productID] = keys
	}
	kc.mu.Unlock()
	return keys
}

// Take runs room_take.lua: the user's live ticket, or a new one. Errors:
// ErrRoomOff, ErrNotFound (no stock hash), ErrSoldOut (no ticket given:
// nothing is left, and the user had no place), ErrPreQueueNotOpen (with
// Place.OpensAt), ErrDrawClosed, ErrNotActive (the sale ended: no ticket,
// and a place or a live admission is over), ErrPowRequired, ErrPowReused,
// ErrTicketIDTaken, ErrLimitExceeded (TakeArgs.CheckLimit).
func Take(ctx context.Context, rdb redis.Scripter, productID int64, a TakeArgs) (Place, error) {
	c := TakeCall{ProductID: productID, Args: a}
	takeRun(ctx, rdb, []*TakeCall{&c})
	return c.Place, c.Err
}

// TakeCall is one Take of TakeMany, with its answer.
type TakeCall struct {
	ProductID int64
	Args      TakeArgs
	Place     Place
	Err       error
}

// takeBatchMax bounds the calls of one room_take.lua run: a script blocks
// Redis while it runs (a few microseconds a call).
const takeBatchMax = 256

// TakeMany answers the calls with one room_take.lua run per product (and
// per takeBatchMax calls), the runs sent in one pipeline. The calls of a
// run are answered as if taken one after another in their order: a user
// twice in calls is answered the ticket the first call gave. Runs refused
// before they ran (NOSCRIPT, cluster redirections) are run again alone.
// A product's runs past its first (more than takeBatchMax calls) go in
// later pipelines, one run of the product in each: a run refused and run
// again is then never answered after a later run of its product had run
// (which would put a user's later call before its first, and later
// buyers before earlier ones in the line).
func TakeMany(ctx context.Context, rdb redis.Cmdable, calls []TakeCall) {
	groups := takeGroups(calls)
	if len(calls) <= takeBatchMax { // a product has one run at most
		if len(groups) > 0 {
			takeRound(ctx, rdb, groups)
		}
		return
	}
	for len(groups) > 0 {
		var round, later [][]*TakeCall
		in := map[int64]bool{}
		for _, g := range groups {
			if p := g[0].ProductID; in[p] {
				later = append(later, g)
			} else {
				in[p] = true
				round = append(round, g)
			}
		}
		takeRound(ctx, rdb, round)
		groups = later
	}
}

// takeRound runs groups, at most one of a product, in one pipeline (one
// round trip for a single group).
func takeRound(ctx context.Context, rdb redis.Cmdable, groups [][]*TakeCall) {
	if len(groups) == 1 {
		takeRun(ctx, rdb, groups[0])
		return
	}
	cmds := make([]*redis.Cmd, len(groups))
	pipe := rdb.Pipeline()
	for i, g := range groups {
		keys, argv := takeKV(g[0].ProductID, g)
		cmds[i] = roomTakeScript.EvalSha(ctx, pipe, keys, argv...)
	}
	_, _ = pipe.Exec(ctx) // errors are per command
	loaded := false
	for i, cmd := range cmds {
		err := cmd.Err()
		if notRun(err) || (err != nil && redis.HasErrorPrefix(err, "NOSCRIPT")) {
			if !loaded && redis.HasErrorPrefix(err, "NOSCRIPT") {
				loaded = true
				if lerr := roomTakeScript.Load(ctx, rdb).Err(); lerr != nil {
					takeAnswers(groups[i], nil, fmt.Errorf("load script: %w", lerr))
					continue
				}
			}
			takeRun(ctx, rdb, groups[i])
			continue
		}
		takeAnswers(groups[i], cmd.Val(), err)
	}
}

// takeGroups splits calls into runs of one product, at most takeBatchMax
// calls each, every run in the calls' order (a user's calls keep theirs).
func takeGroups(calls []TakeCall) [][]*TakeCall {
	var groups [][]*TakeCall
	open := map[int64]int{} // product → its group being filled
	for i := range calls {
		c := &calls[i]
		g, ok := open[c.ProductID]
		if !ok || len(groups[g]) == takeBatchMax {
			g = len(groups)
			groups = append(groups, make([]*TakeCall, 0, min(len(calls)-i, takeBatchMax)))
			open[c.ProductID] = g
		}
		groups[g] = append(groups[g], c)
	}
	return groups
}

// takeRun runs room_take.lua for calls (one product) in its own round trip.
func takeRun(ctx context.Context, rdb redis.Scripter, calls []*TakeCall) {
	keys, argv := takeKV(calls[0].ProductID, calls)
	res, err := roomTakeScript.Run(ctx, rdb, keys, argv...).Result()
	takeAnswers(calls, res, err)
}

// takeAnswers maps one room_take.lua run's reply into calls; err, the
// run's, is every call's. The reply is the run's header (rateMilli, mode,
// startMs, nowMs) and then one answer per call, in order: an integer for
// the common answers of a sale (n ≥ 1: a new fifo ticket WAITING at
// position n; 0: a new pre-queued ticket; both the call's TicketID, issued
// at nowMs; -1: SOLD_OUT, no ticket), which cost Redis and the client one
// value where the full form costs eight; or the full form, an array of
// code, ticketId, position, deadlineMs, issuedMs, shufflePosition, waiting,
// opensMs.
func takeAnswers(calls []*TakeCall, res any, err error) {
	if len(calls) == 0 {
		return
	}
	if err == nil {
		err = takeDecode(calls, res)
	}
	if err != nil {
		err = fmt.Errorf("lua: room take: %w", scriptFault(err, Room(calls[0].ProductID).base))
		for _, c := range calls {
			c.Place, c.Err = Place{}, err
		}
	}
}

// takeDecode is takeAnswers without an error of the run; it fails if the
// reply has not the shape room_take.lua gives (takeAnswers then answers
// every call with the error, those decoded before it too).
func takeDecode(calls []*TakeCall, res any) error {
	all, ok := res.([]any)
	if !ok || len(all) != 4+len(calls) {
		return fmt.Errorf("want a header and %d answers, got %v", len(calls), res)
	}
	rate, ok1 := all[0].(int64)
	mode, ok2 := all[1].(string)
	start, ok3 := all[2].(int64)
	now, ok4 := all[3].(int64)
	if !ok1 || !ok2 || !ok3 || !ok4 {
		return fmt.Errorf("unexpected header %v", all[:4])
	}
	for i, c := range calls {
		r := takeReply{rateMilli: rate, mode: mode, opens: start}
		switch v := all[4+i].(type) {
		case int64:
			switch {
			case v >= 1:
				r.code, r.tid, r.pos, r.at = 0, c.Args.TicketID, v, now
			case v == 0:
				r.code, r.tid, r.at = 5, c.Args.TicketID, now
			case v == -1:
				r.code = 4
			default:
				return fmt.Errorf("unexpected answer %d", v)
			}
		case []any:
			if len(v) != 8 {
				return fmt.Errorf("unexpected answer %v", v)
			}
			var n [8]int64
			for j, x := range v {
				if j == 1 {
					r.tid, ok = x.(string)
				} else {
					n[j], ok = x.(int64)
				}
				if !ok {
					return fmt.Errorf("unexpected answer %v", v)
				}
			}
			r.code, r.pos, r.dl, r.at, r.spos, r.waiting, r.opens = n[0], n[2], n[3], n[4], n[5], n[6], n[7]
		default:
			return fmt.Errorf("unexpected answer %v", v)
		}
		c.Place, c.Err = r.place()
	}
	return nil
}

// takeReply is one request's answer from room_take.lua.
type takeReply struct {
	code           int64
	tid            string
	pos, dl        int64 // position; deadline (unix ms)
	rateMilli      int64 // admissions per 1000 s
	at             int64 // issued (unix ms)
	mode           string
	spos           int64 // shuffle position
	opens, waiting int64 // unix ms; tickets in a random room's pool
}

// place maps r into a Place and its error.
func (r takeReply) place() (Place, error) {
	p := Place{Ticket: r.tid, Mode: RoomMode(r.mode), Position: r.pos, Rate: float64(r.rateMilli) / 1000,
		ShufflePosition: r.spos, Waiting: r.waiting}
	if r.at > 0 {
		p.IssuedAt = time.UnixMilli(r.at).UTC()
	}
	if r.opens > 0 {
		p.OpensAt = time.UnixMilli(r.opens).UTC()
	}
	switch r.code {
	case 0:
		p.State = PlaceWaiting
	case 1:
		p.State, p.Deadline = PlaceAdmitted, time.UnixMilli(r.dl).UTC()
	case 2:
		return Place{}, ErrRoomOff
	case 3:
		return Place{}, ErrNotFound
	case 4:
		if p.Ticket == "" {
			return p, ErrSoldOut
		}
		p.State = PlaceSoldOut
	case 5:
		p.State = PlacePreQueue
	case 6:
		p.State = PlaceShuffling
	case 7:
		return p, ErrPreQueueNotOpen
	case 8:
		return p, ErrDrawClosed
	case 9:
		p.State = PlaceExpired
	case 10:
		p.State = PlaceOrdered
	case 11:
		p.State = PlaceLost
	case 12:
		return p, ErrPowRequired
	case 13:
		return p, ErrPowReused
	case 14:
		return p, ErrTicketIDTaken
	case 15:
		return p, ErrNotActive
	case 16:
		return p, ErrLimitExceeded
	default:
		return Place{}, fmt.Errorf("%w %d from room take", errUnknownCode, r.code)
	}
	return p, nil
}

// RoomSettings are a room's own terms (SetRoom).
type RoomSettings struct {
	On bool
	// Ceiling caps the admission rate, admissions per second, whatever
	// rate a pacer asks for; 0 leaves only the pacer's own ceiling.
	Ceiling float64
	// Window is how long an admission lasts: an admitted buyer who has not
	// ordered by then loses it, and the place passes to the next in line
	// (a draw's win: to the next on the reserve list).
	Window time.Duration
	// Mode orders the buyers; "" is ModeFIFO.
	Mode RoomMode
	// PreQueue is how long before the opening (the sale's start) tickets
	// can be taken; 0: from whenever the room is on.
	PreQueue time.Duration
	// Reserve is a draw's reserve list length: entries that get a win
	// passed on, in shuffle order, after the winners.
	Reserve int64
	// PowCost is the proof-of-work a new ticket costs (the challenges'
	// maxnumber: about PowCost/2 SHA-256 hashes on average); 0: none.
	PowCost int64
	// Commitment is hex SHA-256 of the room's seed (drop.Seed.Commitment).
	Commitment string
	// Shards is the product's number of stock shards.
	Shards int
}

// SetRoom runs room_set.lua on shard 0 and, for a sharded product,
// room_mark.lua on every other shard. ErrNotFound: no stock hash for the
// product; ErrRoomLocked, ErrCommitted (nothing written).
func SetRoom(ctx context.Context, rdb redis.Scripter, productID int64, s RoomSettings) error {
	r := Room(productID)
	on, flag := "0", "1"
	if s.On {
		on = "1"
	}
	if s.Shards > 1 {
		flag = "2"
	}
	mode := s.Mode
	if mode == "" {
		mode = ModeFIFO
	}
	if s.On && s.Shards > 1 { // the other shards first: until shard 0 says on, claims find no admission
		if err := markShards(ctx, rdb, productID, s.Shards, "2"); err != nil {
			return err
		}
	}
	res, err := roomSetScript.Run(ctx, rdb, []string{r.Stock(), r.State()},
		on, int64(math.Round(s.Ceiling*1000)), s.Window.Milliseconds(), string(mode), s.PreQueue.Milliseconds(),
		s.Reserve, s.PowCost, s.Commitment, flag).Slice()
	if err != nil {
		return fmt.Errorf("lua: room set: %w", scriptFault(err, r.base))
	}
	code, _ := res[0].(int64)
	switch code {
	case 1:
	case 0:
		return ErrNotFound
	case 2:
		return ErrRoomLocked
	case 3:
		return ErrCommitted
	default:
		return fmt.Errorf("%w %d from room set", errUnknownCode, code)
	}
	if !s.On && s.Shards > 1 {
		return markShards(ctx, rdb, productID, s.Shards, "0")
	}
	return nil
}

func markShards(ctx context.Context, rdb redis.Scripter, productID int64, shards int, flag string) error {
	for sh := 1; sh < shards; sh++ {
		k := ShardKeys(productID, sh)
		if err := roomMarkScript.Run(ctx, rdb, []string{k.Stock()}, flag).Err(); err != nil {
			return fmt.Errorf("lua: room mark shard %d: %w", sh, scriptFault(err, k.base))
		}
	}
	return nil
}

// AdmitArgs is one pacer step.
type AdmitArgs struct {
	Rate       float64       // admissions per second asked for (capped by the room's ceiling; draws ignore it)
	Max        int           // most admissions and most expiries in this step (1…2000)
	MaxElapsed time.Duration // most time since the last step credited
	Window     time.Duration // admission window of a room that has none of its own
	// Left is the units left in every shard of a sharded product (UnitsLeft);
	// -1 for a one-shard product, whose stock the script reads itself.
	Left int64
	// Overbook is how many live admissions a fifo or random room may hold
	// beyond the units left (admitted buyers who never order would
	// otherwise hold the last units for a whole window each); a draw admits
	// exactly its units.
	Overbook int64
	// Keys are random-mode keys of fresh tickets (FreshTickets) to put in
	// the line.
	Keys []KeyedUser
}

// KeyedUser is a user and its ticket's key score (drop.Score of drop.RandomKey).
type KeyedUser struct {
	UserID int64
	Score  float64
}

// Admission is one buyer let in by a pacer step.
type Admission struct {
	UserID   int64
	Ticket   string
	Place    int64
	IssuedAt time.Time
}

// AdmitCode says what a pacer step did.
type AdmitCode int

// Admit codes (room_admit.lua).
const (
	AdmitOff     AdmitCode = -1 // the room is off: nothing done
	AdmitStepped AdmitCode = 0  // a step ran (it may have admitted nobody)
	AdmitShuffle AdmitCode = 1  // the opening passed: publish the pre-queue's shuffle first
	AdmitPaused  AdmitCode = 2  // the sale is paused: nobody admitted, nothing expired
	AdmitNotOpen AdmitCode = 3  // before the opening
)

// AdmitResult is what one pacer step did.
type AdmitResult struct {
	Code      AdmitCode
	On        bool        // false: the room is off, nothing was done
	Admitted  []Admission // in admission order
	Expired   int64       // admissions expired in this step
	UpTo      int64       // places up to it are admitted (or finished)
	Issued    int64       // last place given
	Available int64       // units left (shard 0's stock, or AdmitArgs.Left)
	Rate      float64     // rate applied, admissions per second
	Waiting   int64       // tickets not yet admitted (draw: up to the cutoff)
}

// Admit runs room_admit.lua.
func Admit(ctx context.Context, rdb redis.Scripter, productID int64, a AdmitArgs) (AdmitResult, error) {
	r := Room(productID)
	maxN := min(max(a.Max, 1), 2000) // ZADD's arguments stay within Lua's stack
	left := ""
	if a.Left >= 0 {
		left = strconv.FormatInt(a.Left, 10)
	}
	argv := []any{int64(math.Round(max(a.Rate, 0) * 1000)), maxN, max(a.MaxElapsed.Milliseconds(), 1), max(a.Window.Milliseconds(), 1), left,
		max(a.Overbook, 0)}
	for _, k := range a.Keys {
		argv = append(argv, k.UserID, strconv.FormatFloat(k.Score, 'f', 0, 64))
	}
	res, err := roomAdmitScript.Run(ctx, rdb, append(r.all(), r.Fresh(), r.Log()), argv...).Slice()
	if err != nil {
		return AdmitResult{}, fmt.Errorf("lua: room admit: %w", scriptFault(err, r.base))
	}
	if len(res) < 7 || len(res)%2 != 1 {
		return AdmitResult{}, fmt.Errorf("lua: room admit: unexpected result length %d", len(res))
	}
	var head [7]int64
	for i := range head {
		v, ok := res[i].(int64)
		if !ok {
			return AdmitResult{}, fmt.Errorf("lua: room admit: unexpected result %v", res[:7])
		}
		head[i] = v
	}
	out := AdmitResult{Code: AdmitCode(head[0]), On: head[0] >= 0, Expired: head[1], UpTo: head[2], Issued: head[3],
		Available: head[4], Rate: float64(head[5]) / 1000, Waiting: head[6]}
	for i := 7; i+1 < len(res); i += 2 {
		us, _ := res[i].(string)
		rec, _ := res[i+1].(string)
		uid, err := strconv.ParseInt(us, 10, 64)
		if err != nil {
			continue
		}
		tr, _ := parseTicketRecord(rec)
		out.Admitted = append(out.Admitted, Admission{UserID: uid, Ticket: tr.Ticket, Place: tr.Place, IssuedAt: tr.IssuedAt})
	}
	return out, nil
}

// TicketRecord is a user's ticket as room:tickets holds it.
type TicketRecord struct {
	Place     int64 // 0: not placed yet (pre-queued before the shuffle, or waiting in a random room)
	IssuedAt  time.Time
	Ticket    string
	PreQueued bool // taken before the opening
	Expired   bool // its admission expired unused
}

func parseTicketRecord(rec string) (TicketRecord, bool) {
	f := strings.Fields(rec)
	if len(f) < 3 {
		return TicketRecord{}, false
	}
	place, err1 := strconv.ParseInt(f[0], 10, 64)
	ms, err2 := strconv.ParseInt(f[1], 10, 64)
	if err1 != nil || err2 != nil {
		return TicketRecord{}, false
	}
	tid, flags := f[2], ""
	if len(f) > 3 {
		flags = f[3]
	}
	// An expiry appends its flag to the record: "… <ticketId>x" when the
	// record had no flags.
	if i := strings.IndexFunc(tid, func(r rune) bool { return r < '0' || (r > '9' && r < 'a') || r > 'f' }); i >= 0 {
		tid, flags = tid[:i], tid[i:]+flags
	}
	return TicketRecord{Place: place, IssuedAt: time.UnixMilli(ms).UTC(), Ticket: tid,
		PreQueued: strings.Contains(flags, "p"), Expired: strings.Contains(flags, "x")}, true
}

// ReadTickets reads the ticket records of userIDs for productID (one HMGET);
// a user without one is missing from the map.
func ReadTickets(ctx context.Context, rdb redis.Cmdable, productID int64, userIDs []int64) (map[int64]TicketRecord, error) {
	out := make(map[int64]TicketRecord, len(userIDs))
	if len(userIDs) == 0 {
		return out, nil
	}
	fields := make([]string, len(userIDs))
	for i, u := range userIDs {
		fields[i] = strconv.FormatInt(u, 10)
	}
	vals, err := rdb.HMGet(ctx, Room(productID).Tickets(), fields...).Result()
	if err != nil {
		return nil, fmt.Errorf("lua: read tickets: %w", err)
	}
	for i, v := range vals {
		if s, ok := v.(string); ok {
			if tr, ok := parseTicketRecord(s); ok {
				out[userIDs[i]] = tr
			}
		}
	}
	return out, nil
}

// RoomStatus is a read of one room's counters (no script: not a snapshot of
// the two hashes together, which is all a feed or a gauge needs).
type RoomStatus struct {
	On        bool
	Sharded   bool    // admissions are claimed (room = "2")
	Paused    bool    // the sale is paused (no admission)
	Available int64   // units left: shard 0's stock, or for a sharded product the pacer's last reading
	Issued    int64   // places given
	UpTo      int64   // admitted up to this place
	Admitted  int64   // admissions made
	Expired   int64   // admissions expired (their places passed on)
	Claimed   int64   // sharded: admissions claimed by an order and not given back (admission.go)
	Used      int64   // sharded: claims marked used (a reservation was made with them)
	Live      int64   // admissions not yet used or expired
	Pool      int64   // random mode: tickets waiting (keyed or not)
	Rate      float64 // admissions per second of the last pacer step
	Ceiling   float64 // the room's own ceiling (0 = none)
	Window    time.Duration
	Mode      RoomMode
	PreQueue  time.Duration // how long before the opening tickets can be taken (0: any time)
	PreQueued int64         // tickets taken before the opening (a draw's entries)
	Closed    bool          // the opening passed
	Shuffled  bool          // the pre-queue's shuffle is published
	Base      int64         // pre-queued places are Base+1 … Base+PreQueued
	Reserve   int64         // draw: reserve list length
	Winners   int64         // draw: winners drawn at the close
	Cutoff    int64         // draw: last place that can win
	PowCost   int64
	// Commitment, Seed (after the shuffle), ListHash and ShuffledAt are the
	// public record of the shuffle.
	Commitment string
	Seed       string
	ListHash   string
	ShuffledAt time.Time
	Start      time.Time // the opening (the sale's start)
}

// Waiting is the number of tickets not yet admitted (a draw: on the reserve
// list and still able to win; random: in the pool).
func (s RoomStatus) Waiting() int64 {
	if s.Mode == ModeRandom {
		return s.Pool
	}
	last := s.Issued
	if s.Mode == ModeDraw {
		last = min(last, s.Cutoff)
	}
	return max(last-s.UpTo, 0)
}

// ReadRoom reads productID's room counters in one pipelined round trip.
// A product without a stock hash reads as a room that is off.
func ReadRoom(ctx context.Context, rdb redis.Cmdable, productID int64) (RoomStatus, error) {
	r := Room(productID)
	pipe := rdb.Pipeline()
	stock := pipe.HMGet(ctx, r.Stock(), "room", "available", "paused", "start")
	state := pipe.HMGet(ctx, r.State(), "issued", "upto", "admitted", "expired", "rate", "ceiling", "window", "mode",
		"pqms", "pre", "closed", "shuffled", "base", "reserve", "winners", "cutoff", "pow", "commit", "seed", "lhash",
		"shat", "left", "claimed", "used")
	live := pipe.ZCard(ctx, r.Admitted())
	line := pipe.ZCard(ctx, r.Line())
	fresh := pipe.HLen(ctx, r.Fresh())
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return RoomStatus{}, fmt.Errorf("lua: read room: %w", err)
	}
	str := func(v any) string { s, _ := v.(string); return s }
	num := func(v any) float64 {
		f, _ := strconv.ParseFloat(str(v), 64)
		return f
	}
	sv, st := stock.Val(), state.Val()
	if len(sv) != 4 || len(st) != 24 {
		return RoomStatus{}, errors.New("lua: read room: short reply")
	}
	rs := RoomStatus{
		On: str(sv[0]) == "1" || str(sv[0]) == "2", Sharded: str(sv[0]) == "2", Paused: str(sv[2]) == "1",
		Available: int64(num(sv[1])), Start: time.UnixMilli(int64(num(sv[3]))).UTC(),
		Issued: int64(num(st[0])), UpTo: int64(num(st[1])), Admitted: int64(num(st[2])), Expired: int64(num(st[3])),
		Rate: num(st[4]) / 1000, Ceiling: num(st[5]) / 1000, Window: time.Duration(num(st[6])) * time.Millisecond,
		Mode: RoomMode(str(st[7])), PreQueue: time.Duration(num(st[8])) * time.Millisecond, PreQueued: int64(num(st[9])),
		Closed: str(st[10]) == "1", Shuffled: str(st[11]) == "1", Base: int64(num(st[12])), Reserve: int64(num(st[13])),
		Winners: int64(num(st[14])), Cutoff: int64(num(st[15])), PowCost: int64(num(st[16])), Commitment: str(st[17]),
		Seed: str(st[18]), ListHash: str(st[19]), Claimed: int64(num(st[22])), Used: int64(num(st[23])),
		Live: live.Val(), Pool: line.Val() + fresh.Val(),
	}
	if rs.Mode == "" {
		rs.Mode = ModeFIFO
	}
	if ms := int64(num(st[20])); ms > 0 {
		rs.ShuffledAt = time.UnixMilli(ms).UTC()
	}
	if rs.Sharded {
		rs.Available = int64(num(st[21]))
	}
	return rs, nil
}
