package harness

import (
	"bytes"
	"runtime"
	"strconv"
	"testing"
	"time"
)

// BlockedInterval is how often WaitBlocked looks at the goroutines: short, because what it waits
// for (a goroutine reaching a channel operation) takes microseconds, and a look is cheap.
const BlockedInterval = 2 * time.Millisecond

// GoroutineID returns the calling goroutine's id, as tracebacks print it ("goroutine 7 [...]").
// Tests use it to name the goroutine WaitBlocked watches.
func GoroutineID() uint64 {
	var buf [64]byte
	b := buf[:runtime.Stack(buf[:], false)]
	b = bytes.TrimPrefix(b, []byte("goroutine "))
	id, _ := strconv.ParseUint(string(b[:bytes.IndexByte(b, ' ')]), 10, 64)
	return id
}

// blockedStates are the traceback states of a goroutine parked until another goroutine acts:
// a channel operation, a select, a lock or a condition variable. A goroutine in a system call,
// runnable or running is not blocked.
var blockedStates = [][]byte{
	[]byte("select"), []byte("chan receive"), []byte("chan send"), []byte("sync.Cond.Wait"),
	[]byte("sync.Mutex.Lock"), []byte("sync.RWMutex.Lock"), []byte("sync.RWMutex.RLock"),
	[]byte("sync.WaitGroup.Wait"), []byte("semacquire"),
}

// Blocked reports whether goroutine id (0: any goroutine) is parked (see blockedStates) with a
// call of fn on its stack; fn is a function as tracebacks name it, e.g.
// "postgres.(*Source).Next" or "mysql.(*eventFeed).take". It is the event a test waits for
// before it checks that something unblocks a waiting call, or that a call does wait: a sleep
// only makes that likely.
func Blocked(id uint64, fn string) bool {
	buf := make([]byte, 64<<10)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	call := []byte(fn + "(")
	for g := range bytes.SplitSeq(buf, []byte("\n\n")) {
		header, stack, _ := bytes.Cut(g, []byte("\n"))
		// "goroutine 7 [chan receive, 2 minutes]:"
		rest, ok := bytes.CutPrefix(header, []byte("goroutine "))
		if !ok {
			continue
		}
		num, state, _ := bytes.Cut(rest, []byte(" ["))
		if id != 0 && string(num) != strconv.FormatUint(id, 10) {
			continue
		}
		if parked(state) && bytes.Contains(stack, call) {
			return true
		}
	}
	return false
}

func parked(state []byte) bool {
	for _, s := range blockedStates {
		if bytes.HasPrefix(state, s) {
			return true
		}
	}
	return false
}

// WaitBlocked waits until Blocked(id, fn), checking every BlockedInterval; when within passes
// first it fails the test, naming fn.
func WaitBlocked(t testing.TB, within time.Duration, id uint64, fn string) time.Duration {
	t.Helper()
	start := time.Now()
	for !Blocked(id, fn) {
		if time.Since(start) > within {
			t.Fatalf("timed out after %v waiting for goroutine %d to block in %s", within, id, fn)
		}
		time.Sleep(BlockedInterval)
	}
	return time.Since(start)
}
