// Package testenv starts private servers for tests, benchmarks and the demo: a PostgreSQL cluster
// from the installed server binaries (initdb into a temp dir, free port, wal_level=logical), a
// MariaDB instance, and an in-process Kafka-protocol broker (kfake) served over TCP.
//
// Every server is private to its caller: its own data directory, its own port, and it can be
// killed (SIGKILL) and restarted to test crash safety. Nothing here touches the system instances.
package testenv

import (
	"fmt"
	"net"
	"os"
	"testing"
)

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
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
