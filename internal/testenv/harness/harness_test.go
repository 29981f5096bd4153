package harness

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// recorder is a testing.TB whose Fatalf records the message and ends the goroutine, as
// t.Fatalf does: the harness's failure paths can be checked without failing this test.
type recorder struct {
	testing.TB
	fatal string
}

func (r *recorder) Helper() {}
func (r *recorder) Fatalf(format string, args ...any) {
	r.fatal = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// run calls f with a recorder in a goroutine of its own and returns the Fatalf message ("" if
// f returned normally).
func run(t *testing.T, f func(tb testing.TB)) string {
	r := &recorder{TB: t}
	done := make(chan struct{})
	go func() { defer close(done); f(r) }()
	<-done
	return r.fatal
}

func TestWaitForReturnsWhenTrue(t *testing.T) {
	n := 0
	took := WaitFor(t, 5*time.Second, "three calls", func() bool { n++; return n == 3 })
	if n != 3 || took < 2*Interval {
		t.Fatalf("cond called %d times, took %v; want 3 calls and at least %v", n, took, 2*Interval)
	}
}

func TestWaitForFailsNamingWhat(t *testing.T) {
	msg := run(t, func(tb testing.TB) { WaitFor(tb, 120*time.Millisecond, "the moon", func() bool { return false }) })
	if !strings.Contains(msg, "waiting for the moon") || !strings.Contains(msg, "120ms") {
		t.Fatalf("Fatalf message %q does not name what and how long", msg)
	}
}

func TestUntil(t *testing.T) {
	n := 0
	if err := Until(5*time.Second, time.Millisecond, func() error {
		if n++; n < 3 {
			return errors.New("not yet")
		}
		return nil
	}); err != nil || n != 3 {
		t.Fatalf("Until = %v after %d calls, want nil after 3", err, n)
	}

	gone := errors.New("server exited")
	n = 0
	err := Until(5*time.Second, time.Millisecond, func() error { n++; return Final(gone) })
	if err != gone || n != 1 {
		t.Fatalf("a Final error: Until = %v after %d calls, want it unwrapped after 1", err, n)
	}

	last := errors.New("connection refused")
	err = Until(30*time.Millisecond, time.Millisecond, func() error { return last })
	var te *TimeoutError
	if !errors.As(err, &te) || !errors.Is(err, last) || te.Within != 30*time.Millisecond ||
		!strings.Contains(err.Error(), "not within 30ms: connection refused") {
		t.Fatalf("timeout: Until = %v (%T), want a *TimeoutError carrying the last error", err, err)
	}
}

func TestProcStopReturnsExitCode(t *testing.T) {
	p := Start(t, "/bin/sh", []string{"-c", `trap 'exit 3' TERM; echo ready; while :; do sleep 0.05; done`}, Options{Name: "sh"})
	WaitFor(t, 10*time.Second, "the trap set", func() bool { return strings.Contains(p.Out.String(), "ready") })
	p.MustBeRunning(t)
	if code := p.Stop(t, syscall.SIGTERM); code != 3 {
		t.Fatalf("Stop(SIGTERM) = %d, want 3", code)
	}
	if !p.Exited() {
		t.Fatal("Exited() false after Stop")
	}
	p.MustBeRunning(t) // stopped by the test: no failure
}

func TestProcMustBeRunningFailsOnOwnExit(t *testing.T) {
	p := Start(t, "/bin/sh", []string{"-c", "echo bye; exit 7"}, Options{Name: "quitter"})
	if code := p.WaitExit(t, 10*time.Second, "its script"); code != 7 {
		t.Fatalf("WaitExit = %d, want 7", code)
	}
	msg := run(t, func(tb testing.TB) { p.MustBeRunning(tb) })
	if !strings.Contains(msg, "quitter exited by itself with code 7") || !strings.Contains(msg, "bye") {
		t.Fatalf("MustBeRunning message %q lacks the name, code and output", msg)
	}
}

func TestProcWaitExitFailsWhileRunning(t *testing.T) {
	// sleep is sh's child and holds the output pipe open after sh dies: Kill must not wait
	// for it (Cmd.WaitDelay).
	p := Start(t, "/bin/sh", []string{"-c", "sleep 30"}, Options{})
	msg := run(t, func(tb testing.TB) { p.WaitExit(tb, 50*time.Millisecond, "nothing") })
	if !strings.Contains(msg, "still running 50ms after nothing") {
		t.Fatalf("WaitExit message %q", msg)
	}
	start := time.Now()
	p.Kill()
	if !p.Exited() || p.Code != -1 || time.Since(start) > 10*time.Second {
		t.Fatalf("after Kill: exited %v code %d after %v, want true -1 within 10s", p.Exited(), p.Code, time.Since(start))
	}
}

func TestProcLogDirAndEnv(t *testing.T) {
	dir := t.TempDir()
	for i := range 2 {
		p := Start(t, "/bin/sh", []string{"-c", `echo "run $HARNESS_X"`}, Options{Name: "a", LogDir: dir, Env: []string{fmt.Sprintf("HARNESS_X=%d", i)}})
		p.WaitExit(t, 10*time.Second, "echo")
		if got := p.Out.String(); got != fmt.Sprintf("run %d\n", i) {
			t.Fatalf("Out = %q", got)
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, "a.log"))
	if err != nil {
		t.Fatal(err)
	}
	if s := string(b); strings.Count(s, "==== start ") != 2 || !strings.Contains(s, "run 0\n") || !strings.Contains(s, "run 1\n") {
		t.Fatalf("a.log does not hold both starts:\n%s", s)
	}
}

func TestTail(t *testing.T) {
	if got := Tail("a\nb\nc\nd", 2); got != "c\nd" {
		t.Fatalf("Tail = %q", got)
	}
	if got := Tail("a", 5); got != "a" {
		t.Fatalf("Tail = %q", got)
	}
}
