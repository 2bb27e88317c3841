package pkg

import "testing"

func TestLong(t *testing.T) {
	t.Log(1)
	t.Log(2)
	t.Log(3)
}
