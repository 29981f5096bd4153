package pipeline

// Exactly-once: the I/O the core asks for (see eos.go): the transactional producer's lifecycle
// and steps, outcomes, confirms, dead letters, metrics and log lines.

import (
	"context"
	"log/slog"
	"time"

	"github.com/outboxd/outboxd/internal/pipeline/delivery"
	"github.com/outboxd/outboxd/sink"
	"github.com/outboxd/outboxd/source"
)

type eosRunner struct {
	o      EOSOptions
	log    *slog.Logger
	prod   TxnProducer
	src    source.Source
	core   *delivery.Core
	work   context.Context // ends ShutdownTimeout after the run context
	budget *stopBudget     // the stop's one deadline (work ends at it)

	outcomes *outcomeQueue // done callbacks, for the loop

	lastLog time.Time
}

func (r *eosRunner) coreConfig() delivery.Config {
	o := &r.o
	return delivery.Config{Mode: delivery.ExactlyOnce, MaxInflight: o.MaxInflight, MaxInflightBytes: o.MaxInflightBytes,
		BatchRecords: o.MaxRecords, BatchBytes: o.MaxBytes, RetainBytes: o.RetainBytes, Linger: o.Linger,
		IdleInterval: o.IdleInterval, TxnTimeout: o.TxnTimeout, RetryMin: o.RetryMin, RetryMax: o.RetryMax,
		Route: o.Route, Classify: o.Classify, Fatal: o.Fatal, Fenced: o.Fenced, PositionRecord: o.Store.Record,
		DeadLetter: deadLetterFunc(o.DLQTopic, o.MaxRecordBytes), DLQTopic: o.DLQTopic, TransactionalID: o.TransactionalID,
		Breaker: delivery.Breaker{Max: o.DLQBreaker.Max, Window: o.DLQBreaker.Window}}
}

// execute does what rd asks, in its order, and returns the report of its gating producer step
// (to call after Advance), or nil.
func (r *eosRunner) execute(rd delivery.Ready) func(time.Time) {
	c := r.core
	if rd.CrashPoint != "" && r.o.Crash != nil {
		r.o.Crash(rd.CrashPoint)
	}
	var step func(time.Time)
	switch {
	case rd.NewProducer:
		if r.prod != nil {
			r.dropProducer()
		}
		p, err := r.o.NewProducer()
		if err == nil {
			r.prod = p
		}
		step = func(now time.Time) { c.ProducerReady(now, err) }
	case rd.ReadBack:
		p, err := r.o.Store.Load(r.work)
		step = func(now time.Time) { c.Loaded(now, p, err) }
	case rd.Abort:
		err := r.producer().Abort()
		step = func(now time.Time) { c.Aborted(now, err) }
	case rd.Begin:
		err := r.producer().Begin()
		step = func(now time.Time) { c.Began(now, err) }
		if err != nil {
			rd.Sends = nil // not produced
		}
	}
	for _, s := range rd.Sends {
		id := s.ID
		if err := r.producer().Produce(r.work, s.Rec, r.outcomes.doneFor(id)); err != nil {
			c.Refused(time.Now(), id, err)
			break
		}
	}
	if rd.Flush {
		err := r.producer().Flush(r.work)
		step = func(now time.Time) {
			r.deliverOutcomes() // every outcome before Flushed
			c.Flushed(now, err)
		}
	}
	if rd.Commit {
		err := r.producer().Commit()
		step = func(now time.Time) { c.CommitResult(now, err) }
	}
	if rd.Confirm != "" {
		r.confirm(rd.Confirm)
	}
	handleEvents(r.log, r.o.Metrics, rd.Events)
	return step
}

// producer is the current producer; a missing one (the core asks for steps only after it made
// one) is a stand-in whose every call fails.
func (r *eosRunner) producer() TxnProducer {
	if r.prod == nil {
		return brokenTxn{}
	}
	return r.prod
}

func (r *eosRunner) deliverOutcomes() {
	batch := r.outcomes.take()
	now := time.Now()
	for i := range batch {
		r.core.Outcome(now, r.outcomes.id(&batch[i]), batch[i].err)
		batch[i] = outcome{}
	}
}

func (r *eosRunner) confirm(p source.Position) {
	if err := r.src.Confirm(r.work, p); err != nil {
		r.log.Warn("confirm position to the source failed (committed; will confirm again)", "position", string(p), "err", err)
	}
	r.o.Metrics.Committed(p)
	if now := time.Now(); now.Sub(r.lastLog) >= commitLogEvery {
		r.log.Info("committed position", "position", string(p))
		r.lastLog = now
	}
	if r.o.OnCommit != nil {
		r.o.OnCommit(p)
	}
}

func (r *eosRunner) dropProducer() {
	p := r.prod
	r.prod = nil
	go p.Close() // it may wait for sarama's bounded retries; a new one fences it anyway
}

func (r *eosRunner) closeProducer() {
	done := make(chan struct{})
	p := r.prod
	r.prod = nil
	go func() { p.Close(); close(done) }()
	select {
	case <-done:
	case <-r.budget.wait(): // after a stop: what is left of shutdown_timeout
		r.log.Warn("closing the transactional producer timed out")
	}
}

// brokenTxn stands in for a missing producer: every call fails (transiently).
type brokenTxn struct{}

var errNoProducer = errorString("no transactional producer")

type errorString string

func (e errorString) Error() string { return string(e) }

func (brokenTxn) Begin() error                                             { return errNoProducer }
func (brokenTxn) Produce(context.Context, *sink.Record, func(error)) error { return errNoProducer }
func (brokenTxn) Flush(context.Context) error                              { return nil }
func (brokenTxn) Commit() error                                            { return errNoProducer }
func (brokenTxn) Abort() error                                             { return errNoProducer }
func (brokenTxn) Usable() bool                                             { return false }
func (brokenTxn) Close() error                                             { return nil }
