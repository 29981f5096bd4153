package app

// The progress of `outboxd republish`: rows done against the rows counted, the rate and the
// time left. The rendering is pure (progress, fed a clock's readings); progressReporter draws it
// on a terminal (one line redrawn in place) or writes a plain line now and then.

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// rateWindow is the span the rate is measured over: recent enough to follow a change of pace,
// long enough to smooth the acks' bursts.
const rateWindow = 10 * time.Second

// progress is the state of one republish's progress: total rows (the counts, -1: unknown) and
// the samples of rows done. Not safe for concurrent use.
type progress struct {
	total   int64
	start   time.Time
	samples []progressSample // oldest first, within rateWindow of the newest (plus one older)
}

type progressSample struct {
	at   time.Time
	done int64
}

func newProgress(total int64, start time.Time) *progress {
	return &progress{total: total, start: start, samples: []progressSample{{at: start}}}
}

// observe records that done rows were done at now (now never before the last observation).
func (p *progress) observe(now time.Time, done int64) {
	p.samples = append(p.samples, progressSample{at: now, done: done})
	// Keep one sample at or before the window's start as the rate's base.
	cut := 0
	for cut+1 < len(p.samples) && !p.samples[cut+1].at.After(now.Add(-rateWindow)) {
		cut++
	}
	p.samples = p.samples[cut:]
}

// last is the newest sample.
func (p *progress) last() progressSample { return p.samples[len(p.samples)-1] }

// rate is rows per second over the window (0 before a second sample).
func (p *progress) rate() float64 {
	first, last := p.samples[0], p.last()
	d := last.at.Sub(first.at).Seconds()
	if d <= 0 {
		return 0
	}
	return float64(last.done-first.done) / d
}

// eta is the time left at the current rate; ok false when it cannot be told (no rate yet, or
// the total is unknown or passed).
func (p *progress) eta() (time.Duration, bool) {
	r, left := p.rate(), p.total-p.last().done
	if r <= 0 || p.total < 0 || left < 0 {
		return 0, false
	}
	return time.Duration(float64(left) / r * float64(time.Second)).Round(time.Second), true
}

// fraction is done/total in [0, 1] (1 when total is 0 or passed; 0 when unknown).
func (p *progress) fraction() float64 {
	switch done := p.last().done; {
	case p.total < 0:
		return 0
	case p.total == 0 || done >= p.total:
		return 1
	default:
		return float64(done) / float64(p.total)
	}
}

// numbers is "4000/10000 rows (40.0%), 1234 rows/s, ETA 5s" (the common part of both forms).
func (p *progress) numbers() string {
	last := p.last()
	var b strings.Builder
	if p.total < 0 {
		fmt.Fprintf(&b, "%d rows", last.done)
	} else {
		fmt.Fprintf(&b, "%d/%d rows (%.1f%%)", last.done, p.total, 100*p.fraction())
	}
	fmt.Fprintf(&b, ", %.0f rows/s", p.rate())
	if eta, ok := p.eta(); ok {
		fmt.Fprintf(&b, ", ETA %s", eta)
	} else {
		b.WriteString(", ETA -")
	}
	return b.String()
}

// bar is the terminal form: "[#########...........] 4000/10000 rows (40.0%), 1234 rows/s, ETA 5s".
func (p *progress) bar(width int) string {
	full := int(p.fraction() * float64(width))
	return "[" + strings.Repeat("#", full) + strings.Repeat(".", width-full) + "] " + p.numbers()
}

// line is the plain form, one line each: "republish: 4000/10000 rows (40.0%), ..., elapsed 3s".
func (p *progress) line() string {
	return fmt.Sprintf("republish: %s, elapsed %s", p.numbers(), p.last().at.Sub(p.start).Round(time.Second))
}

// progressReporter draws a progress on w: on a terminal the bar, redrawn in place every
// terminalEvery; otherwise a line every plainEvery. Log lines written through logWriter first
// clear the bar's line (the next redraw puts it back under them).
type progressReporter struct {
	mu       sync.Mutex
	w        io.Writer
	terminal bool
	p        *progress
	drawn    bool // a bar is on the current line
}

const (
	terminalEvery = 200 * time.Millisecond
	plainEvery    = 5 * time.Second
	barWidth      = 30
)

// every is how often the reporter is updated.
func (r *progressReporter) every() time.Duration {
	if r.terminal {
		return terminalEvery
	}
	return plainEvery
}

// update observes done at now and draws.
func (r *progressReporter) update(now time.Time, done int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.p.observe(now, done)
	if r.terminal {
		fmt.Fprintf(r.w, "\r%s\x1b[K", r.p.bar(barWidth))
		r.drawn = true
		return
	}
	fmt.Fprintln(r.w, r.p.line())
}

// finish draws the final state and ends the bar's line.
func (r *progressReporter) finish(now time.Time, done int64) {
	r.update(now, done)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.drawn {
		fmt.Fprintln(r.w)
		r.drawn = false
	}
}

// logWriter wraps the log's writer (the same terminal): a log line clears the bar first.
func (r *progressReporter) logWriter(w io.Writer) io.Writer {
	if !r.terminal {
		return w
	}
	return writerFunc(func(b []byte) (int, error) {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.drawn {
			io.WriteString(w, "\r\x1b[K")
			r.drawn = false
		}
		return w.Write(b)
	})
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }
