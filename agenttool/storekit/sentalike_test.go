package storekit

import "testing"

// SentAlike reads the half of a definition's digest that says how the
// reference was handed over; a definition that cannot say (none, or one
// digest of the whole from an earlier version) is alike to any, as those
// versions took every definition.
func TestSentAlike(t *testing.T) {
	const (
		header    = 0x1111_2222_3333_4446
		refenced  = 0x1111_2222_7777_888a // another fence, the reference sent alike
		uuid      = 0x5555_6666_3333_4446 // the reference in another form
		wholeOnce = 0x5555_6666_3333_4447 // an earlier version's one digest (lowest bit set)
	)
	for _, c := range []struct {
		a, b uint64
		want bool
	}{
		{header, header, true},
		{header, refenced, true},
		{header, uuid, false},
		{uuid, header, false},
		{header, 0, true},
		{0, uuid, true},
		{wholeOnce, header, true},
		{uuid, wholeOnce, true},
	} {
		if got := SentAlike(c.a, c.b); got != c.want {
			t.Errorf("SentAlike(%016x, %016x) = %v; want %v", c.a, c.b, got, c.want)
		}
	}
}
