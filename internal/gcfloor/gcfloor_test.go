package gcfloor

import (
	"runtime"
	"runtime/debug"
	"testing"
	"time"
)

func TestPercent(t *testing.T) {
	const MiB = 1 << 20
	for _, c := range []struct {
		floor, live uint64
		want        int
	}{
		{40 * MiB, 0, 1000},         // 4 MiB × 1000% = the floor
		{40 * MiB, 1 * MiB, 1000},   // 3900 capped: the minimum heap goal would be 156 MiB
		{40 * MiB, 4 * MiB, 900},    // goal 4 × 10 = 40
		{40 * MiB, 10 * MiB, 300},   // goal 40
		{40 * MiB, 16 * MiB, 150},   // goal 40
		{40 * MiB, 20 * MiB, 100},   // 2 × live reaches the floor
		{40 * MiB, 200 * MiB, 100},  // large live heaps: plain GOGC=100
		{40 * MiB, 19*MiB + 1, 110}, // rounding down never undershoots 100
		{0, 5 * MiB, 100},
		{4 * MiB, 1 * MiB, 100},   // a floor at the runtime's own minimum changes nothing
		{8 * MiB, 1 * MiB, 200},   // capped by the minimum heap goal: 4 MiB × 2 = 8
		{64 * MiB, 2 * MiB, 1600}, // 3100 capped at 64/4
	} {
		if got := Percent(c.floor, c.live); got != c.want {
			t.Errorf("Percent(%d MiB, %d B) = %d, want %d", c.floor/MiB, c.live, got, c.want)
		}
	}
}

func TestStartRaisesGOGCForASmallLiveHeap(t *testing.T) {
	t.Setenv("GOGC", "")
	t.Setenv("GOMEMLIMIT", "")
	defer debug.SetGCPercent(100)
	stop, ok := Start(64 << 20)
	if !ok {
		t.Fatal("Start did not start with GOGC and GOMEMLIMIT unset")
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		runtime.GC()
		time.Sleep(10 * time.Millisecond) // the finalizer goroutine runs after the cycle
		// SetGCPercent returns the previous value; put it back at once.
		cur := debug.SetGCPercent(-1)
		debug.SetGCPercent(cur)
		if cur > 100 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("GOGC still %d after GCs with a live heap far below the 64 MiB floor", cur)
		}
	}
	stop()
	if cur := debug.SetGCPercent(100); cur != 100 {
		t.Fatalf("stop left GOGC at %d, want 100", cur)
	}
	runtime.GC()
	time.Sleep(10 * time.Millisecond)
	if cur := debug.SetGCPercent(100); cur != 100 {
		t.Fatalf("tuner changed GOGC to %d after stop", cur)
	}
}

func TestStartRespectsTheEnvironment(t *testing.T) {
	for _, env := range []string{"GOGC", "GOMEMLIMIT"} {
		t.Run(env, func(t *testing.T) {
			t.Setenv("GOGC", "")
			t.Setenv("GOMEMLIMIT", "")
			t.Setenv(env, "200")
			if _, ok := Start(64 << 20); ok {
				t.Fatalf("Start started although %s is set", env)
			}
		})
	}
}
