package sourcetest

import (
	"bytes"
	"context"
	"fmt"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outboxd/outboxd/internal/testenv/harness"
)

// The goroutine check. goleak and runtime.NumGoroutine count every goroutine of the process,
// and the adapters run this suite in parallel with their other tests (MySQL) or beside a shared
// database cluster's helpers, so a process-wide count either flakes or forces the suite to run
// alone. Instead each subtest's goroutine carries a pprof label unique to it: every goroutine
// the source starts (and every goroutine those start) inherits the label, so the goroutine
// profile counts exactly the goroutines the subtest's sources created, whatever else runs.

const labelKey = "sourcetest"

var labelSeq atomic.Uint64

// label gives the calling goroutine a fresh label and returns it. The caller must be a
// goroutine of its own (a subtest's): the label stays on it.
func label() string {
	l := fmt.Sprintf("%d", labelSeq.Add(1))
	pprof.SetGoroutineLabels(pprof.WithLabels(context.Background(), pprof.Labels(labelKey, l)))
	return l
}

// labelled returns the goroutines carrying label l other than the caller, and their stacks.
func labelled(l string) (int, string) {
	var b bytes.Buffer
	if err := pprof.Lookup("goroutine").WriteTo(&b, 1); err != nil {
		return -1, err.Error()
	}
	tag := fmt.Sprintf(`"%s":"%s"`, labelKey, l)
	n := 0
	var stacks strings.Builder
	// debug=1 groups identical goroutines: "N @ pcs\n# labels: {...}\n#\tframe..." per group.
	for _, rec := range strings.Split(b.String(), "\n\n") {
		if !strings.Contains(rec, tag) {
			continue
		}
		if strings.Contains(rec, "sourcetest.labelled+") {
			continue // the caller itself
		}
		count, _, _ := strings.Cut(rec, " @ ")
		if i := strings.LastIndexByte(count, '\n'); i >= 0 {
			count = count[i+1:]
		}
		c, err := strconv.Atoi(count)
		if err != nil {
			c = 1
		}
		n += c
		stacks.WriteString(rec)
		stacks.WriteString("\n\n")
	}
	return n, stacks.String()
}

// checkNoLeak labels the calling subtest goroutine and registers a cleanup, run after every
// cleanup registered later (the sources' Close), that fails t unless every goroutine started
// under the label has ended within wait.
func checkNoLeak(t testing.TB, wait time.Duration) string {
	l := label()
	t.Cleanup(func() {
		if err := waitNoGoroutines(l, wait); err != nil {
			t.Error(err)
		}
	})
	return l
}

// waitNoGoroutines waits until no goroutine but the caller carries label l, or fails after wait.
func waitNoGoroutines(l string, wait time.Duration) error {
	err := harness.Until(wait, 20*time.Millisecond, func() error {
		if n, stacks := labelled(l); n != 0 {
			return fmt.Errorf("%d goroutine(s) the source started are still running after Close (a leak):\n%s", n, stacks)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("after %v: %w", wait, err)
	}
	return nil
}
