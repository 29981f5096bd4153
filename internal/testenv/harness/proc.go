package harness

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// Options are the optional settings of Start.
type Options struct {
	// Name names the process in failure messages and its log file ("outboxd" when empty).
	Name string
	// Env is added to the test process's environment.
	Env []string
	// LogDir, when set, gets a copy of the output appended to <LogDir>/<Name>.log, with a
	// "==== start" line per start (a scenario's instances keep one log each across restarts).
	LogDir string
}

// Proc is one running process started by Start. Out, Done and Code are read by the tests; Code
// is valid once Done is closed.
type Proc struct {
	Name string
	Cmd  *exec.Cmd
	Out  *SyncBuf      // stdout and stderr
	Done chan struct{} // closed when the process has exited
	Code int           // exit code (-1 when it died of a signal); read after Done

	stopped atomic.Bool // a signal that ends it was sent by the test
}

// Start starts bin with args; it is killed at the end of the test if still running, and when
// the test failed its output is logged (the last 60 lines when Options.LogDir keeps it all).
func Start(t testing.TB, bin string, args []string, opt Options) *Proc {
	t.Helper()
	if opt.Name == "" {
		opt.Name = "outboxd"
	}
	p := &Proc{Name: opt.Name, Out: &SyncBuf{}, Done: make(chan struct{})}
	p.Cmd = exec.Command(bin, args...)
	if opt.Env != nil {
		p.Cmd.Env = append(os.Environ(), opt.Env...)
	}
	var w io.Writer = p.Out
	var logf *os.File
	if opt.LogDir != "" {
		var err error
		logf, err = os.OpenFile(filepath.Join(opt.LogDir, opt.Name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(logf, "==== start %s\n", time.Now().Format(time.RFC3339Nano))
		w = io.MultiWriter(p.Out, logf)
	}
	p.Cmd.Stdout, p.Cmd.Stderr = w, w
	// A child the process left behind may hold the output pipe open: the exit is what counts.
	p.Cmd.WaitDelay = 2 * time.Second
	if err := p.Cmd.Start(); err != nil {
		if logf != nil {
			logf.Close()
		}
		t.Fatalf("start %s: %v", bin, err)
	}
	go func() {
		err := p.Cmd.Wait()
		if ee, ok := err.(*exec.ExitError); ok {
			p.Code = ee.ExitCode()
		}
		if logf != nil {
			logf.Close()
		}
		close(p.Done)
	}()
	t.Cleanup(func() {
		if !p.Exited() {
			p.Kill()
		}
		if t.Failed() {
			if opt.LogDir != "" {
				t.Logf("%s output (last 60 lines; all of it in %s):\n%s", p.Name, filepath.Join(opt.LogDir, opt.Name+".log"), Tail(p.Out.String(), 60))
			} else {
				t.Logf("%s output:\n%s", p.Name, p.Out.String())
			}
		}
	})
	return p
}

// Exited reports whether the process has ended.
func (p *Proc) Exited() bool {
	select {
	case <-p.Done:
		return true
	default:
		return false
	}
}

// Signal sends sig; SIGKILL, SIGTERM, SIGINT and SIGQUIT count as the test stopping the process
// (MustBeRunning no longer fails for it).
func (p *Proc) Signal(sig syscall.Signal) {
	switch sig {
	case syscall.SIGKILL, syscall.SIGTERM, syscall.SIGINT, syscall.SIGQUIT:
		p.stopped.Store(true)
	}
	p.Cmd.Process.Signal(sig)
}

// Kill sends SIGKILL and waits for the process to end.
func (p *Proc) Kill() {
	p.Signal(syscall.SIGKILL)
	<-p.Done
}

// Term sends SIGTERM and returns the exit code; -1 (after a SIGKILL) when it did not exit
// within 60 s.
func (p *Proc) Term() int {
	p.Signal(syscall.SIGTERM)
	select {
	case <-p.Done:
		return p.Code
	case <-time.After(60 * time.Second):
		p.Kill()
		return -1
	}
}

// Stop sends sig and returns the exit code; it fails the test when the process has not exited
// 40 s later.
func (p *Proc) Stop(t testing.TB, sig syscall.Signal) int {
	t.Helper()
	p.Signal(sig)
	select {
	case <-p.Done:
	case <-time.After(40 * time.Second):
		t.Fatalf("%s did not exit after %v; output:\n%s", p.Name, sig, p.Out.String())
	}
	return p.Code
}

// WaitExit waits for the process to exit on its own (it must stop after what) and returns its
// code; it fails the test when it still runs after within.
func (p *Proc) WaitExit(t testing.TB, within time.Duration, what string) int {
	t.Helper()
	select {
	case <-p.Done:
		return p.Code
	case <-time.After(within):
		t.Fatalf("%s still running %v after %s (it must stop); output:\n%s", p.Name, within, what, p.Out.String())
		return 0
	}
}

// MustBeRunning fails the test when the process ended without the test stopping it.
func (p *Proc) MustBeRunning(t testing.TB) {
	t.Helper()
	if p.Exited() && !p.stopped.Load() {
		t.Fatalf("%s exited by itself with code %d; output:\n%s", p.Name, p.Code, Tail(p.Out.String(), 60))
	}
}
