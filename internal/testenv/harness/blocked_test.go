package harness

import (
	"strings"
	"testing"
	"time"
)

//go:noinline
func waitOn(ch chan struct{}) { <-ch }

func TestBlockedFindsAParkedGoroutine(t *testing.T) {
	const fn = "harness.waitOn"
	if Blocked(0, fn) {
		t.Fatal("Blocked before any goroutine waits")
	}
	ch := make(chan struct{})
	ids := make(chan uint64, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		ids <- GoroutineID()
		waitOn(ch)
	}()
	id := <-ids
	if id == 0 || id == GoroutineID() {
		t.Fatalf("GoroutineID %d: want the waiter's own id", id)
	}
	WaitBlocked(t, 10*time.Second, id, fn)
	if !Blocked(0, fn) {
		t.Error("Blocked(0) false while a goroutine waits in it")
	}
	if Blocked(GoroutineID(), fn) {
		t.Error("Blocked names the test's goroutine, which is not in waitOn")
	}
	if Blocked(id, "harness.TestWaitBlockedFailsNamingFn") {
		t.Error("Blocked in a function that is not on the waiter's stack")
	}
	close(ch)
	<-done
	if Blocked(id, fn) {
		t.Error("Blocked after the waiter returned")
	}
}

func TestWaitBlockedFailsNamingFn(t *testing.T) {
	msg := run(t, func(tb testing.TB) { WaitBlocked(tb, 20*time.Millisecond, 0, "harness.nowhere") })
	if !strings.Contains(msg, "harness.nowhere") {
		t.Fatalf("WaitBlocked message %q lacks the function", msg)
	}
}
