package mysql

// Hot standby support. MySQL keeps no server-side cursor for a binlog reader, and two readers
// with one server_id evict each other, so the active outboxd of a pipeline holds a named user
// lock, GET_LOCK('outboxd:<server_id>:<tables>', ...), on a dedicated connection for as long as
// it runs. A second instance with the same config waits for that lock (adapter_standby.go): when the
// active one dies its connection closes, the server releases the lock, and the standby takes
// over from the stored position. The active instance checks every second that it still holds
// the lock (its connection may drop, e.g. on a server restart); when it does not, Lost is closed
// and the app stops the pipeline and competes for the lock again.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
)

// maxLockName is the longest user-lock name MySQL accepts.
const maxLockName = 64

// LockName is the user-lock name of the pipeline reading tables as server_id:
// "outboxd:<server_id>:<tables, comma-separated>", or, when that exceeds MySQL's 64 characters,
// "outboxd:<server_id>:" and a hash of the tables.
func LockName(serverID uint32, tables []string) string {
	n := fmt.Sprintf("outboxd:%d:%s", serverID, strings.Join(tables, ","))
	if len(n) <= maxLockName {
		return n
	}
	h := sha256.Sum256([]byte(strings.Join(tables, ",")))
	return fmt.Sprintf("outboxd:%d:%s", serverID, hex.EncodeToString(h[:])[:32])
}

// Locker competes for a pipeline lock on one connection (kept between attempts, reconnected
// after an error). Not safe for concurrent use.
type Locker struct {
	DSN  string // source.dsn
	Name string // LockName

	conn *client.Conn
}

// TryLock waits up to wait (whole seconds, at least 0) for the lock. On success the returned
// Lock owns the Locker's connection. Otherwise lock is nil and holder is the connection id of
// the session holding the lock (0 if unknown).
func (l *Locker) TryLock(ctx context.Context, wait time.Duration) (lock *Lock, holder int64, err error) {
	if l.conn == nil {
		d, err := parseDSN(l.DSN)
		if err != nil {
			return nil, 0, err
		}
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		c, err := connect(cctx, d)
		cancel()
		if err != nil {
			return nil, 0, err
		}
		c.ReadTimeout = wait + 10*time.Second
		c.WriteTimeout = 10 * time.Second
		// The holder talks to the server every second: a session silent for lockIdleTimeout
		// belongs to a dead or cut-off instance, and the server releases its lock.
		if _, err := query(c, fmt.Sprintf("SET SESSION wait_timeout = %d", int(lockIdleTimeout/time.Second))); err != nil {
			c.Close()
			return nil, 0, fmt.Errorf("set wait_timeout on the lock connection: %w", err)
		}
		l.conn = c
	}
	rows, err := query(l.conn, fmt.Sprintf("SELECT GET_LOCK(%s, %d), IS_USED_LOCK(%s)", sqlString(l.Name), int(wait/time.Second), sqlString(l.Name)))
	if err != nil {
		l.Close()
		return nil, 0, fmt.Errorf("GET_LOCK(%s): %w", sqlString(l.Name), err)
	}
	if len(rows) == 1 && rows[0][0] == "1" {
		k := &Lock{name: l.Name, conn: l.conn, lost: make(chan struct{}), stop: make(chan struct{})}
		l.conn = nil
		k.wg.Add(1)
		go k.watch()
		return k, 0, nil
	}
	if len(rows) == 1 {
		holder, _ = strconv.ParseInt(rows[0][1], 10, 64)
	}
	return nil, holder, nil
}

// Close closes the Locker's connection (a lock already returned is not affected).
func (l *Locker) Close() {
	if l.conn != nil {
		l.conn.Close()
		l.conn = nil
	}
}

// Lock is a held pipeline lock.
type Lock struct {
	name string
	conn *client.Conn
	lost chan struct{} // closed when the lock is no longer held
	stop chan struct{}
	wg   sync.WaitGroup
	once sync.Once
}

const (
	// lockCheckEvery is how often the holder checks it still holds the lock.
	lockCheckEvery = time.Second
	// lockIdleTimeout is the lock connection's wait_timeout.
	lockIdleTimeout = 15 * time.Second
)

// Lost is closed when the lock is no longer held (connection lost, lock released by someone
// with the rights to kill the session).
func (k *Lock) Lost() <-chan struct{} { return k.lost }

// watch checks every lockCheckEvery that this session still holds the lock.
func (k *Lock) watch() {
	defer k.wg.Done()
	t := time.NewTicker(lockCheckEvery)
	defer t.Stop()
	for {
		select {
		case <-k.stop:
			return
		case <-t.C:
		}
		rows, err := query(k.conn, fmt.Sprintf("SELECT IS_USED_LOCK(%s) = CONNECTION_ID()", sqlString(k.name)))
		if err != nil || len(rows) != 1 || rows[0][0] != "1" {
			close(k.lost)
			return
		}
	}
}

// Release gives the lock up and closes its connection. Idempotent.
func (k *Lock) Release() {
	k.once.Do(func() {
		close(k.stop)
		k.wg.Wait()
		select {
		case <-k.lost:
		default:
			_, _ = query(k.conn, fmt.Sprintf("SELECT RELEASE_LOCK(%s)", sqlString(k.name)))
		}
		k.conn.Close()
	})
}

// sqlString quotes s as a MySQL string literal (backslash escapes on, the server default).
func sqlString(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `'`, `\'`, "\x00", `\0`)
	return "'" + r.Replace(s) + "'"
}
