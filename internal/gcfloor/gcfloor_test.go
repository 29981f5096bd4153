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
		gcAndFinalize(t) // the tuner has seen this cycle
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
	gcAndFinalize(t) // the tuner's armed sentinel was collected and its finalizer ran
	if cur := debug.SetGCPercent(100); cur != 100 {
		t.Fatalf("tuner changed GOGC to %d after stop", cur)
	}
}

// probe is a finalizer's object that is not tiny-allocated (it holds a pointer), so its
// finalizer runs.
type probe struct{ ran chan struct{} }

// gcAndFinalize runs a GC cycle and returns once every finalizer that cycle queued (the
// tuner's sentinel's among them) has run, so a test knows the tuner had its chance to act.
// A single goroutine runs all finalizers, sequentially (runtime.SetFinalizer), taking what is
// queued in batches; a probe collected in the cycle proves its batch was taken but not that
// the sentinel ran (same batch, any order; or a later batch). So it runs rounds, each a
// collection with a probe, each starting once the previous probe ran: the sentinel's batch was
// queued before round 1, is at the latest the batch of round 2's probe, and round 3's probe,
// queued once that batch was taken, runs after the whole of it.
func gcAndFinalize(t *testing.T) {
	t.Helper()
	for range 3 {
		p := &probe{ran: make(chan struct{})}
		ran := p.ran
		runtime.SetFinalizer(p, func(p *probe) { close(p.ran) })
		runtime.GC()
		select {
		case <-ran:
		case <-time.After(10 * time.Second):
			t.Fatal("a finalizer did not run within 10s of the GC cycle that collected its object")
		}
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
