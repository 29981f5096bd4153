package testenv

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// TestFreePortReservesAcrossProcesses: a port FreePort handed to another process is refused here
// while that process lives, and free again once it has exited.
func TestFreePortReservesAcrossProcesses(t *testing.T) {
	if os.Getenv("OUTBOXD_FREEPORT_CHILD") == "1" {
		p, err := FreePort()
		if err != nil {
			t.Fatal(err)
		}
		os.Stdout.WriteString(strconv.Itoa(p) + "\n")
		io.Copy(io.Discard, os.Stdin) // hold the reservation until the parent closes stdin
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestFreePortReservesAcrossProcesses$")
	cmd.Env = append(os.Environ(), "OUTBOXD_FREEPORT_CHILD=1")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("read the child's port: %v", err)
	}
	port, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatalf("child printed %q: %v", line, err)
	}
	if f, ok := reservePort(port); ok {
		f.Close()
		t.Fatalf("port %d is reserved by a live child process, but reservePort granted it here", port)
	}
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("child: %v", err)
	}
	f, ok := reservePort(port)
	if !ok {
		t.Fatalf("port %d still refused after the child that reserved it exited", port)
	}
	if f == nil {
		t.Fatalf("no lock file for port %d in %s", port, portLockDir)
	}
	f.Close()
}
