package sourcetest

import (
	"strings"
	"testing"
	"time"
)

// The suite's own checks must be able to fail: a goroutine started under a subtest's label and
// still running is reported; one that ended, or one started without the label, is not.
func TestLeakCheckSeesLabelledGoroutines(t *testing.T) {
	unlabelled := make(chan struct{})
	defer close(unlabelled)
	go func() { <-unlabelled }() // started before the label: not the source's

	l := label()
	release, started := make(chan struct{}), make(chan struct{})
	go func() {
		inner := make(chan struct{})
		go func() { close(started); <-release; close(inner) }() // a goroutine's goroutine inherits the label
		<-inner
	}()
	<-started
	if n, _ := labelled(l); n != 2 {
		t.Fatalf("labelled(%s) = %d, want 2", l, n)
	}
	err := waitNoGoroutines(l, 50*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "2 goroutine(s)") || !strings.Contains(err.Error(), "leak_test.go") {
		t.Fatalf("a running labelled goroutine was not reported with its stack: %v", err)
	}
	close(release)
	if err := waitNoGoroutines(l, 5*time.Second); err != nil {
		t.Fatalf("goroutines that ended are still reported: %v", err)
	}
}
