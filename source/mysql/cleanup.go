package mysql

// outbox.cleanup's SQL (internal/app's cleaner): DELETE delivered outbox rows by id on one
// normal connection opened on first use and kept (reopened after a failure), and the table's
// row estimate. Which ids are delivered is decided upstream (internal/cleanup.Tracker, by the
// acked records' ids); this file only deletes the ids it is given.
//
// The ids arrive in the form the binlog stream renders them (decode.go), so each is turned back
// into a parameter of the column's own type before `DELETE FROM db.t WHERE id IN (?, …)` (a
// prepared statement; the primary key's index is used): integers as numbers, BINARY(16) from
// its uuid text back to the 16 bytes, other binary types as the raw bytes, everything else
// (CHAR, VARCHAR, MariaDB UUID, …) as text.
//
// Deleted rows are not published: the source captures inserts only (DELETE rows events are
// skipped).

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
)

// myCleaner is the Adapter's cleanup connection and what it read of the catalog.
type myCleaner struct {
	c     *client.Conn
	s     *Source // the parsed DSN and tables
	idCol map[string]idColumn
}

// idColumn is the catalog's view of a table's id column.
type idColumn struct {
	dataType, columnType string // information_schema.COLUMNS DATA_TYPE, COLUMN_TYPE (lower case)
	unsigned             bool
}

func (a *Adapter) cleanSource() (*Source, error) {
	if a.clean.s == nil {
		s := New(a.Config(), a.log)
		if s.cfgErr != nil {
			return nil, s.cfgErr
		}
		a.clean.s = s
	}
	return a.clean.s, nil
}

func (a *Adapter) cleanConn(ctx context.Context) (*client.Conn, *Source, error) {
	s, err := a.cleanSource()
	if err != nil {
		return nil, nil, err
	}
	if a.clean.c != nil {
		return a.clean.c, s, nil
	}
	c, err := connect(ctx, s.dsn)
	if err != nil {
		return nil, nil, fmt.Errorf("outbox.cleanup: %w", err)
	}
	// MySQL 8 caches information_schema.TABLES statistics for a day by default: read them fresh
	// (MariaDB has no such variable and no cache).
	_, _ = c.Execute("SET SESSION information_schema_stats_expiry = 0")
	a.clean.c = c
	return c, s, nil
}

// cleanFailed drops the connection after a failure (the next call opens a new one).
func (a *Adapter) cleanFailed() {
	if a.clean.c != nil {
		a.clean.c.Close()
		a.clean.c = nil
	}
}

// withCtx runs fn with the connection closed if ctx ends first (go-mysql's client has no
// context): the call then fails and the connection is dropped.
func (a *Adapter) withCtx(ctx context.Context, c *client.Conn, fn func() error) error {
	stop := context.AfterFunc(ctx, func() { c.Close() })
	err := fn()
	if !stop() || err != nil {
		a.cleanFailed()
		if ctx.Err() != nil {
			return fmt.Errorf("%w (%v)", ctx.Err(), err)
		}
	}
	return err
}

// DeleteOutboxRows deletes the rows of table whose id is one of ids, in one statement
// (autocommit). retain must be 0: MySQL keeps no commit time per row, and outboxd holds the ids
// back by their transaction's commit time itself (internal/cleanup).
func (a *Adapter) DeleteOutboxRows(ctx context.Context, table string, ids [][]byte, retain time.Duration) (int64, error) {
	if retain > 0 {
		return 0, errors.New("outbox.cleanup: MySQL has no per-row commit time: hold ids back by their transaction's commit time instead (internal/cleanup)")
	}
	if len(ids) == 0 {
		return 0, nil
	}
	c, s, err := a.cleanConn(ctx)
	if err != nil {
		return 0, err
	}
	key, err := cleanTableKey(s, table)
	if err != nil {
		return 0, err
	}
	if len(a.set.Columns) == 0 {
		return 0, errors.New("outbox.cleanup: no outbox columns configured (the id column comes first)")
	}
	col := a.set.Columns[0] // internal/app puts outbox.columns.id first
	var n int64
	err = a.withCtx(ctx, c, func() error {
		ic, err := a.cleanIDColumn(c, key, col)
		if err != nil {
			return err
		}
		args := make([]any, 0, len(ids))
		for _, id := range ids {
			p, err := ic.param(id)
			if err != nil { // cannot match a row: left in the table, not retried forever
				a.log.Warn("outbox.cleanup: an id cannot be turned back into the column's type; its row stays in the table", "table", table, "id", string(id), "err", err)
				continue
			}
			args = append(args, p)
		}
		if len(args) == 0 {
			return nil
		}
		sql := "DELETE FROM " + sqlIdent(key.DB) + "." + sqlIdent(key.Table) + " WHERE " + sqlIdent(col) +
			" IN (?" + strings.Repeat(", ?", len(args)-1) + ")"
		r, err := c.Execute(sql, args...)
		if err != nil {
			return fmt.Errorf("outbox.cleanup: delete %d delivered rows from %s: %w (retried next cycle)", len(ids), table, cause(err))
		}
		n = int64(r.AffectedRows)
		r.Close()
		return nil
	})
	return n, err
}

func cleanTableKey(s *Source, table string) (tableKey, error) {
	for k, n := range s.captured {
		if n == table {
			return k, nil
		}
	}
	return tableKey{}, fmt.Errorf("outbox.cleanup: table %q is not in source.tables: only outbox tables are cleaned", table)
}

func (a *Adapter) cleanIDColumn(c *client.Conn, key tableKey, col string) (idColumn, error) {
	if ic, ok := a.clean.idCol[key.String()]; ok {
		return ic, nil
	}
	rows, err := query(c, `SELECT LOWER(DATA_TYPE), LOWER(COLUMN_TYPE) FROM information_schema.COLUMNS
WHERE LOWER(TABLE_SCHEMA) = LOWER(?) AND LOWER(TABLE_NAME) = LOWER(?) AND LOWER(COLUMN_NAME) = LOWER(?)`, key.DB, key.Table, col)
	if err != nil {
		return idColumn{}, fmt.Errorf("outbox.cleanup: read the type of %s.%s from information_schema: %w", key, col, err)
	}
	if len(rows) == 0 {
		return idColumn{}, fmt.Errorf("outbox.cleanup: table %s has no column %q (outbox.columns.id)", key, col)
	}
	ic := idColumn{dataType: rows[0][0], columnType: rows[0][1], unsigned: strings.Contains(rows[0][1], "unsigned")}
	if a.clean.idCol == nil {
		a.clean.idCol = map[string]idColumn{}
	}
	a.clean.idCol[key.String()] = ic
	return ic, nil
}

// param turns an id as the stream renders it into a parameter of the column's type.
func (ic idColumn) param(id []byte) (any, error) {
	switch ic.dataType {
	case "tinyint", "smallint", "mediumint", "int", "integer", "bigint":
		if ic.unsigned {
			return strconv.ParseUint(string(id), 10, 64)
		}
		return strconv.ParseInt(string(id), 10, 64)
	case "binary":
		if ic.columnType == "binary(16)" { // rendered as uuid text (decode.go)
			b, err := hex.DecodeString(strings.ReplaceAll(string(id), "-", ""))
			if err != nil || len(b) != 16 {
				return nil, fmt.Errorf("a BINARY(16) id is rendered as uuid text: %q is not one", id)
			}
			return b, nil
		}
		return id, nil
	case "varbinary", "tinyblob", "blob", "mediumblob", "longblob":
		return id, nil
	}
	return string(id), nil
}

// OutboxRowEstimate is information_schema.TABLES.TABLE_ROWS of table: InnoDB's estimate.
func (a *Adapter) OutboxRowEstimate(ctx context.Context, table string) (int64, error) {
	c, s, err := a.cleanConn(ctx)
	if err != nil {
		return 0, err
	}
	key, err := cleanTableKey(s, table)
	if err != nil {
		return 0, err
	}
	var n int64
	err = a.withCtx(ctx, c, func() error {
		rows, err := query(c, "SELECT IFNULL(TABLE_ROWS, -1) FROM information_schema.TABLES WHERE LOWER(TABLE_SCHEMA) = LOWER(?) AND LOWER(TABLE_NAME) = LOWER(?)", key.DB, key.Table)
		if err != nil {
			return fmt.Errorf("outbox.cleanup: read the row estimate of %s: %w", table, err)
		}
		if len(rows) == 0 {
			return fmt.Errorf("outbox.cleanup: table %s does not exist", table)
		}
		n, err = strconv.ParseInt(rows[0][0], 10, 64)
		return err
	})
	return n, err
}

// CloseCleaner closes the cleanup connection.
func (a *Adapter) CloseCleaner() { a.cleanFailed() }
