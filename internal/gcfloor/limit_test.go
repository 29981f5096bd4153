package gcfloor

import (
	"math"
	"runtime/debug"
	"testing"
)

func TestLimit(t *testing.T) {
	const MiB = 1 << 20
	for _, c := range []struct {
		name  string
		floor uint64
		caps  Caps
		want  uint64
	}{
		{"defaults", 32 * MiB, Caps{}, 44 * MiB},
		{"explicit defaults", 32 * MiB, Caps{4096, 4 * MiB, 2 * MiB, 1 * MiB}, 44 * MiB},
		{"fewer records than the default", 32 * MiB, Caps{InflightRecords: 100}, 44 * MiB},
		// 10× the records: 36864 more × 2 KiB = 72 MiB more
		{"max_inflight 40960", 32 * MiB, Caps{InflightRecords: 40960}, 116 * MiB},
		// 10 MiB records: 2 × 10 MiB instead of 2 × 1 MiB
		{"max_record_bytes 10 MiB", 32 * MiB, Caps{MaxRecordBytes: 10 * MiB}, 62 * MiB},
		{"no floor", 0, Caps{}, 12 * MiB},
		{"tiny caps", 32 * MiB, Caps{1, 1, 1, 1}, 32*MiB + 5},
	} {
		if got := Limit(c.floor, c.caps); got != c.want {
			t.Errorf("%s: Limit = %d, want %d", c.name, got, c.want)
		}
	}
}

func TestStartWithLimitSetsAndLiftsTheLimit(t *testing.T) {
	t.Setenv("GOGC", "")
	t.Setenv("GOMEMLIMIT", "")
	defer debug.SetGCPercent(100)
	defer debug.SetMemoryLimit(math.MaxInt64)
	stop, ok := StartWithLimit(32<<20, 50<<20)
	if !ok {
		t.Fatal("StartWithLimit did not start with GOGC and GOMEMLIMIT unset")
	}
	if got := debug.SetMemoryLimit(-1); got != 50<<20 {
		t.Fatalf("memory limit %d, want %d", got, 50<<20)
	}
	stop()
	if got := debug.SetMemoryLimit(-1); got != math.MaxInt64 {
		t.Fatalf("stop left the memory limit at %d", got)
	}
}

func TestStartWithLimitRespectsTheEnvironment(t *testing.T) {
	defer debug.SetMemoryLimit(math.MaxInt64)
	for _, env := range []string{"GOGC", "GOMEMLIMIT"} {
		t.Run(env, func(t *testing.T) {
			t.Setenv("GOGC", "")
			t.Setenv("GOMEMLIMIT", "")
			t.Setenv(env, "200")
			before := debug.SetMemoryLimit(-1)
			if _, ok := StartWithLimit(32<<20, 50<<20); ok {
				t.Fatalf("StartWithLimit started although %s is set", env)
			}
			if got := debug.SetMemoryLimit(-1); got != before {
				t.Fatalf("StartWithLimit changed the memory limit to %d although %s is set", got, env)
			}
		})
	}
}
