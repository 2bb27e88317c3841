package drop

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Rule names the shuffle rule this package implements (see the package
// comment); it is published with every shuffle.
const Rule = "stampede-shuffle-v1"

// TicketIDLen is the length of a ticket id: 16 lower-case hex digits.
const TicketIDLen = 16

// Errors.
var (
	// ErrSeedMismatch: the seed does not hash to the commitment. Whoever
	// published both changed the seed after committing to it.
	ErrSeedMismatch = errors.New("drop: the seed does not match the commitment")
	// ErrBadSeed: not 64 hex digits.
	ErrBadSeed = errors.New("drop: a seed is 64 hex digits")
)

// Seed is a drop's secret: 32 random bytes.
type Seed [32]byte

// NewSeed returns a seed from crypto/rand.
func NewSeed() (Seed, error) {
	var s Seed
	if _, err := rand.Read(s[:]); err != nil {
		return Seed{}, fmt.Errorf("drop: new seed: %w", err)
	}
	return s, nil
}

// ParseSeed reads 64 hex digits (either case). ErrBadSeed otherwise.
func ParseSeed(h string) (Seed, error) {
	var s Seed
	if len(h) != 64 {
		return s, ErrBadSeed
	}
	if _, err := hex.Decode(s[:], []byte(h)); err != nil {
		return s, ErrBadSeed
	}
	return s, nil
}

// Hex is the seed as 64 lower-case hex digits.
func (s Seed) Hex() string { return hex.EncodeToString(s[:]) }

// Commitment is hex(SHA-256(seed)): what a room publishes before its first
// ticket, so that the seed revealed at the shuffle can be checked.
func (s Seed) Commitment() string {
	h := sha256.Sum256(s[:])
	return hex.EncodeToString(h[:])
}

// Verify checks a published seed against a published commitment:
// ErrBadSeed for a seed that is not 64 hex digits, ErrSeedMismatch when it
// does not hash to the commitment.
func Verify(seedHex, commitment string) error {
	s, err := ParseSeed(seedHex)
	if err != nil {
		return err
	}
	want := s.Commitment()
	if subtle.ConstantTimeCompare([]byte(want), []byte(strings.ToLower(commitment))) != 1 {
		return ErrSeedMismatch
	}
	return nil
}

// NewTicketID returns 16 lower-case hex digits from crypto/rand.
func NewTicketID() (string, error) {
	var b [TicketIDLen / 2]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("drop: new ticket id: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// ValidTicketID reports whether s is 16 lower-case hex digits.
func ValidTicketID(s string) bool {
	if len(s) != TicketIDLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// List is the published form of a pre-queue: the ticket ids sorted
// ascending, each followed by "\n" (an empty pre-queue is the empty list).
// tickets is not changed.
func List(tickets []string) []byte {
	sorted := slices.Clone(tickets)
	slices.Sort(sorted)
	var b bytes.Buffer
	b.Grow(len(sorted) * (TicketIDLen + 1))
	for _, t := range sorted {
		b.WriteString(t)
		b.WriteByte('\n')
	}
	return b.Bytes()
}

// ParseList splits a published list into its ticket ids and checks its
// form: every line a ticket id, sorted ascending, none twice, the last one
// ended by "\n".
func ParseList(list []byte) ([]string, error) {
	if len(list) == 0 {
		return nil, nil
	}
	if list[len(list)-1] != '\n' {
		return nil, errors.New("drop: a list ends with a newline")
	}
	lines := strings.Split(string(list[:len(list)-1]), "\n")
	for i, t := range lines {
		if !ValidTicketID(t) {
			return nil, fmt.Errorf("drop: list line %d is not a ticket id", i+1)
		}
		if i > 0 && lines[i-1] >= t {
			return nil, fmt.Errorf("drop: list line %d is not above the line before", i+1)
		}
	}
	return lines, nil
}

// ListHash is SHA-256 of a published list.
func ListHash(list []byte) [32]byte { return sha256.Sum256(list) }

// Key is a pre-queued ticket's shuffle key: SHA-256(seed ‖ listHash ‖ t).
func Key(seed Seed, listHash [32]byte, ticket string) [32]byte {
	var buf [64 + TicketIDLen]byte
	n := copy(buf[:], seed[:])
	n += copy(buf[n:], listHash[:])
	n += copy(buf[n:], ticket)
	return sha256.Sum256(buf[:n])
}

// RandomKey is a ticket's admission key in a room in random mode:
// SHA-256(seed ‖ t).
func RandomKey(seed Seed, ticket string) [32]byte {
	var buf [32 + TicketIDLen]byte
	n := copy(buf[:], seed[:])
	n += copy(buf[n:], ticket)
	return sha256.Sum256(buf[:n])
}

// Score is the first 52 bits of a key as an integer-valued float64 (exact:
// below 2^53), the order a Redis sorted set keeps; keys that share their
// first 52 bits (about one pair in 2^26 among 100,000 tickets) are ordered by
// the set's member instead.
func Score(key [32]byte) float64 {
	return float64(binary.BigEndian.Uint64(key[:8]) >> 12)
}

// Shuffled is the outcome of Shuffle.
type Shuffled struct {
	List     []byte   // the published list (List)
	ListHash [32]byte // SHA-256(List)
	// Order is the ticket ids by position: Order[0] has position 1.
	Order []string
}

// Shuffle applies the rule to the pre-queued tickets: it returns the
// published list, its hash and the tickets in position order. The ids are
// not checked (a room only ever holds ValidTicketID ones); duplicates are
// kept once.
func Shuffle(seed Seed, tickets []string) Shuffled {
	ids := slices.Clone(tickets)
	slices.Sort(ids)
	ids = slices.Compact(ids)
	list := List(ids)
	lh := ListHash(list)
	type keyed struct {
		key [32]byte
		id  string
	}
	ks := make([]keyed, len(ids))
	for i, t := range ids {
		ks[i] = keyed{Key(seed, lh, t), t}
	}
	slices.SortFunc(ks, func(a, b keyed) int {
		if c := bytes.Compare(a.key[:], b.key[:]); c != 0 {
			return c
		}
		return strings.Compare(a.id, b.id)
	})
	order := make([]string, len(ks))
	for i, k := range ks {
		order[i] = k.id
	}
	return Shuffled{List: list, ListHash: lh, Order: order}
}

// Position is ticket's 1-based position in the shuffle of list by seed, the
// computation a buyer runs to check a served position: 0 if the ticket is
// not in the list. It needs no order of the others beyond a count.
func Position(seed Seed, list []byte, ticket string) (int, error) {
	ids, err := ParseList(list)
	if err != nil {
		return 0, err
	}
	lh := ListHash(list)
	mine := Key(seed, lh, ticket)
	pos, found := 1, false
	for _, t := range ids {
		if t == ticket {
			found = true
			continue
		}
		k := Key(seed, lh, t)
		if c := bytes.Compare(k[:], mine[:]); c < 0 || (c == 0 && t < ticket) {
			pos++
		}
	}
	if !found {
		return 0, nil
	}
	return pos, nil
}
