package mysql

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/outboxd/outboxd/internal/testenv"
	th "github.com/outboxd/outboxd/internal/testenv/harness"
)

func TestLockName(t *testing.T) {
	if n := LockName(4242, []string{"app.outbox"}); n != "outboxd:4242:app.outbox" {
		t.Fatalf("got %q", n)
	}
	long := LockName(4242, []string{"application_database.outbox_events", "application_database.more_outbox_events"})
	if len(long) > maxLockName || !strings.HasPrefix(long, "outboxd:4242:") {
		t.Fatalf("got %q (%d chars)", long, len(long))
	}
	if long == LockName(4242, []string{"application_database.outbox_events", "application_database.other_outbox_events"}) {
		t.Fatal("different tables, same lock name")
	}
	if sqlString(`a'b\c`) != `'a\'b\\c'` {
		t.Fatalf("got %s", sqlString(`a'b\c`))
	}
}

// TestPipelineLock: one holder at a time; the waiter learns the holder's connection id; a
// released lock goes to the waiter within its wait; a holder whose session is killed sees Lost.
func TestPipelineLock(t *testing.T) {
	m := testenv.NewMariaDB(t, testenv.MariaDBOptions{RowMetadata: true})
	ctx := context.Background()
	name := LockName(7, []string{"app.outbox"})
	a, b := &Locker{DSN: m.DSN("app"), Name: name}, &Locker{DSN: m.DSN("app"), Name: name}
	defer a.Close()
	defer b.Close()
	la, _, err := a.TryLock(ctx, 0)
	if err != nil || la == nil {
		t.Fatalf("first TryLock: %v %v", la, err)
	}
	lb, holder, err := b.TryLock(ctx, 0)
	if err != nil || lb != nil || holder == 0 {
		t.Fatalf("second TryLock while held: lock %v holder %d err %v", lb, holder, err)
	}
	// a releases its lock once b's session waits for it in GET_LOCK (the server shows it in
	// state "User lock"), so the lock is handed over within the wait.
	watch := db(t, m)
	go func() {
		th.Until(10*time.Second, 10*time.Millisecond, func() error {
			r, err := watch.Execute(`SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE STATE = 'User lock' AND INFO LIKE 'SELECT GET_LOCK(%'`)
			if err != nil {
				return err
			}
			if n, _ := r.GetInt(0, 0); n == 0 {
				return errors.New("no session waits in GET_LOCK")
			}
			return nil
		})
		la.Release()
	}()
	start := time.Now()
	lb, _, err = b.TryLock(ctx, 3*time.Second)
	if err != nil || lb == nil {
		t.Fatalf("TryLock after release: %v %v", lb, err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("took %v to get a released lock", d)
	}
	select {
	case <-la.Lost():
		t.Fatal("a released lock reports Lost")
	default:
	}
	// Kill the holder's session: Lost within a few seconds.
	rows, err := m.Query("", fmt.Sprintf("SELECT IS_USED_LOCK(%s)", sqlString(name)))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Exec(ctx, "", "KILL "+rows[0][0]); err != nil {
		t.Fatal(err)
	}
	select {
	case <-lb.Lost():
	case <-time.After(5 * time.Second):
		t.Fatal("killed session: Lost not closed")
	}
	lb.Release()
	lc, _, err := a.TryLock(ctx, 0)
	if err != nil || lc == nil {
		t.Fatalf("TryLock after the holder was killed: %v %v", lc, err)
	}
	lc.Release()
}
