package lua

// RoomTakeSource is room_take.lua's text, for tests that load it themselves.
func RoomTakeSource() string { return roomTakeSrc }

// ScriptNames maps the SHA-1 of every script to its file's name, for tests
// that fail a chosen script call.
func ScriptNames() map[string]string {
	return map[string]string{
		reserveScript.Hash(): "reserve", roomClaimScript.Hash(): "room_claim", roomClaimUsedScript.Hash(): "room_claim_used",
		roomClaimGiveBackScript.Hash(): "room_claim_giveback", holdRevokeScript.Hash(): "hold_revoke",
	}
}

// Answered reports whether err is an answer of reserve.lua rather than a
// failure to run it (admission.go).
func Answered(err error) bool { return answered(err) }
