package pipeline

import "testing"

func TestBreaker(t *testing.T) {
	b, err := ParseRate("2/5")
	if err != nil {
		t.Fatal(err)
	}
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
	for _, bad := range []string{"x", "5", "5/5", "-1/3", "1/0", "a/b"} {
		if _, err := ParseRate(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
