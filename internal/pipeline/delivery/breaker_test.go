package delivery

import "testing"

func TestBreaker(t *testing.T) {
	b := Breaker{Max: 2, Window: 5}
	seq := []struct {
		dl   bool
		trip bool
	}{{true, false}, {false, false}, {true, false}, {false, false}, {false, false},
		{false, false}, // window now: F T F F F... (first T dropped)
		{true, false}, {true, false}, {true, true}}
	for i, s := range seq {
		if got := b.Record(s.dl); got != s.trip {
			t.Fatalf("step %d: tripped=%v want %v (count %d)", i, got, s.trip, b.Count())
		}
	}
	var zero Breaker
	for i := 0; i < 10; i++ {
		if zero.Record(true) {
			t.Fatal("zero breaker tripped")
		}
	}
}
