package room

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stampede-sh/stampede/lua"
)

// The queue answer and the push service's queue message (push/line.go's
// sendLocked) agree on every field they share for the same state: WAITING
// has an estimate once the rate is known, ADMITTED has position 0 and
// estimate 0, SOLD_OUT keeps its position and has no estimate (null); a
// draw's reserve list has none either.
func TestPlaceJSONAgreesWithPush(t *testing.T) {
	deadline := time.Now().Add(time.Minute)
	eta := func(n int64) *int64 { return &n }
	for _, tc := range []struct {
		place    lua.Place
		position int64
		eta      *int64
	}{
		{lua.Place{Ticket: "0000000000000009", State: lua.PlaceWaiting, Position: 5, Rate: 2}, 5, eta(3)},
		{lua.Place{Ticket: "0000000000000009", State: lua.PlaceWaiting, Position: 5}, 5, nil},
		{lua.Place{Ticket: "0000000000000009", State: lua.PlaceAdmitted, Rate: 2, Deadline: deadline}, 0, eta(0)},
		{lua.Place{Ticket: "0000000000000009", State: lua.PlaceSoldOut, Position: 5, Rate: 2}, 5, nil},
		{lua.Place{Ticket: "0000000000000009", State: lua.PlaceSoldOut, Position: 5}, 5, nil},
		{lua.Place{Ticket: "0000000000000009", Mode: lua.ModeDraw, State: lua.PlaceWaiting, Position: 2, Rate: 2}, 2, nil},
	} {
		var got struct {
			ProductID  int64  `json:"productId"`
			Ticket     string `json:"ticket"`
			State      string `json:"state"`
			Position   int64  `json:"position"`
			EtaSeconds *int64 `json:"etaSeconds"`
		}
		if err := json.Unmarshal(appendPlace(nil, 7, tc.place), &got); err != nil {
			t.Fatal(err)
		}
		if got.ProductID != 7 || got.Ticket != tc.place.Ticket || got.State != string(tc.place.State) || got.Position != tc.position ||
			(got.EtaSeconds == nil) != (tc.eta == nil) || (tc.eta != nil && *got.EtaSeconds != *tc.eta) {
			t.Errorf("%+v: %+v (eta %v), want position %d eta %v", tc.place, got, got.EtaSeconds, tc.position, tc.eta)
		}
	}
}
