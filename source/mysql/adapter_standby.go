package mysql

// Hot standby of a MySQL/MariaDB pipeline (internal/app/standby.go runs the terms): the active
// instance holds GET_LOCK(LockName) on a dedicated connection (Locker). A standby waits for
// that lock. The holder checks every second that it still holds it; when it does not (its
// connection dropped, e.g. on a server restart), lost is closed: the app stops the pipeline
// (draining what is in flight and storing the position) and competes for the lock again.

import (
	"context"
	"fmt"
	"time"

	"github.com/outboxd/outboxd/source"
)

const (
	// LockWait is how long one GET_LOCK attempt of a standby waits server-side.
	LockWait = time.Second
	// standbyWarnEvery bounds how often a standby repeats that it cannot reach the database.
	standbyWarnEvery = 30 * time.Second
)

// WaitActive blocks until this instance holds the pipeline lock, calling waiting each time
// another session holds it. release gives the lock up; lost is closed when the lock goes away
// while held. first is true before the first term: a database that cannot be reached then is
// an error (never run without the lock); later it is retried, with a warning at most every
// 30s. It returns ctx's error when ctx ends.
func (a *Adapter) WaitActive(ctx context.Context, first bool, waiting func()) (release func(), lost <-chan struct{}, err error) {
	var (
		waited     bool
		lastHolder int64
		lastWarn   time.Time
	)
	name := a.locker.Name
	for {
		lock, holder, err := a.locker.TryLock(ctx, LockWait)
		if ctx.Err() != nil {
			if lock != nil {
				lock.Release()
			}
			return nil, nil, ctx.Err()
		}
		switch {
		case err != nil && first && !waited:
			return nil, nil, fmt.Errorf("take the pipeline lock %s (hot standby) on the source database (source.dsn): %w", name, err)
		case err != nil:
			if time.Since(lastWarn) >= standbyWarnEvery {
				lastWarn = time.Now()
				a.log.Warn("standby: cannot reach the database to wait for the pipeline lock; retrying", "lock", name, "err", err)
			}
			select {
			case <-ctx.Done():
				return nil, nil, ctx.Err()
			case <-time.After(LockWait):
			}
		case lock != nil:
			if waited || !first {
				a.log.Info("takeover: got the pipeline lock; becoming active", "lock", name)
			}
			return lock.Release, lock.Lost(), nil
		default:
			if !waited || holder != lastHolder {
				a.log.Info("standby: the pipeline lock is held by another session (another outboxd?); waiting to take over",
					"lock", name, "holder_connection_id", holder)
			}
			waited, lastHolder = true, holder
			waiting()
		}
	}
}

// CloseStandby closes the connection WaitActive keeps between attempts.
func (a *Adapter) CloseStandby() { a.locker.Close() }

// Active returns s: a MySQL source of the active instance needs no wrapper (losing the lock is
// WaitActive's lost channel).
func (a *Adapter) Active(s source.Source, _ func(why string), _ func(walStatus string, retainedBytes int64)) source.Source {
	return s
}
