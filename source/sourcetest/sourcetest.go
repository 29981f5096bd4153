// Package sourcetest is the conformance suite every source adapter must pass. An adapter's test
// provides a Harness bound to a real database (a private server started by internal/testenv)
// and calls Run. Every clause of the source.Source contract is a subtest of its own that sets up
// its own state through the harness (a fresh scope: its own slot or server id), so any one of
// them runs alone (go test -run 'TestConformance/CloseUnblocksNext'). Every subtest also checks
// that the goroutines its sources started have ended once they are closed.
package sourcetest

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/outboxd/outboxd/source"
)

// Event is one outbox row a harness writes. ID is a canonical lower-case uuid.
type Event struct {
	ID            string
	AggregateType string
	AggregateID   string
	Type          string
	Payload       string // a JSON document
}

// Harness binds the suite to one adapter and one real database. The outbox table has the columns
// id, aggregatetype, aggregateid, type, payload (Debezium's names); its qualified name is Table.
//
// Every write method commits (or rolls back) one database transaction and returns once the
// database has acknowledged it. The suite runs its subtests one after the other, never
// concurrently, so what one subtest writes is committed before the next opens its scope.
type Harness struct {
	// Table is the outbox table's qualified name as the source reports it in Row.Table.
	Table string
	// NewScope starts a scope private to t (PostgreSQL: a replication slot and publication of its
	// own; MySQL: a server id of its own). Its first source opened from "" starts after every
	// transaction committed before it.
	NewScope func(t *testing.T) Scope
	// Insert commits one transaction inserting evs into the outbox, in order, one row per
	// statement.
	Insert func(t *testing.T, evs ...Event)
	// InsertRollback inserts evs in a transaction that is rolled back.
	InsertRollback func(t *testing.T, evs ...Event)
	// InsertThenDelete inserts ev and deletes it again in the same transaction (Debezium habit).
	InsertThenDelete func(t *testing.T, ev Event)
	// UpdateDelete commits one transaction that updates and then deletes the outbox row with id
	// (which must already exist), and one transaction that inserts into a non-outbox table.
	UpdateDelete func(t *testing.T, id string)
	// Compare compares two positions of this source: it reports whether a is before b (-1), equal
	// (0) or after (1). Used to check monotonicity.
	Compare func(a, b source.Position) int
	// ChunkRows is the row cap of one chunk the scopes' sources are configured with (keep it
	// small, e.g. 7, so the suite stays fast). Required: the suite checks that a larger
	// transaction arrives in chunks.
	ChunkRows int
	// ErrClosed is what Next returns (errors.Is) once Close ended it. Required.
	ErrClosed error
	// Types says the source fills Row.Types: then every row must carry them. Either way a row
	// with Types has one per column (len(Types) == len(Columns)).
	Types bool
}

// Scope is one position namespace of the adapter: sources of one scope resume each other's
// positions, as a restarted outboxd resumes its stored one.
type Scope struct {
	// NewSource returns a new, unopened source of the scope with the suite's configuration
	// (ChunkRows), as a restarted outboxd would build it.
	NewSource func() source.Source
	// LosePosition makes position p, handed out by a source of this scope, unservable the way an
	// operator or the server does it (PostgreSQL: drop the slot; MySQL: purge the binlogs). The
	// scope's sources are all closed when it is called. Required.
	LosePosition func(t *testing.T, p source.Position)
	// CheckLost, if set, makes the adapter's own assertions on the error Open(p) returned after
	// LosePosition (what it names, what it tells the operator to do).
	CheckLost func(t *testing.T, err error, p source.Position)
}

var seq int

// NewEvent makes a unique event for aggregate agg. Not safe for concurrent use.
func NewEvent(agg string) Event {
	seq++
	return Event{
		ID:            fmt.Sprintf("00000000-0000-4000-8000-%012x", seq+int(time.Now().UnixNano()%1e9)*1000),
		AggregateType: "order",
		AggregateID:   agg,
		Type:          "created",
		Payload:       fmt.Sprintf(`{"n": %d, "agg": "%s"}`, seq, agg),
	}
}

// Subtests, one per clause of the source.Source contract. The names are stable: run one with
// -run 'TestConformance/<name>' (MySQL: 'TestConformance/<variant>/<name>').
var clauses = []struct {
	name string
	run  func(t *testing.T, h Harness, label string)
}{
	{"Order", testOrder},
	{"OnlyCommittedInserts", testOnlyCommittedInserts},
	{"Restart", testRestart},
	{"Chunks", testChunks},
	{"NextHonoursContext", testNextHonoursContext},
	{"ConfirmConcurrentWithNext", testConfirmConcurrentWithNext},
	{"CloseUnblocksNext", testCloseUnblocksNext},
	{"PositionLost", testPositionLost},
	{"GoroutinesEndAfterClose", testGoroutinesEnd},
}

// leakWait bounds how long the goroutines of closed sources may take to end.
const leakWait = 10 * time.Second

// Run runs the conformance suite.
func Run(t *testing.T, h Harness) {
	if h.NewScope == nil || h.Compare == nil || h.Insert == nil || h.InsertRollback == nil ||
		h.InsertThenDelete == nil || h.UpdateDelete == nil || h.ErrClosed == nil {
		t.Fatalf("incomplete Harness: NewScope, Compare, Insert, InsertRollback, InsertThenDelete, UpdateDelete and ErrClosed are required")
	}
	if h.ChunkRows <= 0 {
		t.Fatalf("Harness.ChunkRows is %d: configure the adapter's chunk row cap (e.g. 7) and set it", h.ChunkRows)
	}
	for _, c := range clauses {
		t.Run(c.name, func(t *testing.T) {
			l := checkNoLeak(t, leakWait)
			c.run(t, h, l)
		})
	}
}

// reader reads one source, checking that positions never go backwards.
type reader struct {
	t    *testing.T
	h    Harness
	s    source.Source
	last source.Position
}

// open opens a new source of sc from `from`; the source is closed at the end of the subtest.
func open(t *testing.T, h Harness, sc Scope, from source.Position) *reader {
	t.Helper()
	s := sc.NewSource()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.Open(ctx, from); err != nil {
		s.Close()
		t.Fatalf("Open(%q): %v", from, err)
	}
	t.Cleanup(func() { s.Close() })
	return &reader{t: t, h: h, s: s, last: from}
}

// next returns the next chunk, idle progress included.
func (r *reader) next(timeout time.Duration) (source.Tx, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	tx, err := r.s.Next(ctx)
	if err == nil && tx.Position != "" {
		if r.last != "" && r.h.Compare(tx.Position, r.last) < 0 {
			r.t.Fatalf("position went backwards: %s after %s", tx.Position, r.last)
		}
		r.last = tx.Position
	}
	return tx, err
}

// rows returns the next transaction that has rows, skipping idle progress.
func (r *reader) rows() source.Tx {
	r.t.Helper()
	for {
		tx, err := r.next(30 * time.Second)
		if err != nil {
			r.t.Fatalf("Next: %v", err)
		}
		if len(tx.Rows) > 0 {
			return tx
		}
	}
}

// expect reads the next transaction with rows and checks it is exactly evs, whole.
func (r *reader) expect(evs ...Event) source.Tx {
	r.t.Helper()
	tx := r.rows()
	expectTx(r.t, r.h, tx, evs...)
	return tx
}

// expectTx checks that tx is one whole transaction holding exactly evs, in order.
func expectTx(t *testing.T, h Harness, tx source.Tx, evs ...Event) {
	t.Helper()
	if len(tx.Rows) != len(evs) {
		t.Fatalf("transaction has %d rows, want %d (%+v)", len(tx.Rows), len(evs), tx.Rows)
	}
	for i, ev := range evs {
		checkRow(t, h, tx.Rows[i], ev)
	}
	if tx.More {
		t.Fatalf("a transaction of %d rows (under ChunkRows %d) came with More set", len(evs), h.ChunkRows)
	}
	if tx.Position == "" {
		t.Fatalf("transaction without a position")
	}
	if tx.CommitTime.IsZero() || time.Since(tx.CommitTime) > time.Hour || time.Until(tx.CommitTime) > time.Minute {
		t.Fatalf("implausible commit time %v", tx.CommitTime)
	}
}

func checkRow(t *testing.T, h Harness, r source.Row, ev Event) {
	t.Helper()
	if r.Table != h.Table {
		t.Errorf("row table %q, want %q", r.Table, h.Table)
	}
	if p := typesProblem(h, r); p != "" {
		t.Error(p)
	}
	want := map[string]string{"id": ev.ID, "aggregatetype": ev.AggregateType, "aggregateid": ev.AggregateID, "type": ev.Type}
	for col, w := range want {
		v, ok := r.Get(col)
		if !ok {
			t.Errorf("row lacks column %q (columns %v)", col, r.Columns)
			continue
		}
		if v.Null || string(v.Bytes) != w {
			t.Errorf("column %s = %q (null=%v), want %q", col, v.Bytes, v.Null, w)
		}
	}
	p, ok := r.Get("payload")
	if !ok || p.Null {
		t.Fatalf("payload missing or NULL")
	}
	if !jsonEqualish(p.Bytes, []byte(ev.Payload)) {
		t.Errorf("payload %q, want the JSON %q", p.Bytes, ev.Payload)
	}
}

// typesProblem says what is wrong with r's Types, or "".
func typesProblem(h Harness, r source.Row) string {
	switch {
	case r.Types == nil && h.Types:
		return "row without Types (Harness.Types says the source fills them)"
	case r.Types != nil && len(r.Types) != len(r.Columns):
		return fmt.Sprintf("row has %d Types for %d Columns (%v): Types must be parallel to Columns", len(r.Types), len(r.Columns), r.Columns)
	}
	return ""
}

// jsonEqualish compares JSON texts ignoring insignificant whitespace (PostgreSQL's jsonb and
// MySQL's binary JSON reformat documents; the key order of these fixtures is already canonical).
func jsonEqualish(a, b []byte) bool {
	strip := func(s []byte) []byte {
		var out []byte
		inStr := false
		for i := 0; i < len(s); i++ {
			c := s[i]
			if c == '"' && (i == 0 || s[i-1] != '\\') {
				inStr = !inStr
			}
			if !inStr && (c == ' ' || c == '\n' || c == '\t') {
				continue
			}
			out = append(out, c)
		}
		return out
	}
	return bytes.Equal(strip(a), strip(b))
}
