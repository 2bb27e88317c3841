package lua

// RoomTakeSource is room_take.lua's text, for tests that load it themselves.
func RoomTakeSource() string { return roomTakeSrc }
