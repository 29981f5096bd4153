// Package testenv starts private servers for tests, benchmarks and the demo: a PostgreSQL cluster
// from the installed server binaries (initdb into a temp dir, free port, wal_level=logical), a
// MariaDB instance, and an in-process Kafka-protocol broker (kfake) served over TCP.
//
// Every server is private to its caller: its own data directory, its own port, and it can be
// killed (SIGKILL) and restarted to test crash safety. Nothing here touches the system instances.
package testenv

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"sync"
	"testing"
)

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
//
// It picks at random below the kernel's ephemeral range (ip_local_port_range, 32768–60999 on
// Linux), never the same port twice in one process: a port from the ephemeral range (what
// listening on :0 gives) can be taken by any outgoing connection's local end — tests open
// thousands — between this call and the server's bind, which showed up as "address already in
// use" in CI. Other test processes pick from the same 12,000 ports at random, so a collision
// needs the same pick within that window. Falls back to :0 when no port is found.
func FreePort() (int, error) {
	portMu.Lock()
	defer portMu.Unlock()
	for range 200 {
		p := portLow + rand.IntN(portHigh-portLow)
		if portsHanded[p] {
			continue
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			continue
		}
		l.Close()
		portsHanded[p] = true
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
)

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
