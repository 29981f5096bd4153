package postgres

// Hot standby support. A logical slot streams to one walsender at a time: the instance whose
// walsender holds the slot is the active one, and a second outboxd with the same slot waits
// (adapter_standby.go) until pg_replication_slots shows the slot inactive, then opens it from the
// stored position. Open reports a slot taken by another process as ErrSlotActive, so that a
// race lost at START_REPLICATION sends the loser back to standby instead of failing.

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
)

// ErrSlotActive is wrapped by Open's error when the slot is streaming to another process
// (SQLSTATE 55006 "replication slot ... is active for PID n", or 42710 when another process
// created it concurrently).
var ErrSlotActive = errors.New("the replication slot is active for another process")

// slotActiveRetry is how long Open retries START_REPLICATION on 55006 before it reports
// ErrSlotActive: long enough for this process's own previous walsender (a reconnect after a
// network error) to exit, short enough for a hot standby to get out of the way quickly.
const slotActiveRetry = 2 * time.Second

// SlotProbe tells which process streams from a slot. It keeps one normal connection between
// calls (reconnecting after an error). Not safe for concurrent use.
type SlotProbe struct {
	DSN  string
	Slot string

	conn *pgx.Conn
}

// ActivePID returns the PID of the backend streaming from the slot, or 0 when the slot is
// inactive or does not exist.
func (p *SlotProbe) ActivePID(ctx context.Context) (int32, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if p.conn == nil {
		c, err := pgx.Connect(ctx, p.DSN)
		if err != nil {
			return 0, err
		}
		p.conn = c
	}
	var pid *int32
	err := p.conn.QueryRow(ctx, `SELECT active_pid FROM pg_replication_slots WHERE slot_name = $1`, p.Slot).Scan(&pid)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		p.Close()
		return 0, err
	}
	if pid == nil {
		return 0, nil
	}
	return *pid, nil
}

// Close closes the probe's connection.
func (p *SlotProbe) Close() {
	if p.conn != nil {
		p.conn.Close(context.Background())
		p.conn = nil
	}
}
