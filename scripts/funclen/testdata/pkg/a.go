package pkg

// short fits: 1 line.
func short() {}

// long is 5 lines.
func long() {
	a := 1
	_ = a
	// a comment counts
}

type box[T any] struct{ v T }

// get is 4 lines.
func (b *box[T]) get() T {
	v := b.v
	return v
}
