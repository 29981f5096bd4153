package pipeline

import (
	"testing"
	"time"
)

func TestStallWatch(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	var s stallWatch
	step := func(name string, ev stallEvent, d time.Duration, wantEv stallEvent, wantD time.Duration) {
		t.Helper()
		if ev != wantEv || (wantEv != stallNone && d != wantD) {
			t.Fatalf("%s: got (%v, %v), want (%v, %v)", name, ev, d, wantEv, wantD)
		}
	}
	// Idle for an hour: no warning, however long since the last ack.
	ev, d := s.tick(at(0), 0)
	step("idle", ev, d, stallNone, 0)
	ev, d = s.tick(at(3600), 0)
	step("idle an hour", ev, d, stallNone, 0)
	// Records go in flight at 3600: the wait counts from there.
	ev, d = s.tick(at(3600.1), 5)
	step("in flight", ev, d, stallNone, 0)
	ev, d = s.tick(at(3609), 5)
	step("9 s", ev, d, stallNone, 0)
	ev, d = s.tick(at(3610.1), 5)
	step("10 s", ev, d, stallWarn, 10*time.Second)
	ev, d = s.tick(at(3620), 5)
	step("no repeat before 30 s", ev, d, stallNone, 0)
	ev, d = s.tick(at(3640.1), 5)
	step("repeat", ev, d, stallWarn, 40*time.Second)
	ev, d = s.progress(at(3650.1))
	step("resolved", ev, d, stallResolved, 50*time.Second)
	// Steady acks: never a warning.
	for i := 0; i < 100; i++ {
		if ev, _ := s.tick(at(3651+float64(i)), 7); ev != stallNone {
			t.Fatalf("tick %d with acks flowing warned", i)
		}
		if ev, _ := s.progress(at(3651.5 + float64(i))); ev != stallNone {
			t.Fatalf("progress %d without a warning reported resolved", i)
		}
	}
	// A stall that ends before the warning reports nothing on resume.
	ev, d = s.tick(at(3760), 3)
	step("short stall", ev, d, stallNone, 0)
	ev, d = s.progress(at(3760.5))
	step("short stall resumes", ev, d, stallNone, 0)
}
