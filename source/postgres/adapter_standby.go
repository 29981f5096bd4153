package postgres

// Hot standby of a PostgreSQL pipeline (internal/app/standby.go runs the terms): the active
// instance is the one whose walsender streams from the slot. A standby polls
// pg_replication_slots.active_pid every StandbyPoll and becomes active when the slot is free. A
// lost race (START_REPLICATION fails with 55006, or the slot was created concurrently) comes
// back from Open as ErrSlotActive: the wrapper of Active ends the term, and the instance is a
// standby again.

import (
	"context"
	"errors"
	"time"

	"github.com/outboxd/outboxd/source"
)

const (
	// StandbyPoll is how often a standby looks at the slot.
	StandbyPoll = 500 * time.Millisecond
	// standbyWarnEvery bounds how often a standby repeats that it cannot reach the database.
	standbyWarnEvery = 30 * time.Second
	// slotMetricsEvery is how often the active source's slot status is reported.
	slotMetricsEvery = 2 * time.Second
)

// WaitActive blocks until no other process streams from the slot, calling waiting each time
// it finds the slot taken. first is true before the first term: a database that cannot be
// reached then returns at once (the pipeline reports the error, as without a standby); later it
// is retried, with a warning at most every 30s. It returns ctx's error when ctx ends. lost is
// always nil: losing the slot shows up in Open (Active).
func (a *Adapter) WaitActive(ctx context.Context, first bool, waiting func()) (release func(), lost <-chan struct{}, err error) {
	var (
		waited   bool
		lastPID  int32
		lastWarn time.Time
	)
	slot := a.probe.Slot
	for {
		pid, err := a.probe.ActivePID(ctx)
		if ctx.Err() != nil {
			return nil, nil, ctx.Err()
		}
		switch {
		case err != nil && first && !waited:
			return func() {}, nil, nil // the pipeline reports the database error
		case err != nil:
			if time.Since(lastWarn) >= standbyWarnEvery {
				lastWarn = time.Now()
				a.log.Warn("standby: cannot check the replication slot; retrying", "slot", slot, "err", err)
			}
		case pid == 0:
			if waited || !first {
				a.log.Info("takeover: the replication slot is free; becoming active", "slot", slot, "previous_pid", lastPID)
			}
			return func() {}, nil, nil
		default:
			if !waited || pid != lastPID {
				a.log.Info("standby: the replication slot is active for another process (another outboxd?); waiting to take over",
					"slot", slot, "active_pid", pid)
			}
			waited, lastPID = true, pid
			waiting()
		}
		select {
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		case <-time.After(StandbyPoll):
		}
	}
}

// CloseStandby closes the connection WaitActive keeps between calls.
func (a *Adapter) CloseStandby() { a.probe.Close() }

// Active wraps a source of the active instance: an Open that finds the slot taken by another
// process calls lose (the term ends; back to standby), and while the source is open its slot
// status (wal_status, retained bytes) is passed to slot every 2s. s is returned as is when it
// is not a *Source.
func (a *Adapter) Active(s source.Source, lose func(why string), slot func(walStatus string, retainedBytes int64)) source.Source {
	ps, ok := s.(*Source)
	if !ok {
		return s
	}
	return &activeSource{Source: ps, lose: lose, slot: slot}
}

// activeSource is a *Source of the active instance (Active).
type activeSource struct {
	*Source
	lose func(why string)
	slot func(walStatus string, retainedBytes int64)
	stop chan struct{}
	done chan struct{}
}

func (a *activeSource) Open(ctx context.Context, from source.Position) error {
	err := a.Source.Open(ctx, from)
	if errors.Is(err, ErrSlotActive) {
		a.lose("another process took the replication slot: " + err.Error())
		return err
	}
	if err == nil {
		a.stop, a.done = make(chan struct{}), make(chan struct{})
		go a.reportSlot()
	}
	return err
}

func (a *activeSource) Close() error {
	if a.stop != nil {
		close(a.stop)
		<-a.done
		a.stop = nil
	}
	return a.Source.Close()
}

func (a *activeSource) reportSlot() {
	defer close(a.done)
	tick := time.NewTicker(slotMetricsEvery)
	defer tick.Stop()
	for {
		if st, ok := a.SlotStatus(); ok {
			a.slot(st.WALStatus, st.RetainedBytes)
		}
		select {
		case <-a.stop:
			return
		case <-tick.C:
		}
	}
}
