package demo

import (
	"bytes"
	"context"
	"regexp"
	"strings"
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
