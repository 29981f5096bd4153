package main

import (
	"context"
	"errors"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"
	"sync/atomic"
	"syscall"
)

// Signals (README "Signals and exit codes"):
//
//	SIGINT, SIGTERM, SIGHUP  graceful stop: no more reads, in-flight records drained (bounded by
//	                         shutdown_timeout, one budget for the whole stop), position stored;
//	                         exit 0, or 1 when shutdown_timeout passed with records unacked
//	SIGQUIT                  all goroutine stacks written to stderr (as Go does by default), then
//	                         the same graceful stop (Go's default exit 2 is the bad-config code)
//	SIGPIPE                  never kills: log lines to a gone stderr are dropped and run goes
//	                         on; a command whose stdout reader is gone (dlq tail | head) gets a
//	                         write error and ends (exit 1)
//	SIGKILL                  cannot be caught: the shell reports 137; the stored position is the
//	                         last one saved, so rows after it are delivered again on restart
//
// A second stop signal during the drain changes nothing (the drain is already bounded).
// SIGHUP and SIGINT that were ignored when outboxd started (nohup, a background job of a
// non-interactive shell) stay ignored: Notify would otherwise install a handler for them.
func stopSignals() []os.Signal {
	sigs := []os.Signal{syscall.SIGTERM, syscall.SIGQUIT}
	for _, s := range []os.Signal{syscall.SIGINT, syscall.SIGHUP} {
		if !signal.Ignored(s) {
			sigs = append(sigs, s)
		}
	}
	return sigs
}

// ignoreSIGPIPE keeps a broken stdout or stderr from killing the process. For fds 1 and 2 the Go
// runtime raises SIGPIPE (default action: die) on a write to a broken pipe unless the program
// asks for the signal with signal.Notify; with it, the write just fails with EPIPE. The channel is
// never read: deliveries to a full channel are dropped.
func ignoreSIGPIPE() {
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
}

// signalContext returns a context that ends at the first stop signal. SIGQUIT also writes every
// goroutine's stack to stderr first.
func signalContext(stderr io.Writer) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, stopSignals()...)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case s := <-ch:
				if s == syscall.SIGQUIT {
					_ = pprof.Lookup("goroutine").WriteTo(stderr, 2)
				}
				cancel()
			case <-done:
				return
			}
		}
	}()
	var once atomic.Bool
	return ctx, func() {
		if once.CompareAndSwap(false, true) {
			signal.Stop(ch)
			close(done)
			cancel()
		}
	}
}

// dropWriter writes to w until a write fails with EPIPE (the reader went away); from then on
// every write is dropped silently and reported as done, so that logging never fails or blocks
// the pipeline on a gone stderr.
type dropWriter struct {
	w    io.Writer
	gone atomic.Bool
}

func (d *dropWriter) Write(p []byte) (int, error) {
	if d.gone.Load() {
		return len(p), nil
	}
	n, err := d.w.Write(p)
	if err != nil && errors.Is(err, syscall.EPIPE) {
		d.gone.Store(true)
		return len(p), nil
	}
	return n, err
}
