package lua

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-sh/stampede/drop"
)

// The pre-queue's shuffle (a sharded product's admission claims are
// admission.go's). The pacer computes the shuffle (package drop) from the
// pre-queue (PreQueue) and the seed, writes it in chunks (PlaceChunk) and
// publishes it (Publish); only then does room_admit.lua admit anyone.

var (
	//go:embed room_place.lua
	roomPlaceSrc string
	//go:embed room_publish.lua
	roomPublishSrc string

	roomPlaceScript   = redis.NewScript(roomPlaceSrc)
	roomPublishScript = redis.NewScript(roomPublishSrc)
)

func init() {
	all = append(all, roomPlaceScript, roomPublishScript)
}

// ErrShuffleStale: the pre-queue read for the shuffle is not the final one
// (Publish); read it again.
var ErrShuffleStale = errors.New("lua: pre-queue changed since it was read")

// ShuffleRoom publishes productID's pre-queue shuffle with seed, the step
// room_admit.lua asks for (AdmitShuffle) once the opening passed: it reads
// the pre-queue, orders it by the rule of package drop, writes the places
// (fifo, draw) or random keys (random) in chunks and publishes the seed and
// the list. Any number of pacers may run it at once: they compute and write
// the same values, and one publishes. left is a sharded product's units
// (UnitsLeft), -1 for a one-shard product. published is false when another
// pacer published first; ErrShuffleStale: the pre-queue changed while it
// was read (call again).
func ShuffleRoom(ctx context.Context, rdb redis.Scripter, productID int64, mode RoomMode, seed drop.Seed, left int64) (published bool, err error) {
	rc, ok := rdb.(redis.Cmdable)
	if !ok {
		return false, errors.New("lua: shuffle: the client cannot run commands")
	}
	pre, err := PreQueue(ctx, rc, productID)
	if err != nil {
		return false, err
	}
	tickets := make([]string, 0, len(pre))
	for tid := range pre {
		tickets = append(tickets, tid)
	}
	sh := drop.Shuffle(seed, tickets)
	st, err := ReadRoom(ctx, rc, productID)
	if err != nil {
		return false, err
	}
	const chunk = 2000
	batch := make([]Placed, 0, chunk)
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		n, err := PlaceChunk(ctx, rdb, productID, mode != ModeRandom, batch)
		batch = batch[:0]
		if err != nil {
			return err
		}
		if n < 0 {
			return errPublished
		}
		return nil
	}
	for i, tid := range sh.Order {
		p := Placed{UserID: pre[tid], Ticket: tid, Score: float64(st.Base + int64(i) + 1)}
		if mode == ModeRandom {
			p.Score = drop.Score(drop.RandomKey(seed, tid))
		}
		batch = append(batch, p)
		if len(batch) == chunk {
			if err = flush(); err != nil {
				break
			}
		}
	}
	if err == nil {
		err = flush()
	}
	if errors.Is(err, errPublished) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	lh := sh.ListHash
	return Publish(ctx, rdb, productID, seed.Hex(), hexString(lh[:]), sh.List, len(sh.Order), left)
}

var errPublished = errors.New("lua: shuffle already published")

func hexString(b []byte) string {
	const digits = "0123456789abcdef"
	out := make([]byte, 2*len(b))
	for i, c := range b {
		out[2*i], out[2*i+1] = digits[c>>4], digits[c&15]
	}
	return string(out)
}

// FreshKeys reads a random room's fresh tickets and returns their keys
// under seed, for the next Admit (AdmitArgs.Keys).
func FreshKeys(ctx context.Context, rdb redis.Cmdable, productID int64, seed drop.Seed) ([]KeyedUser, error) {
	fresh, err := FreshTickets(ctx, rdb, productID)
	if err != nil {
		return nil, err
	}
	out := make([]KeyedUser, len(fresh))
	for i, f := range fresh {
		out[i] = KeyedUser{UserID: f.UserID, Score: drop.Score(drop.RandomKey(seed, f.Ticket))}
	}
	return out, nil
}

// PreQueue reads productID's pre-queue: ticket id → userId (one HGETALL).
func PreQueue(ctx context.Context, rdb redis.Cmdable, productID int64) (map[string]int64, error) {
	m, err := rdb.HGetAll(ctx, Room(productID).Pre()).Result()
	if err != nil {
		return nil, fmt.Errorf("lua: read pre-queue: %w", err)
	}
	out := make(map[string]int64, len(m))
	for tid, u := range m {
		uid, err := strconv.ParseInt(u, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("lua: pre-queue ticket %s: user %q", tid, u)
		}
		out[tid] = uid
	}
	return out, nil
}

// FreshTicket is a random room's ticket waiting for its key.
type FreshTicket struct {
	UserID int64
	Ticket string
}

// FreshTickets reads a random room's tickets not keyed yet (one HGETALL; the
// pacer drains them every step, so the hash stays small).
func FreshTickets(ctx context.Context, rdb redis.Cmdable, productID int64) ([]FreshTicket, error) {
	m, err := rdb.HGetAll(ctx, Room(productID).Fresh()).Result()
	if err != nil {
		return nil, fmt.Errorf("lua: read fresh tickets: %w", err)
	}
	out := make([]FreshTicket, 0, len(m))
	for u, tid := range m {
		uid, err := strconv.ParseInt(u, 10, 64)
		if err != nil {
			continue
		}
		out = append(out, FreshTicket{UserID: uid, Ticket: tid})
	}
	return out, nil
}

// Placed is one pre-queued ticket's outcome of the shuffle: its place (fifo,
// draw) or its random key's score (random).
type Placed struct {
	UserID int64
	Ticket string
	Score  float64
}

// PlaceChunk runs room_place.lua for one chunk (at most 2,000 entries):
// byPlace writes places (fifo, draw), otherwise random keys. It returns
// the users written; -1 when the shuffle was already published.
func PlaceChunk(ctx context.Context, rdb redis.Scripter, productID int64, byPlace bool, chunk []Placed) (int, error) {
	r := Room(productID)
	kind := "key"
	if byPlace {
		kind = "place"
	}
	argv := make([]any, 0, 1+3*len(chunk))
	argv = append(argv, kind)
	for _, p := range chunk {
		argv = append(argv, p.UserID, p.Ticket, strconv.FormatFloat(p.Score, 'f', 0, 64))
	}
	n, err := roomPlaceScript.Run(ctx, rdb, []string{r.State(), r.Tickets(), r.Line()}, argv...).Int()
	if err != nil {
		return 0, fmt.Errorf("lua: room place: %w", scriptFault(err, r.base))
	}
	return n, nil
}

// Publish runs room_publish.lua: the shuffle of the n pre-queued tickets in
// list is published with seed and listHash (hex), and admission opens.
// left is the units of a sharded product (-1: one-shard, read by the
// script), which a draw's winners are counted from. published is false when
// another pacer published first; ErrShuffleStale when n is not the
// pre-queue's size.
func Publish(ctx context.Context, rdb redis.Scripter, productID int64, seed, listHash string, list []byte, n int, left int64) (published bool, err error) {
	r := Room(productID)
	l := ""
	if left >= 0 {
		l = strconv.FormatInt(left, 10)
	}
	code, err := roomPublishScript.Run(ctx, rdb, []string{r.State(), r.List(), r.Stock(), r.Pre()},
		seed, listHash, list, n, l).Int()
	if err != nil {
		return false, fmt.Errorf("lua: room publish: %w", scriptFault(err, r.base))
	}
	switch code {
	case 1:
		return true, nil
	case 0:
		return false, nil
	case -1:
		return false, ErrShuffleStale
	}
	return false, fmt.Errorf("%w %d from room publish", errUnknownCode, code)
}

// PublishedList reads the pre-queue list published at the shuffle
// (redis.Nil before it).
func PublishedList(ctx context.Context, rdb redis.Cmdable, productID int64) ([]byte, error) {
	b, err := rdb.Get(ctx, Room(productID).List()).Bytes()
	if err != nil {
		return nil, fmt.Errorf("lua: read published list: %w", err)
	}
	return b, nil
}

// RoomLogEntry is one random-mode step's admissions.
type RoomLogEntry struct {
	ID    string  // stream entry id
	Users []int64 // admitted in that step
}

// ReadRoomLog reads the admissions logged after entry id after ("0": from
// the start, "$"-like "" : nothing, only the newest id), at most count.
func ReadRoomLog(ctx context.Context, rdb redis.Cmdable, productID int64, after string, count int64) ([]RoomLogEntry, error) {
	if after == "" {
		after = "0"
	}
	msgs, err := rdb.XRangeN(ctx, Room(productID).Log(), "("+after, "+", count).Result()
	if err != nil {
		return nil, fmt.Errorf("lua: read room log: %w", err)
	}
	out := make([]RoomLogEntry, 0, len(msgs))
	for _, m := range msgs {
		e := RoomLogEntry{ID: m.ID}
		u, _ := m.Values["u"].(string)
		for _, s := range strings.Split(u, ",") {
			if uid, err := strconv.ParseInt(s, 10, 64); err == nil {
				e.Users = append(e.Users, uid)
			}
		}
		out = append(out, e)
	}
	return out, nil
}

// LastRoomLogID is the id of the newest entry of productID's room log ("0"
// when it has none).
func LastRoomLogID(ctx context.Context, rdb redis.Cmdable, productID int64) (string, error) {
	msgs, err := rdb.XRevRangeN(ctx, Room(productID).Log(), "+", "-", 1).Result()
	if err != nil {
		return "", fmt.Errorf("lua: read room log: %w", err)
	}
	if len(msgs) == 0 {
		return "0", nil
	}
	return msgs[0].ID, nil
}
