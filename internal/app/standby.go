package app

// Hot standby. Several `outboxd run` with the same config may run at once: one is active, the
// others wait (standby) and take over within seconds when the active one dies, resuming from
// the stored position.
//
//   - PostgreSQL: the active instance is the one whose walsender streams from the slot. A
//     standby polls pg_replication_slots.active_pid every 500ms and becomes active when the slot
//     is free. A lost race (START_REPLICATION fails with 55006, or the slot was created
//     concurrently) comes back from Open as postgres.ErrSlotActive: the instance stops its
//     pipeline and is a standby again.
//   - MySQL/MariaDB: the active instance holds GET_LOCK('outboxd:<server_id>:<tables>') on a
//     dedicated connection (source/mysql.LockName). A standby waits for that lock. The holder
//     checks every second that it still holds it; when it does not (its connection dropped, e.g.
//     on a server restart), it stops its pipeline (draining what is in flight and storing the
//     position) and competes for the lock again.
//
// Nothing before the takeover touches Kafka or the offsets store: the Kafka producer is created,
// and the stored position loaded, only once this instance is active. So the instances may share
// the offsets file on one host; across hosts they need offsets.store: kafka or a shared volume.
// While standby, /readyz answers 503 and outboxd_standby is 1.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/outboxd/outboxd/internal/config"
	"github.com/outboxd/outboxd/internal/metrics"
	"github.com/outboxd/outboxd/source"
	"github.com/outboxd/outboxd/source/mysql"
	"github.com/outboxd/outboxd/source/postgres"
)

const (
	// standbyPoll is how often a PostgreSQL standby looks at the slot.
	standbyPoll = 500 * time.Millisecond
	// lockWait is how long one GET_LOCK attempt of a MySQL standby waits server-side.
	lockWait = time.Second
	// standbyWarnEvery bounds how often a standby repeats that it cannot reach the database.
	standbyWarnEvery = 30 * time.Second
	// slotMetricsEvery is how often the active source's slot status is copied to the metrics.
	slotMetricsEvery = 2 * time.Second
)

// term is one period of this instance being active. It ends when the pipeline returns or when
// the active role is lost (lose), which cancels the term's context.
type term struct {
	m      *metrics.Metrics
	cancel context.CancelFunc
	once   sync.Once
	lost   atomic.Bool
	why    string
}

func (t *term) lose(why string) {
	t.once.Do(func() {
		t.why = why
		t.lost.Store(true)
		t.cancel()
	})
}

type termKey struct{}

// elector decides when this instance may be active.
type elector interface {
	// wait blocks until this instance may become active (logging and flagging standby while it
	// waits). lost, when not nil, is closed if the active role goes away; release gives it up.
	// first is true before the first term: a database that cannot be reached then is a startup
	// failure (exit 1), as without a standby; later it is retried.
	wait(ctx context.Context, first bool) (release func(), lost <-chan struct{}, err error)
	close()
}

// runStandby runs active whenever this instance is the active one, until ctx ends or active
// fails for another reason than losing the active role.
func runStandby(ctx context.Context, c *config.Config, log *slog.Logger, m *metrics.Metrics, active func(context.Context) error) error {
	var el elector
	if c.Source.Type == "mysql" {
		el = &mysqlElector{log: log, m: m, locker: mysql.Locker{DSN: c.Source.DSN, Name: mysql.LockName(c.Source.MySQL.ServerID, c.Source.Tables)}}
	} else {
		el = &pgElector{log: log, m: m, probe: postgres.SlotProbe{DSN: c.Source.DSN, Slot: c.Source.Postgres.Slot}}
	}
	defer el.close()
	for first := true; ; first = false {
		release, lost, err := el.wait(ctx, first)
		m.SetStandby(false)
		if err != nil {
			if ctx.Err() != nil {
				return nil // stopped while standby
			}
			return fmt.Errorf("%s", Scrub(err.Error(), secretsOf(c)...))
		}
		t := &term{m: m}
		tctx, cancel := context.WithCancel(context.WithValue(ctx, termKey{}, t))
		t.cancel = cancel
		if lost != nil {
			go func() {
				select {
				case <-lost:
					t.lose("this instance no longer holds the pipeline's lock (its database connection was lost)")
				case <-tctx.Done():
				}
			}()
		}
		err = active(tctx)
		cancel()
		release()
		if ctx.Err() != nil || !t.lost.Load() {
			return err
		}
		m.SetUp(false)
		if err != nil {
			log.Warn("pipeline stopped with an error after the active role was lost", "err", err)
		}
		log.Warn("standby: this instance lost the active role; pipeline stopped, waiting to take over again", "why", t.why)
	}
}

// activeSource wraps a PostgreSQL source of the active instance: an Open that finds the slot
// taken by another process ends the term (back to standby), and the slot's status is copied to
// the metrics while it is open.
func activeSource(ctx context.Context, newSource func() source.Source) func() source.Source {
	t, _ := ctx.Value(termKey{}).(*term)
	if t == nil {
		return newSource
	}
	return func() source.Source {
		s := newSource()
		if _, ok := s.(*postgres.Source); !ok {
			return s
		}
		return &pgActive{Source: s, t: t}
	}
}

type pgActive struct {
	source.Source
	t    *term
	stop chan struct{}
	done chan struct{}
}

func (a *pgActive) Open(ctx context.Context, from source.Position) error {
	err := a.Source.Open(ctx, from)
	if errors.Is(err, postgres.ErrSlotActive) {
		a.t.lose("another process took the replication slot: " + err.Error())
		return err
	}
	if err == nil {
		a.stop, a.done = make(chan struct{}), make(chan struct{})
		go a.reportSlot()
	}
	return err
}

func (a *pgActive) Close() error {
	if a.stop != nil {
		close(a.stop)
		<-a.done
		a.stop = nil
	}
	return a.Source.Close()
}

// Progress forwards the source's view of WAL end and confirmed LSN (outboxd_source_lag_bytes).
func (a *pgActive) Progress() (pglogrepl.LSN, pglogrepl.LSN) {
	return a.Source.(*postgres.Source).Progress()
}

// SlotStatus forwards the slot watch's last result.
func (a *pgActive) SlotStatus() (postgres.SlotStatus, bool) {
	return a.Source.(*postgres.Source).SlotStatus()
}

func (a *pgActive) reportSlot() {
	defer close(a.done)
	tick := time.NewTicker(slotMetricsEvery)
	defer tick.Stop()
	for {
		if st, ok := a.SlotStatus(); ok {
			a.t.m.SetSlot(st.WALStatus, st.RetainedBytes)
		}
		select {
		case <-a.stop:
			return
		case <-tick.C:
		}
	}
}

// pgElector: active when no other process streams from the slot.
type pgElector struct {
	log   *slog.Logger
	m     *metrics.Metrics
	probe postgres.SlotProbe
}

func (e *pgElector) wait(ctx context.Context, first bool) (func(), <-chan struct{}, error) {
	var (
		waited   bool
		lastPID  int32
		lastWarn time.Time
	)
	slot := e.probe.Slot
	for {
		pid, err := e.probe.ActivePID(ctx)
		if ctx.Err() != nil {
			return nil, nil, ctx.Err()
		}
		switch {
		case err != nil && first && !waited:
			return func() {}, nil, nil // the pipeline reports the database error
		case err != nil:
			if time.Since(lastWarn) >= standbyWarnEvery {
				lastWarn = time.Now()
				e.log.Warn("standby: cannot check the replication slot; retrying", "slot", slot, "err", err)
			}
		case pid == 0:
			if waited || !first {
				e.log.Info("takeover: the replication slot is free; becoming active", "slot", slot, "previous_pid", lastPID)
			}
			return func() {}, nil, nil
		default:
			if !waited || pid != lastPID {
				e.log.Info("standby: the replication slot is active for another process (another outboxd?); waiting to take over",
					"slot", slot, "active_pid", pid)
			}
			waited, lastPID = true, pid
			e.m.SetStandby(true)
		}
		select {
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		case <-time.After(standbyPoll):
		}
	}
}

func (e *pgElector) close() { e.probe.Close() }

// mysqlElector: active while holding the pipeline's GET_LOCK.
type mysqlElector struct {
	log    *slog.Logger
	m      *metrics.Metrics
	locker mysql.Locker
}

func (e *mysqlElector) wait(ctx context.Context, first bool) (func(), <-chan struct{}, error) {
	var (
		waited     bool
		lastHolder int64
		lastWarn   time.Time
	)
	name := e.locker.Name
	for {
		lock, holder, err := e.locker.TryLock(ctx, lockWait)
		if ctx.Err() != nil {
			if lock != nil {
				lock.Release()
			}
			return nil, nil, ctx.Err()
		}
		switch {
		case err != nil && first && !waited:
			// Never run without the lock: fail as the pipeline would on an unreachable database.
			return nil, nil, fmt.Errorf("take the pipeline lock %s (hot standby) on the source database (source.dsn): %w", name, err)
		case err != nil:
			if time.Since(lastWarn) >= standbyWarnEvery {
				lastWarn = time.Now()
				e.log.Warn("standby: cannot reach the database to wait for the pipeline lock; retrying", "lock", name, "err", err)
			}
			select {
			case <-ctx.Done():
				return nil, nil, ctx.Err()
			case <-time.After(lockWait):
			}
		case lock != nil:
			if waited || !first {
				e.log.Info("takeover: got the pipeline lock; becoming active", "lock", name)
			}
			return lock.Release, lock.Lost(), nil
		default:
			if !waited || holder != lastHolder {
				e.log.Info("standby: the pipeline lock is held by another session (another outboxd?); waiting to take over",
					"lock", name, "holder_connection_id", holder)
			}
			waited, lastHolder = true, holder
			e.m.SetStandby(true)
		}
	}
}

func (e *mysqlElector) close() { e.locker.Close() }
