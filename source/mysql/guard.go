package mysql

import (
	"bytes"
	"fmt"
	"strings"

	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/outboxd/outboxd/source"
)

// This file holds the assembler's guards: binlog shapes in which outbox rows exist but cannot
// be read from row events. Each stops outboxd (Next returns the error) before any position past
// the transaction concerned is handed out:
//
//   - a data change logged as a statement (binlog_format STATEMENT or MIXED, globally or in one
//     session) that names an outbox table, or a LOAD DATA logged as a statement that mentions one;
//   - an insert into an outbox table with a partial column image (binlog_row_image MINIMAL or
//     NOBLOB in the writing session): the missing columns would read as NULL;
//   - an XA transaction prepared with outbox rows (see xaPrepare for why they are not held
//     until XA COMMIT).

// stopError is a binlog shape that outboxd cannot read without losing rows: final, never
// retried (it wraps source.ErrPositionLost, which the pipeline turns into exit 1; a retry would
// read the same events again). Its text is only the cause and the fix.
type stopError struct{ err error }

func (e *stopError) Error() string   { return e.err.Error() }
func (e *stopError) Unwrap() []error { return []error{e.err, source.ErrPositionLost} }

func stop(err error) error { return &stopError{err} }

// failTx marks the current transaction as one that must stop outboxd; the error is returned at
// the transaction's end, when the position just after it is known (for the operator's fix).
func (a *assembler) failTx(err error) {
	if a.stopErr == nil {
		a.stopErr = err
	}
}

// fixStatementFormat is the operator's way out of a statement-format write to an outbox table.
const fixStatementFormat = "set binlog_format=ROW globally (SET GLOBAL binlog_format=ROW and binlog_format=ROW in my.cnf) " +
	"AND in the application's sessions (they keep the format they connected with, or one they SET SESSION: reconnect them, " +
	"and remove any SET binlog_format from the application); then re-publish the outbox rows of this transaction from the table " +
	"and move the stored position past it with `outboxd offsets set --position <the position after it>`"

// checkStatement stops on a Query event whose statement changes data in an outbox table.
func (a *assembler) checkStatement(h *replication.EventHeader, schema, q []byte) error {
	if !a.mentionsCaptured(q) {
		if !a.warnedStmt && isDMLVerb(q) {
			// Rows a trigger of that table writes into an outbox table are not in the binlog
			// either, and nothing in this statement names them.
			a.warnedStmt = true
			a.log.Warn("a data change was logged as a statement (binlog_format STATEMENT or MIXED in some session): "+
				"outbox rows written by triggers of that statement would be missing from the binlog; set binlog_format=ROW for every session",
				"file", a.file, "log_pos", h.LogPos, "query", truncate(string(q), 200))
		}
		return nil
	}
	k, ok := dmlTarget(string(schema), string(q), func(db, table string) bool {
		_, ok := a.name([]byte(db), []byte(table))
		return ok
	})
	if !ok {
		return nil
	}
	name, _ := a.name([]byte(k.DB), []byte(k.Table))
	err := fmt.Errorf("a data change to outbox table %s was logged as a statement, not as row events "+
		"(binlog_format is STATEMENT or MIXED for the session that ran it), so its rows cannot be read from the binlog: %q; fix: %s",
		name, truncate(string(q), 300), fixStatementFormat)
	return a.failStatement(h, err)
}

// failStatement marks the transaction of the statement event h as one that must stop outboxd.
// A statement outside a transaction (non-transactional table, autocommit) is its own
// transaction: it ends here, with the error.
func (a *assembler) failStatement(h *replication.EventHeader, err error) error {
	a.failTx(err)
	if !a.inTx {
		a.inTx = true
		return a.commit(h)
	}
	return nil
}

// mentionsCaptured is a cheap pre-filter: does q contain a captured table's name at all
// (case-insensitively)?
func (a *assembler) mentionsCaptured(q []byte) bool {
	for _, n := range a.lowNames {
		if containsFold(q, n) {
			return true
		}
	}
	return false
}

func containsFold(b []byte, lowNeedle string) bool {
	if len(lowNeedle) == 0 || len(b) < len(lowNeedle) {
		return false
	}
	first := lowNeedle[0]
	for i := 0; i+len(lowNeedle) <= len(b); i++ {
		c := b[i]
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c == first && strings.EqualFold(string(b[i:i+len(lowNeedle)]), lowNeedle) {
			return true
		}
	}
	return false
}

// loadQuery stops on a LOAD DATA logged as a statement (Execute_load_query event) that mentions
// an outbox table. go-mysql does not decode the statement's text, so the raw event is searched:
// a false positive is a loud stop, never a loss.
func (a *assembler) loadQuery(h *replication.EventHeader, raw []byte) error {
	if !a.mentionsCaptured(raw) {
		return nil
	}
	err := fmt.Errorf("a LOAD DATA that mentions an outbox table (%s) was logged as a statement, not as row events "+
		"(binlog_format is STATEMENT or MIXED for the session that ran it), so its rows cannot be read from the binlog; fix: %s",
		strings.Join(a.lowNames, ", "), fixStatementFormat)
	return a.failStatement(h, err)
}

// checkImage verifies that an insert's rows event carries every column of the table: a partial
// image (binlog_row_image MINIMAL or NOBLOB in the writing session) omits columns left to their
// DEFAULT, which would read as NULL.
func checkImage(name string, e *replication.RowsEvent) error {
	n := int(e.ColumnCount)
	if e.Table != nil && uint64(n) != e.Table.ColumnCount {
		return fmt.Errorf("an insert into outbox table %s has %d columns but its table map %d: the binlog is inconsistent; report it (mysqlbinlog around this position), "+
			"then re-publish this transaction's outbox rows from the table and move the stored position past it with `outboxd offsets set --position <the position after it>`", name, n, e.Table.ColumnCount)
	}
	if missing := missingColumns(e.ColumnBitmap1, n); len(missing) > 0 {
		cols := make([]string, 0, len(missing))
		for _, i := range missing {
			if e.Table != nil && i < len(e.Table.ColumnName) {
				cols = append(cols, string(e.Table.ColumnName[i]))
			} else {
				cols = append(cols, fmt.Sprintf("#%d", i+1))
			}
		}
		return fmt.Errorf("an insert into outbox table %s was logged with a partial row image (column(s) %s missing: "+
			"binlog_row_image is MINIMAL or NOBLOB for the session that wrote it), so those columns cannot be read; "+
			"fix: SET GLOBAL binlog_row_image=FULL (and in my.cnf) and make sure the application's sessions do not SET binlog_row_image "+
			"(reconnect them), then re-publish the outbox rows of this transaction from the table and move the stored position "+
			"past it with `outboxd offsets set --position <the position after it>`", name, strings.Join(cols, ", "))
	}
	return nil
}

// missingColumns returns the indexes of the first n columns whose bit is not set in bitmap.
func missingColumns(bitmap []byte, n int) []int {
	var out []int
	for i := 0; i < n; i++ {
		if i>>3 >= len(bitmap) || bitmap[i>>3]&(1<<(uint(i)&7)) == 0 {
			out = append(out, i)
		}
	}
	return out
}

var (
	qXAStart    = []byte("XA START")
	qXABegin    = []byte("XA BEGIN")
	qXACommit   = []byte("XA COMMIT")
	qXARollback = []byte("XA ROLLBACK")
	qOnePhase   = []byte("ONE PHASE")
)

func hasPrefixFold(b, prefix []byte) bool {
	return len(b) >= len(prefix) && bytes.EqualFold(b[:len(prefix)], prefix)
}

// xaQuery handles the XA statements of the binlog. MariaDB logs a prepared XA transaction as a
// group of its own (GTID, rows, "XA END", XA_PREPARE_LOG_EVENT) and its outcome later as
// another ("XA COMMIT X'..'" or "XA ROLLBACK X'..'" after a standalone GTID); MySQL starts the
// first group with "XA START". A one-phase commit ends the transaction it is in.
func (a *assembler) xaQuery(h *replication.EventHeader, q []byte) error {
	switch {
	case hasPrefixFold(q, qXAStart), hasPrefixFold(q, qXABegin):
		if !a.inTx {
			return a.begin(h)
		}
		return nil
	case hasPrefixFold(q, qXACommit):
		if a.inTx && !bytes.Contains(bytes.ToUpper(q), qOnePhase) && a.txRows+len(a.rows) > 0 {
			return stop(fmt.Errorf("binlog %s:%d: %q inside a transaction with outbox rows%s: outboxd cannot tell which rows it commits; stopping before any position past it is stored. "+
				"Report this binlog sequence (mysqlbinlog --start-position around %d); to go on, re-publish the transaction's outbox rows from the table and "+
				"move the stored position past it with `outboxd offsets set --position <the position after it>`", a.file, h.LogPos, q, a.chunkNote(), h.LogPos))
		}
		return a.commit(h) // one phase: this transaction; else the outcome group of a prepared one
	case hasPrefixFold(q, qXARollback):
		if a.txRows > 0 {
			// Unlike a plain ROLLBACK (non-transactional tables keep their rows), an XA ROLLBACK
			// undoes the rows earlier chunks published: stop, loudly.
			return stop(fmt.Errorf("binlog %s:%d: an XA transaction was rolled back (%q)%s; the rolled-back rows do not exist in the table. "+
				"outboxd stops before any position past it is stored; to go on, remove those rows' events downstream if they matter (under exactly_once none is visible) and "+
				"move the stored position past the transaction with `outboxd offsets set --position <the position after it>`", a.file, h.LogPos, q, a.chunkNote()))
		}
		if len(a.rows) > 0 {
			a.log.Warn("binlog XA transaction rolled back; its outbox rows are not published", "rows", len(a.rows), "file", a.file, "log_pos", h.LogPos)
		}
		a.rows, a.rowBytes = nil, 0
		return a.commit(h)
	}
	return nil // XA END, XA PREPARE (MySQL logs the prepare as its own event)
}

// xaPrepare ends the group of an XA transaction prepared but not yet committed.
//
// Its rows would be published at XA COMMIT, which comes later as a group that carries no rows,
// after any number of other transactions. That cannot be made safe with one forward-moving
// position: storing the position of any later transaction before the XA COMMIT is delivered
// skips the prepared rows on a restart (the binlog does not log them again), and holding the
// position back breaks the source contract that a Tx's position is its own end (exactly-once
// mode stores that position in the same Kafka transaction as the records, so a restart would
// publish the transactions in between again), stalls idle progress for as long as the branch
// stays prepared, and lets binlog expiry purge the prepared rows under the held position. So a
// prepared XA transaction with outbox rows stops outboxd, loudly, before its position is
// stored; one without outbox rows is a transaction like any other.
func (a *assembler) xaPrepare(h *replication.EventHeader) error {
	if n := a.txRows + len(a.rows); n > 0 {
		a.failTx(fmt.Errorf("an XA transaction was prepared with %d outbox row(s) (XA START ... XA PREPARE); outboxd does not publish rows of "+
			"XA transactions, which the binlog splits into a prepare and a later XA COMMIT (holding them safely across a restart is not possible "+
			"with one forward-moving position); fix: do not write outbox rows inside XA transactions; for this one, once it is committed "+
			"(XA COMMIT), re-publish its outbox rows from the table and move the stored position past it with "+
			"`outboxd offsets set --position <the position after it>`", n))
	}
	a.rows, a.rowBytes = nil, 0
	return a.commit(h)
}

// isDMLVerb reports whether q starts with a data-changing statement's keyword.
func isDMLVerb(q []byte) bool {
	q = bytes.TrimLeft(q, " \t\r\n(")
	end := 0
	for end < len(q) && end < 8 && isWordByte(q[end]) {
		end++
	}
	w := string(q[:end])
	for _, v := range []string{"INSERT", "REPLACE", "UPDATE", "DELETE", "LOAD"} {
		if strings.EqualFold(w, v) {
			return true
		}
	}
	return false
}
