package lua

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// The waiting room of a product (room_take.lua, room_admit.lua, room_set.lua;
// the admission check is in reserve.lua). Every key lives under the hash tag
// of the product's stock shard 0, so the ticket counter, the line, the
// admissions and the stock hash's room flag are in one Redis Cluster slot and
// reserve.lua on that shard checks the admission in its own round trip. A
// room is therefore only offered for one-shard products.

var (
	//go:embed room_take.lua
	roomTakeSrc string
	//go:embed room_admit.lua
	roomAdmitSrc string
	//go:embed room_set.lua
	roomSetSrc string

	roomTakeScript  = redis.NewScript(roomTakeSrc)
	roomAdmitScript = redis.NewScript(roomAdmitSrc)
	roomSetScript   = redis.NewScript(roomSetSrc)
)

func init() { all = append(all, roomTakeScript, roomAdmitScript, roomSetScript) }

// Sentinel errors of the waiting room.
var (
	// ErrRoomOn: reserve.lua found the product's room on but was not given
	// the admissions key (ReserveArgs.Admission false). Nothing was written;
	// call again with Admission set.
	ErrRoomOn = errors.New("lua: waiting room on")
	// ErrNotAdmitted: the room is on and the user holds no live admission.
	ErrNotAdmitted = errors.New("lua: not admitted")
	// ErrRoomOff: the product has no waiting room on (Take).
	ErrRoomOff = errors.New("lua: waiting room off")
)

func (r RoomKeys) all() []string {
	return []string{r.Stock(), r.State(), r.Line(), r.Tickets(), r.Admitted()}
}

// PlaceState is where a buyer stands in a waiting room.
type PlaceState string

// Place states.
const (
	PlaceWaiting  PlaceState = "WAITING"  // in line
	PlaceAdmitted PlaceState = "ADMITTED" // may order until Deadline
	PlaceSoldOut  PlaceState = "SOLD_OUT" // waiting, but nothing is left (the place is kept)
)

// Place is a buyer's ticket and where it stands.
type Place struct {
	Ticket   int64      // 1, 2, … in arrival order; 0 for SOLD_OUT without a ticket
	State    PlaceState //
	Position int64      // WAITING and SOLD_OUT: ticket − admitted-up-to (1 = next in line)
	Deadline time.Time  // ADMITTED: the admission ends then (Redis clock)
	Rate     float64    // admissions per second of the pacer's last step (0: unknown yet)
	IssuedAt time.Time  // when the ticket was given
}

// Take runs room_take.lua: the user's live ticket, or a new one at the end of
// the line. Errors: ErrRoomOff, ErrNotFound (no stock hash), ErrSoldOut (no
// ticket given: nothing is left, and the user had no place).
func Take(ctx context.Context, rdb redis.Scripter, productID, userID int64) (Place, error) {
	r := Room(productID)
	res, err := roomTakeScript.Run(ctx, rdb, r.all(), userID).Int64Slice()
	if err != nil {
		return Place{}, fmt.Errorf("lua: room take: %w", scriptFault(err, r.base))
	}
	if len(res) != 6 {
		return Place{}, fmt.Errorf("lua: room take: want 6 results, got %d", len(res))
	}
	p := Place{Ticket: res[1], Position: res[2], Rate: float64(res[4]) / 1000}
	if res[5] > 0 {
		p.IssuedAt = time.UnixMilli(res[5]).UTC()
	}
	switch res[0] {
	case 0:
		p.State = PlaceWaiting
	case 1:
		p.State, p.Deadline = PlaceAdmitted, time.UnixMilli(res[3]).UTC()
	case 2:
		return Place{}, ErrRoomOff
	case 3:
		return Place{}, ErrNotFound
	case 4:
		if p.Ticket == 0 {
			return p, ErrSoldOut
		}
		p.State = PlaceSoldOut
	default:
		return Place{}, fmt.Errorf("%w %d from room take", errUnknownCode, res[0])
	}
	return p, nil
}

// RoomSettings are a room's own limits (SetRoom).
type RoomSettings struct {
	On bool
	// Ceiling caps the admission rate, admissions per second, whatever
	// rate a pacer asks for; 0 leaves only the pacer's own ceiling.
	Ceiling float64
	// Window is how long an admission lasts: an admitted buyer who has not
	// ordered by then loses it, and the place passes to the next in line.
	Window time.Duration
}

// SetRoom runs room_set.lua. ErrNotFound: no stock hash for the product.
func SetRoom(ctx context.Context, rdb redis.Scripter, productID int64, s RoomSettings) error {
	r := Room(productID)
	on := "0"
	if s.On {
		on = "1"
	}
	n, err := roomSetScript.Run(ctx, rdb, []string{r.Stock(), r.State()},
		on, int64(math.Round(s.Ceiling*1000)), s.Window.Milliseconds()).Int()
	if err != nil {
		return fmt.Errorf("lua: room set: %w", scriptFault(err, r.base))
	}
	if n == 0 {
		return ErrNotFound
	}
	return nil
}

// AdmitArgs is one pacer step.
type AdmitArgs struct {
	Rate       float64       // admissions per second asked for (capped by the room's ceiling)
	Max        int           // most admissions and most expiries in this step (1…2000)
	MaxElapsed time.Duration // most time since the last step credited
	Window     time.Duration // admission window of a room that has none of its own
}

// Admission is one buyer let in by a pacer step.
type Admission struct {
	UserID   int64
	Ticket   int64
	IssuedAt time.Time
}

// AdmitResult is what one pacer step did.
type AdmitResult struct {
	On        bool        // false: the room is off, nothing was done
	Admitted  []Admission // in ticket order
	Expired   int64       // admissions expired in this step
	UpTo      int64       // tickets up to it are admitted (or finished)
	Issued    int64       // last ticket given
	Available int64       // the shard-0 stock's available units
	Rate      float64     // rate applied, admissions per second
}

// Admit runs room_admit.lua.
func Admit(ctx context.Context, rdb redis.Scripter, productID int64, a AdmitArgs) (AdmitResult, error) {
	r := Room(productID)
	maxN := min(max(a.Max, 1), 2000) // ZADD's arguments stay within Lua's stack
	res, err := roomAdmitScript.Run(ctx, rdb, r.all(), int64(math.Round(max(a.Rate, 0)*1000)), maxN,
		max(a.MaxElapsed.Milliseconds(), 1), max(a.Window.Milliseconds(), 1)).Slice()
	if err != nil {
		return AdmitResult{}, fmt.Errorf("lua: room admit: %w", scriptFault(err, r.base))
	}
	if len(res) < 6 || len(res)%2 != 0 {
		return AdmitResult{}, fmt.Errorf("lua: room admit: unexpected result length %d", len(res))
	}
	var head [6]int64
	for i := range head {
		v, ok := res[i].(int64)
		if !ok {
			return AdmitResult{}, fmt.Errorf("lua: room admit: unexpected result %v", res[:6])
		}
		head[i] = v
	}
	if head[0] < 0 {
		return AdmitResult{}, nil
	}
	out := AdmitResult{On: true, Expired: head[1], UpTo: head[2], Issued: head[3], Available: head[4], Rate: float64(head[5]) / 1000}
	for i := 6; i+1 < len(res); i += 2 {
		us, _ := res[i].(string)
		rec, _ := res[i+1].(string)
		uid, err := strconv.ParseInt(us, 10, 64)
		if err != nil {
			continue
		}
		a := Admission{UserID: uid}
		if tk, at, ok := strings.Cut(rec, " "); ok {
			a.Ticket, _ = strconv.ParseInt(tk, 10, 64)
			if ms, err := strconv.ParseInt(at, 10, 64); err == nil {
				a.IssuedAt = time.UnixMilli(ms).UTC()
			}
		}
		out.Admitted = append(out.Admitted, a)
	}
	return out, nil
}

// RoomStatus is a read of one room's counters (no script: not a snapshot of
// the two hashes together, which is all a feed or a gauge needs).
type RoomStatus struct {
	On        bool
	Available int64   // shard-0 stock
	Issued    int64   // tickets given
	UpTo      int64   // admitted up to this ticket
	Admitted  int64   // admissions made
	Expired   int64   // admissions expired
	Live      int64   // admissions not yet used or expired
	Rate      float64 // admissions per second of the last pacer step
	Ceiling   float64 // the room's own ceiling (0 = none)
	Window    time.Duration
}

// Waiting is the number of tickets not yet admitted.
func (s RoomStatus) Waiting() int64 { return max(s.Issued-s.UpTo, 0) }

// ReadRoom reads productID's room counters in one pipelined round trip.
// A product without a stock hash reads as a room that is off.
func ReadRoom(ctx context.Context, rdb redis.Cmdable, productID int64) (RoomStatus, error) {
	r := Room(productID)
	pipe := rdb.Pipeline()
	stock := pipe.HMGet(ctx, r.Stock(), "room", "available")
	state := pipe.HMGet(ctx, r.State(), "issued", "upto", "admitted", "expired", "rate", "ceiling", "window")
	live := pipe.ZCard(ctx, r.Admitted())
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return RoomStatus{}, fmt.Errorf("lua: read room: %w", err)
	}
	num := func(v any) float64 {
		s, _ := v.(string)
		f, _ := strconv.ParseFloat(s, 64)
		return f
	}
	sv, st := stock.Val(), state.Val()
	if len(sv) != 2 || len(st) != 7 {
		return RoomStatus{}, errors.New("lua: read room: short reply")
	}
	return RoomStatus{
		On: sv[0] == "1", Available: int64(num(sv[1])),
		Issued: int64(num(st[0])), UpTo: int64(num(st[1])), Admitted: int64(num(st[2])), Expired: int64(num(st[3])),
		Rate: num(st[4]) / 1000, Ceiling: num(st[5]) / 1000, Window: time.Duration(num(st[6])) * time.Millisecond,
		Live: live.Val(),
	}, nil
}
