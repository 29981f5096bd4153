package mysql

import (
	"bytes"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
	"github.com/google/uuid"

	"github.com/outboxd/outboxd/source"
)

// assembler turns the binlog event stream into transactions, in commit order, each with the
// position just after it, handed out in chunks (source.Tx) of bounded size. It does no I/O of
// its own (the schema tracker may read information_schema when a DDL cannot be followed).
//
// Chunks (capRows, capBytes; see Config.ChunkRows): a rows event whose rows would push the
// transaction's pending rows past a cap first queues the pending rows as a chunk with More set;
// the event's rows start the next chunk. The granularity is one rows event (the server cuts
// those at binlog_row_event_max_size, 8 KiB by default), so a chunk exceeds a cap only when one
// event alone does. The transaction's end queues its last chunk with the position, also without
// rows when earlier chunks went out. A reconnect inside a chunked transaction reads it again
// from its start and skips the rows already handed out (skipRows).
//
// Transaction boundaries: a transaction starts at BEGIN (a Query event; MySQL) or at a MariaDB
// GTID event without the standalone flag, and ends at its XID event, or at a COMMIT Query
// event (non-transactional engines), or at ROLLBACK (logged when a transaction that touched a
// non-transactional table rolls back: its rows are dropped). A Query event outside a
// transaction (DDL) is a transaction of its own. The position advances only at those ends,
// never inside a transaction.
//
// Idle progress: a transaction without outbox rows produces a Tx without rows only when at
// least idleEvery has passed since the last Tx handed out; a heartbeat produces one whenever
// the position moved since the last Tx. So a busy server with no outbox traffic yields at most
// one empty Tx per idleEvery, and an idle one one per heartbeat.
type assembler struct {
	kind      posKind
	captured  map[string]map[string]string // db -> table -> name as configured
	tracker   *schemaTracker               // column names when TableMapEvents carry none
	mariadb   bool
	idleEvery time.Duration
	now       func() time.Time
	log       *slog.Logger

	// Set by Open from the server (see preflight.go).
	fold       bool              // lower_case_table_names != 0: captured keys are lower case, names compare folded
	collations map[uint64]string // the server's collation id -> charset name; nil: static table
	lowNames   []string          // lower-case captured table names, to pre-filter statements cheaply

	// State after the last transaction end seen (handed out or not).
	file      string // current binlog file
	pos       uint32 // file mode: offset just after the last transaction
	maria     mariaGTIDs
	mysql     *gomysql.MysqlGTIDSet
	committed source.Position
	emitted   source.Position // position of the last Tx handed out (or the start position)
	lastEmit  time.Time

	// The transaction being read.
	inTx       bool
	mariaGTID  gomysql.MariadbGTID
	hasMaria   bool
	sid        uuid.UUID
	tag        gomysql.Tag
	gno        int64
	hasMySQL   bool
	commitTime time.Time
	rows       []source.Row // the pending chunk's rows (not yet handed out)
	rowBytes   int          // their size, source.RowBytes summed
	txRows     int          // rows of this transaction handed out in earlier chunks
	skipRows   int          // rows to skip when this transaction is read again after a reconnect
	stopErr    error        // this transaction must stop outboxd: returned at its end (see failTx)

	warnedStmt bool // a statement-format DML on another table was logged once

	capRows, capBytes int // chunk caps (0 or less: none)

	descs  map[string]*tableDesc // by configured table name
	ready  []source.Tx           // finished transactions: ready[head:]
	head   int
	sawFDE bool

	// Chunks the rows and values of small rows events are carved from (see carve).
	rowChunk   []source.Row
	valChunk   []source.Value
	chunkBytes int  // size of the rows events carved from the current chunks
	bigEvent   bool // the last rows event carve saw was too big to be carved
}

func newAssembler(start position, captured map[tableKey]string, tracker *schemaTracker, mariadb bool, idleEvery time.Duration, log *slog.Logger) *assembler {
	a := &assembler{kind: start.kind, captured: map[string]map[string]string{}, tracker: tracker, mariadb: mariadb,
		idleEvery: idleEvery, now: time.Now, log: log, descs: map[string]*tableDesc{},
		file: start.file, pos: start.pos, maria: start.maria, mysql: start.mysql}
	for k, name := range captured {
		if a.captured[k.DB] == nil {
			a.captured[k.DB] = map[string]string{}
		}
		a.captured[k.DB][k.Table] = name
		a.lowNames = append(a.lowNames, strings.ToLower(k.Table))
	}
	if a.kind == kindMySQLGTID && a.mysql == nil {
		s, _ := gomysql.ParseMysqlGTIDSet("")
		a.mysql = s.(*gomysql.MysqlGTIDSet)
	}
	a.committed = source.Position(start.String())
	a.emitted = a.committed
	a.lastEmit = a.now()
	return a
}

// resume returns the position to reconnect from: the end of the last transaction seen.
func (a *assembler) resume() position {
	p := position{kind: a.kind, file: a.file, pos: a.pos, maria: slices.Clone(a.maria), mysql: a.mysql}
	if a.kind == kindMySQLGTID {
		p.mysql = a.mysql.Clone().(*gomysql.MysqlGTIDSet)
	}
	return p
}

// dropPartial forgets the transaction being read (the connection was lost inside it; it is
// read again from its start after reconnecting). Rows of it already handed out in chunks stay
// counted (txRows) and are skipped when it is read again, so none is handed out twice.
func (a *assembler) dropPartial() {
	a.inTx, a.hasMaria, a.hasMySQL, a.rows, a.commitTime = false, false, false, nil, time.Time{}
	a.rowBytes, a.skipRows = 0, a.txRows
	a.stopErr = nil
}

// pop returns the next finished transaction, if any.
func (a *assembler) pop() (source.Tx, bool) {
	if a.head == len(a.ready) {
		return source.Tx{}, false
	}
	tx := a.ready[a.head]
	a.ready[a.head] = source.Tx{}
	if a.head++; a.head == len(a.ready) {
		a.ready, a.head = a.ready[:0], 0
	}
	return tx, true
}

// name returns the configured name of a captured table, comparing names the way the server
// does (case-insensitively with lower_case_table_names 1 or 2).
func (a *assembler) name(db, table []byte) (string, bool) {
	if a.fold {
		n, ok := a.captured[strings.ToLower(string(db))][strings.ToLower(string(table))]
		return n, ok
	}
	n, ok := a.captured[string(db)][string(table)]
	return n, ok
}

// handle consumes one event; finished transactions are queued for pop.
func (a *assembler) handle(ev *replication.BinlogEvent) error {
	h := ev.Header
	switch e := ev.Event.(type) {
	case *replication.FormatDescriptionEvent:
		a.sawFDE = true
	case *replication.RotateEvent:
		next := string(e.NextLogName)
		if h.Timestamp != 0 || next != a.file {
			// A real rotate (or the first announcement of a new file): the next event is at
			// Position in file next, and everything before it has been read.
			a.file = next
			if a.kind == kindFile && !a.inTx {
				a.pos = uint32(e.Position)
				a.committed = source.Position(a.file + ":" + strconv.FormatUint(uint64(a.pos), 10))
			}
		}
	case *replication.MariadbGTIDEvent:
		if !e.IsStandalone() {
			if err := a.begin(h); err != nil {
				return err
			}
		}
		a.mariaGTID, a.hasMaria = e.GTID, true
	case *replication.GTIDEvent:
		a.mysqlGTID(e)
	case *replication.GtidTaggedLogEvent:
		a.mysqlGTID(&e.GTIDEvent)
	case *replication.QueryEvent:
		return a.query(h, e)
	case *replication.TableMapEvent:
		// Descriptions are built lazily, at the first captured row using the layout.
	case *replication.RowsEvent:
		return a.rowsEvent(h, e)
	case *replication.XIDEvent:
		return a.commit(h)
	case *replication.GenericEvent:
		if h.EventType == replication.XA_PREPARE_LOG_EVENT {
			return a.xaPrepare(h)
		}
	case *replication.ExecuteLoadQueryEvent:
		return a.loadQuery(h, ev.RawData)
	case *replication.TransactionPayloadEvent:
		for _, inner := range e.Events {
			if err := a.handle(inner); err != nil {
				return err
			}
		}
	case *replication.HeartbeatEvent:
		// Not between the chunks of a transaction read again after a reconnect (txRows > 0):
		// idle progress there would end it for the pipeline.
		if !a.inTx && a.txRows == 0 && a.committed != a.emitted {
			a.idle()
		}
	}
	return nil
}

func (a *assembler) mysqlGTID(e *replication.GTIDEvent) {
	if u, err := uuid.FromBytes(e.SID); err == nil && u != uuid.Nil && e.GNO > 0 {
		a.sid, a.tag, a.gno, a.hasMySQL = u, e.Tag, e.GNO, true
	}
	a.commitTime = e.ImmediateCommitTime()
}

// begin starts a transaction. A transaction still open here had no end event: with outbox rows
// (or a pending stop) that is a loud error, never a silent drop.
func (a *assembler) begin(h *replication.EventHeader) error {
	if a.stopErr != nil {
		return stop(fmt.Errorf("binlog %s:%d: %w", a.file, h.LogPos, a.stopErr))
	}
	if a.inTx && a.txRows+len(a.rows) > 0 {
		return stop(fmt.Errorf("binlog %s:%d: a transaction with %d outbox row(s) has no end event (no XID, COMMIT or XA PREPARE) before the next one begins%s; "+
			"outboxd stops instead of dropping them: report this binlog sequence (mysqlbinlog --start-position around %d)", a.file, h.LogPos, a.txRows+len(a.rows), a.chunkNote(), h.LogPos))
	}
	// txRows and skipRows are not reset: they are 0 here, or this is the transaction read again
	// after a reconnect (dropPartial).
	a.inTx, a.rows, a.rowBytes = true, nil, 0
	return nil
}

var (
	qBegin    = []byte("BEGIN")
	qCommit   = []byte("COMMIT")
	qRollback = []byte("ROLLBACK")
	qXA       = []byte("XA ")
)

func (a *assembler) query(h *replication.EventHeader, e *replication.QueryEvent) error {
	q := bytes.TrimRight(bytes.TrimSpace(e.Query), ";")
	switch {
	case bytes.EqualFold(q, qBegin):
		return a.begin(h)
	case len(q) > 3 && bytes.EqualFold(q[:3], qXA):
		return a.xaQuery(h, q)
	case bytes.EqualFold(q, qCommit):
		return a.commit(h)
	case bytes.EqualFold(q, qRollback):
		switch {
		case a.txRows > 0:
			// Earlier chunks are out: they cannot be taken back. The transaction ends here like
			// a committed one (its position moves on); the pending rows are dropped.
			a.log.Warn("binlog transaction ends in ROLLBACK (it touched a non-transactional table) after some of its outbox rows were already published in earlier chunks (a big transaction): "+
				"those cannot be taken back; its remaining rows are not published",
				"published_rows", a.txRows, "dropped_rows", len(a.rows), "file", a.file, "log_pos", h.LogPos)
		case len(a.rows) > 0:
			a.log.Warn("binlog transaction ends in ROLLBACK (it touched a non-transactional table); its outbox rows are not published",
				"rows", len(a.rows), "file", a.file, "log_pos", h.LogPos)
		}
		a.rows, a.rowBytes = nil, 0
		return a.commit(h)
	}
	// A data change logged as a statement (binlog_format STATEMENT or MIXED in some session)
	// that names an outbox table: its rows are not in the binlog as row events.
	if err := a.checkStatement(h, e.Schema, q); err != nil {
		return err
	}
	if a.inTx {
		return nil // SAVEPOINT and the like
	}
	// A statement of its own (DDL): apply it to the tracked schemas, then it ends like a
	// transaction.
	if a.tracker != nil {
		at := fmt.Sprintf("%s:%d", a.file, h.LogPos)
		if err := a.tracker.onQuery(string(e.Schema), string(e.Query), at); err != nil {
			return err
		}
	}
	return a.commit(h)
}

func (a *assembler) rowsEvent(h *replication.EventHeader, e *replication.RowsEvent) error {
	if e.Type() != replication.EnumRowsEventTypeInsert || e.Table == nil {
		return nil
	}
	name, ok := a.name(e.Table.Schema, e.Table.Table)
	if !ok {
		return nil // another table: the binlog carries every table's changes
	}
	if !a.inTx {
		if err := a.begin(h); err != nil {
			return err
		}
	}
	if a.stopErr != nil {
		return nil // the transaction stops outboxd at its end: its rows are never handed out
	}
	if err := checkImage(name, e); err != nil {
		a.failTx(err)
		return nil
	}
	if len(e.Rows) == 0 {
		return stop(fmt.Errorf("binlog %s:%d: an insert into %s arrived without decoded rows (table name matching disagrees between the decoder and the assembler): outboxd stops; report this", a.file, h.LogPos, name))
	}
	d, err := a.desc(name, e.Table)
	if err != nil {
		return fmt.Errorf("binlog %s:%d: %w", a.file, h.LogPos, err)
	}
	n, k := len(d.cols), len(e.Rows)
	vals := a.carve(h, k, n)
	size := 0
	for i, r := range e.Rows {
		v := vals[i*n : (i+1)*n : (i+1)*n]
		if err := decodeRow(d.cols, r, v); err != nil {
			return stop(fmt.Errorf("binlog %s:%d: table %s: %w", a.file, h.LogPos, name, err))
		}
		size += source.RowOverhead
		for j := range v {
			size += len(v[j].Bytes)
		}
	}
	skip := 0
	if a.skipRows > 0 { // read again after a reconnect: these rows were handed out already
		skip = min(a.skipRows, k)
		a.skipRows -= skip
		if skip == k {
			return nil
		}
		size = 0
		for _, v := range vals[skip*n:] {
			size += len(v.Bytes)
		}
		size += (k - skip) * source.RowOverhead
	}
	if m := len(a.rows); m > 0 && (a.capRows > 0 && m+k-skip > a.capRows || a.capBytes > 0 && a.rowBytes+size > a.capBytes) {
		a.cut(h)
	}
	a.roomRows(k - skip)
	for i := skip; i < k; i++ {
		a.rows = append(a.rows, source.Row{Table: name, Columns: d.names, Values: vals[i*n : (i+1)*n : (i+1)*n], Types: d.kinds})
	}
	a.rowBytes += size
	return nil
}

// desc returns the description of a captured table (name as configured) for the layout of tm.
// The tracked schema is consulted only when tm carries no column names.
func (a *assembler) desc(name string, tm *replication.TableMapEvent) (*tableDesc, error) {
	named := len(tm.ColumnName) == int(tm.ColumnCount)
	version := -1
	if !named && a.tracker != nil {
		version = a.tracker.version
	}
	if d := a.descs[name]; d != nil && d.matches(tm, version) {
		return d, nil
	}
	var sch *tableSchema
	if !named && a.tracker != nil {
		var err error
		if sch, err = a.tracker.schema(tableKey{string(tm.Schema), string(tm.Table)}); err != nil {
			return nil, err
		}
		version = a.tracker.version
	}
	d, err := buildDesc(name, tm, sch, version, a.mariadb, a.collations)
	if err != nil {
		return nil, err
	}
	a.descs[name] = d
	return d, nil
}

// commit ends the current transaction at the event h. A transaction marked by failTx ends in
// its error instead, naming the position just after it.
func (a *assembler) commit(h *replication.EventHeader) error {
	if a.txRows > 0 && !a.inTx {
		return stop(fmt.Errorf("binlog %s:%d: after a reconnect inside a transaction handed out in chunks, the stream went on with another transaction's end instead of reading that transaction again%s: "+
			"outboxd stops; report this binlog sequence (mysqlbinlog --start-position around %d)", a.file, h.LogPos, a.chunkNote(), h.LogPos))
	}
	switch a.kind {
	case kindFile:
		if h.LogPos == 0 {
			return fmt.Errorf("binlog %s: transaction end without a log position; file:pos positions cannot be used with this server (use GTIDs)", a.file)
		}
		a.pos = h.LogPos
		a.committed = source.Position(a.file + ":" + strconv.FormatUint(uint64(a.pos), 10))
	case kindMariaGTID:
		if a.hasMaria {
			a.maria = a.maria.set(a.mariaGTID)
			a.committed = source.Position(a.maria.String())
		}
	case kindMySQLGTID:
		if a.hasMySQL {
			a.mysql.AddGTIDWithTag(a.sid, a.tag, a.gno)
			a.committed = source.Position(a.mysql.String())
		}
	}
	if a.txRows+len(a.rows) > 0 && (a.kind == kindMariaGTID && !a.hasMaria || a.kind == kindMySQLGTID && !a.hasMySQL) {
		a.log.Warn("transaction without a GTID in GTID mode: its position is that of the previous transaction, so a restart may publish it again",
			"file", a.file, "log_pos", h.LogPos)
	}
	if a.stopErr != nil {
		return stop(fmt.Errorf("binlog %s:%d: %w%s (outboxd stored no position past this transaction; the position just after it is %s)",
			a.file, h.LogPos, a.stopErr, a.chunkNote(), a.committed))
	}
	if a.skipRows > 0 {
		return stop(fmt.Errorf("binlog %s:%d: a transaction read again after a reconnect has %d outbox row(s) fewer than were handed out before the connection was lost "+
			"(%d): the binlog changed under outboxd; outboxd stops (the position just after this transaction is %s): report this binlog sequence", a.file, h.LogPos, a.skipRows, a.txRows, a.committed))
	}
	ct := a.commitTime
	if ct.IsZero() {
		ct = time.Unix(int64(h.Timestamp), 0)
	}
	rows, size, chunked := a.rows, a.rowBytes, a.txRows > 0
	a.inTx, a.hasMaria, a.hasMySQL, a.rows, a.commitTime = false, false, false, nil, time.Time{}
	a.rowBytes, a.txRows = 0, 0
	if len(rows) > 0 || chunked { // the last chunk of a chunked transaction, even without rows
		a.ready = append(a.ready, source.Tx{Position: a.committed, CommitTime: ct, Rows: rows, Bytes: size})
		a.emitted, a.lastEmit = a.committed, a.now()
		return nil
	}
	if a.committed != a.emitted && a.now().Sub(a.lastEmit) >= a.idleEvery {
		a.idle()
	}
	return nil
}

// idle hands out an empty Tx carrying the current position.
func (a *assembler) idle() {
	a.ready = append(a.ready, source.Tx{Position: a.committed})
	a.emitted, a.lastEmit = a.committed, a.now()
}
