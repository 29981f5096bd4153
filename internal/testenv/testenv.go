// Package testenv starts private servers for tests, benchmarks and the demo: a PostgreSQL cluster
// from the installed server binaries (initdb into a temp dir, free port, wal_level=logical), a
// MariaDB instance, and an in-process Kafka-protocol broker (kfake) served over TCP.
//
// Every server is private to its caller: its own data directory, its own port, and it can be
// killed (SIGKILL) and restarted to test crash safety. Nothing here touches the system instances.
package testenv

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
)

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago and that no other process
// using this package holds.
//
// It picks at random below the kernel's ephemeral range (ip_local_port_range, 32768–60999 on
// Linux), never the same port twice in one process: a port from the ephemeral range (what
// listening on :0 gives) can be taken by any outgoing connection's local end — tests open
// thousands — between this call and the server's bind, which showed up as "address already in
// use" in CI. Test binaries of several packages run at once, and a port is handed out seconds
// before its server binds it (initdb runs in between), so each pick is also reserved across
// processes: an exclusive flock on a file named after the port in portLockDir, held until the
// process exits (the kernel drops it even on kill -9). Without it two processes picked the same
// port in that window and one server failed to bind (CI, 2026-12-04). Falls back to :0 when no
// port is found.
func FreePort() (int, error) {
	portMu.Lock()
	defer portMu.Unlock()
	for range 200 {
		p := portLow + rand.IntN(portHigh-portLow)
		if portsHanded[p] {
			continue
		}
		lock, ok := reservePort(p)
		if !ok {
			continue
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			lock.Close() // unlocks: the port is someone else's
			continue
		}
		l.Close()
		portsHanded[p] = true
		portLocks = append(portLocks, lock) // held (open) for the life of the process
		return p, nil
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

const portLow, portHigh = 20000, 32000

var (
	portMu      sync.Mutex
	portsHanded = map[int]bool{}
	portLocks   []*os.File
)

// portLockDir holds one lock file per reserved port, shared by every process on the machine.
var portLockDir = filepath.Join(os.TempDir(), "outboxd-test-ports")

// reservePort takes an exclusive, non-blocking flock on port's file: false when another live
// process holds it. Any other failure (no writable temp dir) reserves nothing but does not refuse
// the port — the bind check still runs.
func reservePort(port int) (*os.File, bool) {
	if err := os.MkdirAll(portLockDir, 0o777); err != nil {
		return nil, true
	}
	f, err := os.OpenFile(filepath.Join(portLockDir, strconv.Itoa(port)), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return nil, true
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, !errors.Is(err, syscall.EWOULDBLOCK)
	}
	return f, true
}

// InCI reports whether we run under CI (CI=true), where a server that cannot start is a failure,
// never a skip.
func InCI() bool { return os.Getenv("CI") == "true" || os.Getenv("CI") == "1" }

// Unavailable ends a test whose server could not start: a failure in CI, a skip elsewhere.
func Unavailable(t testing.TB, what string, err error) {
	t.Helper()
	if InCI() {
		t.Fatalf("%s could not start (CI=true, so this is a failure): %v", what, err)
	}
	t.Skipf("%s could not start (set CI=true to make this a failure): %v", what, err)
}
