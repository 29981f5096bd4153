package harness

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

// Interval is how often WaitFor checks its condition.
const Interval = 50 * time.Millisecond

// WaitFor calls cond every Interval until it returns true and returns how long that took; when
// within passes first it fails the test, naming what it waited for. cond may call t.Fatal (e.g.
// when the process under test exited).
func WaitFor(t testing.TB, within time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > within {
			t.Fatalf("timed out after %v waiting for %s", within, what)
		}
		time.Sleep(Interval)
	}
	return time.Since(start)
}

// Until is WaitFor for code that returns errors instead of failing a test (a server's start):
// it calls check every `every` until check returns nil (Until returns nil) or an error marked
// with Final (Until returns that error at once, unmarked), or within passes: then it returns a
// *TimeoutError that carries check's last error.
func Until(within, every time.Duration, check func() error) error {
	start := time.Now()
	for {
		err := check()
		if err == nil {
			return nil
		}
		var f *finalError
		if errors.As(err, &f) {
			return f.err
		}
		if time.Since(start) > within {
			return &TimeoutError{Within: within, Last: err}
		}
		time.Sleep(every)
	}
}

// Final marks err as one no retry can cure (the server process exited): Until returns it at once.
func Final(err error) error { return &finalError{err} }

type finalError struct{ err error }

func (f *finalError) Error() string { return f.err.Error() }
func (f *finalError) Unwrap() error { return f.err }

// TimeoutError is Until's error when within passed; Last is check's last error.
type TimeoutError struct {
	Within time.Duration
	Last   error
}

func (e *TimeoutError) Error() string { return fmt.Sprintf("not within %v: %v", e.Within, e.Last) }
func (e *TimeoutError) Unwrap() error { return e.Last }

// Hold sleeps for d: the length of a fault a scenario injects on purpose (a broker outage, a
// pause under load), not a wait for something to happen. why says which.
func Hold(d time.Duration, why string) {
	_ = why // documents the call site; a fixed sleep must say what it stands for
	time.Sleep(d)
}
