package demo

import (
	"bytes"
	"context"
	"errors"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outboxd/outboxd/internal/testenv"
)

// TestDemo runs the README's demo briefly: events written by the sample writer must be printed as
// they arrive from Kafka, and outboxd must stop cleanly.
func TestDemo(t *testing.T) {
	if _, err := testenv.PostgresBinDir(); err != nil {
		testenv.Unavailable(t, "PostgreSQL", err)
	}
	var buf bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := Run(ctx, &buf, Options{Interval: 100 * time.Millisecond, Events: 5}); err != nil {
		t.Fatalf("demo: %v\n%s", err, buf.String())
	}
	out := buf.String()
	lines := regexp.MustCompile(`(?m)^  outbox\.event\.(order|customer) \[p\d@\d+\] key=\S+ id=[0-9a-f-]{36} \{.*\}$`).FindAllString(out, -1)
	if len(lines) < 5 || !strings.Contains(out, "outboxd stopped cleanly") {
		t.Fatalf("demo printed %d events:\n%s", len(lines), out)
	}
}

// TestDemoStopsCleanlyOnCancel ends the demo the way Ctrl-C does (its context), right after the
// first event was printed: the demo must say outboxd stopped cleanly and return no error, however
// the consumer loop and outboxd's return interleave.
func TestDemoStopsCleanlyOnCancel(t *testing.T) {
	if _, err := testenv.PostgresBinDir(); err != nil {
		testenv.Unavailable(t, "PostgreSQL", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	w := &cancelOnEvent{cancel: cancel}
	if err := Run(ctx, w, Options{Interval: 50 * time.Millisecond}); err != nil {
		t.Fatalf("demo after cancel: %v\n%s", err, w.String())
	}
	if out, saw := w.output(); !strings.Contains(out, "outboxd stopped cleanly") || !saw {
		t.Fatalf("demo output after cancel (saw an event: %v):\n%s", saw, out)
	}
}

// cancelOnEvent collects the demo's output (written from several goroutines) and cancels once
// an event line was written.
type cancelOnEvent struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	saw    bool
	cancel context.CancelFunc
}

func (w *cancelOnEvent) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.saw && bytes.HasPrefix(p, []byte("  outbox.event.")) {
		w.saw = true
		w.cancel()
	}
	return w.buf.Write(p)
}

func (w *cancelOnEvent) String() string {
	out, _ := w.output()
	return out
}

// output is what was written and whether an event line was among it, read under the lock: the
// demo's sample writer may still write after Run returned.
func (w *cancelOnEvent) output() (string, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String(), w.saw
}

func TestStopOutcome(t *testing.T) {
	boom := errors.New("boom")
	if err := stopOutcome(nil, true); err != nil {
		t.Errorf("asked, clean return: %v, want nil", err)
	}
	if err := stopOutcome(nil, false); err == nil || !strings.Contains(err.Error(), "without an error") {
		t.Errorf("not asked, clean return: %v, want an error saying it returned unasked", err)
	}
	for _, asked := range []bool{true, false} {
		if err := stopOutcome(boom, asked); !errors.Is(err, boom) {
			t.Errorf("asked=%v, failed run: %v, want it wrapped", asked, err)
		}
	}
}
