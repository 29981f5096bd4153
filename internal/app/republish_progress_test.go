package app

import (
	"strings"
	"testing"
	"time"
)

// TestProgressRender: the bar and the plain line from a fake clock: rows done / total, the rate
// over the last rateWindow (a change of pace shows within it), the ETA, and the edge cases
// (no rate yet, the total passed, an unknown total).
func TestProgressRender(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	p := newProgress(10000, t0)
	if got := p.line(); got != "republish: 0/10000 rows (0.0%), 0 rows/s, ETA -, elapsed 0s" {
		t.Fatalf("start: %q", got)
	}
	for i := 1; i <= 4; i++ { // 1000 rows/s for 4 s
		p.observe(t0.Add(time.Duration(i)*time.Second), int64(1000*i))
	}
	if got := p.bar(20); got != "[########............] 4000/10000 rows (40.0%), 1000 rows/s, ETA 6s" {
		t.Fatalf("bar: %q", got)
	}
	if got := p.line(); got != "republish: 4000/10000 rows (40.0%), 1000 rows/s, ETA 6s, elapsed 4s" {
		t.Fatalf("line: %q", got)
	}
	// Slower: 100 rows/s for 20 s; the window (10 s) then holds only the slow pace.
	for i := 1; i <= 20; i++ {
		p.observe(t0.Add(time.Duration(4+i)*time.Second), int64(4000+100*i))
	}
	if r := p.rate(); r != 100 {
		t.Fatalf("rate %v after 20 s at 100 rows/s, want 100 (the window is %s)", r, rateWindow)
	}
	if got := p.line(); got != "republish: 6000/10000 rows (60.0%), 100 rows/s, ETA 40s, elapsed 24s" {
		t.Fatalf("slow line: %q", got)
	}
	if len(p.samples) > 12 {
		t.Fatalf("%d samples kept: the window does not trim", len(p.samples))
	}
	// More rows than counted (inserted between the count and the scan): 100%, no ETA.
	p.observe(t0.Add(30*time.Second), 10500)
	if got := p.bar(10); !strings.HasPrefix(got, "[##########] 10500/10000 rows (100.0%)") || !strings.HasSuffix(got, "ETA -") {
		t.Fatalf("past the total: %q", got)
	}
	u := newProgress(-1, t0)
	u.observe(t0.Add(2*time.Second), 50)
	if got := u.line(); got != "republish: 50 rows, 25 rows/s, ETA -, elapsed 2s" {
		t.Fatalf("unknown total: %q", got)
	}
}

// TestProgressReporter: a terminal redraws one line in place (\r, erase to the end) and a log
// line written meanwhile clears it first; otherwise one line per update.
func TestProgressReporter(t *testing.T) {
	t0 := time.Now()
	var term strings.Builder
	r := &progressReporter{w: &term, terminal: true, p: newProgress(100, t0)}
	log := r.logWriter(&term)
	r.update(t0.Add(time.Second), 10)
	log.Write([]byte("level=WARN msg=\"dead-lettering record\"\n"))
	r.update(t0.Add(2*time.Second), 20)
	r.finish(t0.Add(3*time.Second), 100)
	want := "\r[###...........................] 10/100 rows (10.0%), 10 rows/s, ETA 9s\x1b[K" +
		"\r\x1b[Klevel=WARN msg=\"dead-lettering record\"\n" +
		"\r[######........................] 20/100 rows (20.0%), 10 rows/s, ETA 8s\x1b[K" +
		"\r[##############################] 100/100 rows (100.0%), 33 rows/s, ETA 0s\x1b[K\n"
	if term.String() != want {
		t.Fatalf("terminal output\n%q\nwant\n%q", term.String(), want)
	}
	var plain strings.Builder
	r = &progressReporter{w: &plain, p: newProgress(100, t0)}
	if r.logWriter(&plain) != &plain || r.every() != plainEvery {
		t.Fatal("a plain reporter wraps the log or ticks at the terminal's pace")
	}
	r.update(t0.Add(5*time.Second), 50)
	r.finish(t0.Add(10*time.Second), 100)
	if got := plain.String(); got != "republish: 50/100 rows (50.0%), 10 rows/s, ETA 5s, elapsed 5s\nrepublish: 100/100 rows (100.0%), 10 rows/s, ETA 0s, elapsed 10s\n" {
		t.Fatalf("plain output %q", got)
	}
}
