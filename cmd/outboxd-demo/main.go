// Command outboxd-demo runs outboxd for real on this machine: a private PostgreSQL, the embedded
// Kafka-protocol broker, the pipeline, a sample writer, and events printed as they arrive.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/outboxd/outboxd/internal/demo"
)

func main() {
	var o demo.Options
	flag.DurationVar(&o.Interval, "interval", 500*time.Millisecond, "time between sample transactions")
	flag.IntVar(&o.Events, "events", 0, "stop after this many events (0 = run until Ctrl-C)")
	flag.BoolVar(&o.Verbose, "v", false, "show outboxd's info logs")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := demo.Run(ctx, os.Stdout, o); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}
