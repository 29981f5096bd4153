package postgres

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/outboxd/outboxd/source"
)

var need = []string{"id", "aggregateid", "payload"}

// goodShape is a publication streaming public.outbox whole.
func goodShape() *PubShape {
	return &PubShape{Name: "outboxd", Exists: true, OID: 500, Xmin: 700, Age: 10, Insert: true, SlotCatalogAge: 5,
		Tables: []TableShape{{Name: "public.outbox", Ident: "public.outbox", OID: 100, Relkind: "r",
			Columns: []string{"id", "aggregatetype", "aggregateid", "type", "payload"},
			Member:  Membership{RelOID: 600, RelXmin: 700, RelAge: 10}}}}
}

func problemsText(ps []Problem) string {
	var b strings.Builder
	for _, p := range ps {
		b.WriteString(p.String() + "\n")
	}
	return b.String()
}

func TestProblems(t *testing.T) {
	if ps := goodShape().Problems(need); len(ps) != 0 {
		t.Fatalf("good shape has problems:\n%s", problemsText(ps))
	}
	for _, tc := range []struct {
		name   string
		mutate func(p *PubShape)
		want   []string // substrings of the problems' text, all required
	}{
		{"no inserts", func(p *PubShape) { p.Insert = false }, []string{"does not publish inserts", `ALTER PUBLICATION "outboxd" SET (publish = 'insert')`}},
		{"table not in publication", func(p *PubShape) { p.Tables[0].Member = Membership{} }, []string{"does not include public.outbox", `ALTER PUBLICATION "outboxd" ADD TABLE public.outbox`}},
		{"covered by FOR ALL TABLES", func(p *PubShape) { p.Tables[0].Member = Membership{}; p.AllTables = true }, nil},
		{"covered by TABLES IN SCHEMA", func(p *PubShape) { p.Tables[0].Member = Membership{NspOID: 9} }, nil},
		{"table missing", func(p *PubShape) { p.Tables[0].OID = 0 }, []string{"does not exist"}},
		{"a view", func(p *PubShape) { p.Tables[0].Relkind = "v" }, []string{"is not a table"}},
		{"row filter", func(p *PubShape) { p.Tables[0].Member.RowFilter = "(aggregatetype <> 'x'::text)" },
			[]string{"row filter", "WHERE (aggregatetype", `BEGIN; ALTER PUBLICATION "outboxd" DROP TABLE public.outbox; ALTER PUBLICATION "outboxd" ADD TABLE public.outbox; COMMIT;`}},
		{"column list without payload", func(p *PubShape) {
			p.Tables[0].Member.HasColumnList, p.Tables[0].Member.ColumnList = true, []string{"id", "aggregatetype", "aggregateid", "type"}
		}, []string{"column list", "leaves out payload (used by outboxd)", "DROP TABLE public.outbox"}},
		{"column list without an unused column", func(p *PubShape) {
			p.Tables[0].Member.HasColumnList, p.Tables[0].Member.ColumnList = true, []string{"id", "aggregatetype", "aggregateid", "payload"}
		}, []string{"leaves out type:"}},
		{"complete column list", func(p *PubShape) {
			p.Tables[0].Member.HasColumnList, p.Tables[0].Member.ColumnList = true, p.Tables[0].Columns
		}, nil},
		{"generated payload", func(p *PubShape) { p.Tables[0].Generated = []string{"payload"} },
			[]string{"payload of public.outbox are STORED generated", `ALTER TABLE public.outbox ALTER COLUMN "payload" DROP EXPRESSION`}},
		{"generated unused column", func(p *PubShape) { p.Tables[0].Generated = []string{"type"} }, nil},
		{"partitioned without via root", func(p *PubShape) { p.Tables[0].Relkind = "p" },
			[]string{"partitioned", `ALTER PUBLICATION "outboxd" SET (publish_via_partition_root = true)`}},
		{"partitioned via root", func(p *PubShape) { p.Tables[0].Relkind = "p"; p.ViaRoot = true }, nil},
		{"uncovered inheritance child", func(p *PubShape) {
			p.Tables[0].Children = []TableShape{{Name: "public.outbox_2024", Ident: "public.outbox_2024", OID: 101, Relkind: "r"}}
		}, []string{"public.outbox_2024 (an inheritance child of public.outbox", "ADD TABLE public.outbox_2024"}},
		{"covered inheritance child with a row filter", func(p *PubShape) {
			p.Tables[0].Children = []TableShape{{Name: "public.outbox_2024", Ident: "public.outbox_2024", OID: 101, Relkind: "r",
				Member: Membership{RelOID: 601, RowFilter: "(id IS NULL)"}}}
		}, []string{"row filter on public.outbox_2024"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := goodShape()
			tc.mutate(p)
			got := problemsText(p.Problems(need))
			if len(tc.want) == 0 && got != "" {
				t.Fatalf("want no problem, got:\n%s", got)
			}
			if len(tc.want) > 0 && got == "" {
				t.Fatalf("want a problem, got none")
			}
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("problems lack %q:\n%s", w, got)
				}
			}
		})
	}
	// An absent publication (outboxd creates it) still has the generated-column problem.
	p := goodShape()
	p.Exists, p.Tables[0].Member, p.Tables[0].Generated = false, Membership{}, []string{"payload"}
	if got := problemsText(p.Problems(need)); !strings.Contains(got, "STORED generated") || strings.Contains(got, "does not include") {
		t.Errorf("absent publication: %s", got)
	}
}

func TestChanges(t *testing.T) {
	if c := Changes(goodShape(), goodShape()); len(c) != 0 {
		t.Fatalf("same shape: %v", c)
	}
	for _, tc := range []struct {
		name   string
		mutate func(p *PubShape)
		want   string
	}{
		{"publication dropped", func(p *PubShape) { p.Exists = false }, "was dropped"},
		{"publication re-created", func(p *PubShape) { p.OID = 501 }, "dropped and created again"},
		{"publication altered", func(p *PubShape) { p.Xmin = 800 }, "was altered"},
		{"table removed", func(p *PubShape) { p.Tables[0].Member = Membership{} }, "was removed from publication"},
		{"table removed and added again", func(p *PubShape) { p.Tables[0].Member.RelOID = 602 }, "removed from publication \"outboxd\" and added again"},
		{"same rel oid, new xmin", func(p *PubShape) { p.Tables[0].Member.RelXmin = 900 }, "added again"},
		{"schema membership added", func(p *PubShape) { p.Tables[0].Member.NspOID = 7 }, "pg_publication_namespace"},
		{"table dropped", func(p *PubShape) { p.Tables[0].OID = 0 }, "no longer exists"},
		{"table replaced", func(p *PubShape) { p.Tables[0].OID = 111 }, "is now another table"},
		{"child added", func(p *PubShape) { p.Tables[0].Children = []TableShape{{Name: "public.c", OID: 5}} }, "became an inheritance child"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := goodShape()
			tc.mutate(now)
			got := strings.Join(Changes(goodShape(), now), "\n")
			if !strings.Contains(got, tc.want) {
				t.Errorf("changes %q lack %q", got, tc.want)
			}
		})
	}
	base := goodShape()
	base.Tables[0].Children = []TableShape{{Name: "public.c", OID: 5, Member: Membership{RelOID: 9}}}
	now := goodShape()
	if got := strings.Join(Changes(base, now), "\n"); !strings.Contains(got, "inheritance child public.c of public.outbox is gone") {
		t.Errorf("child gone: %q", got)
	}
	now.Tables[0].Children = []TableShape{{Name: "public.c", OID: 5}}
	if got := strings.Join(Changes(base, now), "\n"); !strings.Contains(got, "public.c was removed from publication") {
		t.Errorf("child removed from publication: %q", got)
	}
}

func TestNewerThanSlot(t *testing.T) {
	p := goodShape() // ages 10 (publication, membership) vs slot catalog_xmin age 5: older
	if h := p.NewerThanSlot(); len(h) != 0 {
		t.Fatalf("older rows reported: %v", h)
	}
	p.Tables[0].Member.RelAge, p.Tables[0].Member.RelXmin = 5, 777 // same age as catalog_xmin: may be after the restart point
	h := p.NewerThanSlot()
	if len(h) != 1 || h[0].Xmin != 777 || !strings.Contains(h[0].What, "public.outbox was added") {
		t.Fatalf("hits %v", h)
	}
	p.Age = 2
	p.Tables[0].Children = []TableShape{{Name: "public.c", OID: 5, Member: Membership{RelOID: 9, RelAge: 1, RelXmin: 778}}}
	if h := p.NewerThanSlot(); len(h) != 3 {
		t.Fatalf("want publication, table and child hits, got %v", h)
	}
	p.SlotCatalogAge = -1 // slot unknown
	if h := p.NewerThanSlot(); h != nil {
		t.Fatalf("unknown slot age: %v", h)
	}
}

func TestSingleRelationAndRelationMessage(t *testing.T) {
	p := goodShape()
	if !p.singleRelation() {
		t.Error("one plain table is a single relation")
	}
	p.Tables[0].Children = []TableShape{{OID: 5}}
	if p.singleRelation() {
		t.Error("a table with an inheritance child is not")
	}
	p = goodShape()
	p.Tables = append(p.Tables, p.Tables[0])
	if p.singleRelation() {
		t.Error("two tables are not")
	}
	if !isRelationMessage(appendXLogData(nil, 1, 1, relMsg(1, "public", "outbox", outboxCols...))[5:]) {
		t.Error("relation message not recognised")
	}
	if isRelationMessage(appendXLogData(nil, 1, 1, testInsert())[5:]) || isRelationMessage(appendKeepalive(nil, 1, false)[5:]) {
		t.Error("insert or keepalive taken for a relation message")
	}
}

// coverageHook is a controllable coverage check: each check blocks until the test answers it.
type coverageHook struct {
	calls   atomic.Int32
	answers chan *PubShape // nil answer: the check fails with an error (not a coverage change)
}

func newCoverageHook() *coverageHook { return &coverageHook{answers: make(chan *PubShape)} }

func (h *coverageHook) read(ctx context.Context) (*PubShape, error) {
	h.calls.Add(1)
	select {
	case p := <-h.answers:
		if p == nil {
			return nil, errors.New("test: check failed")
		}
		return p, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (h *coverageHook) answer(t *testing.T, p *PubShape) {
	t.Helper()
	select {
	case h.answers <- p:
	case <-time.After(2 * time.Second):
		t.Fatal("no coverage check asked for an answer")
	}
}

// at is goodShape read when the server's WAL flush position was l.
func at(l uint64) *PubShape { p := goodShape(); p.ReadAt = pglogrepl.LSN(l); return p }

func startCoverageFake(t *testing.T, single bool) (*Source, *fakeWalsender, *coverageHook) {
	h := newCoverageHook()
	s, f := startFakeWith(t, Config{StandbyTimeout: 10 * time.Second, CoverageCheckInterval: time.Hour}, 0x10, func(s *Source) {
		s.ext.cov.readShape = h.read
		s.ext.cov.base.Store(goodShape())
		s.ext.cov.single = single
	})
	h.answer(t, at(0x10)) // the watcher's first check at start
	return s, f, h
}

func noNext(t *testing.T, s *Source, d time.Duration, what string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	if tx, err := s.Next(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("%s: Next returned %s (%d rows), %v; want nothing yet", what, tx.Position, len(tx.Rows), err)
	}
}

// TestStreamCoverageGatesIdleProgress: keepalive idle progress waits for a passed coverage
// reading whose WAL flush position reaches it (a reading from before does not do); a reading
// that finds a change stops the source (ErrPositionLost) and the position it gated is never
// handed out.
func TestStreamCoverageGatesIdleProgress(t *testing.T) {
	s, f, h := startCoverageFake(t, true)
	f.write(t, appendKeepalive(nil, 0x500, false))
	noNext(t, s, 300*time.Millisecond, "idle progress before a reading reaching it")
	h.answer(t, at(0x4FF)) // a reading that was under way before the keepalive came
	noNext(t, s, 300*time.Millisecond, "idle progress after a reading short of it")
	h.answer(t, at(0x500))
	if pos, rows := nextWithin(t, s, 2*time.Second); pos != "0/500" || rows != 0 {
		t.Fatalf("Next: %s with %d rows, want idle progress 0/500", pos, rows)
	}
	if err := s.Confirm(context.Background(), "0/500"); err != nil {
		t.Fatal(err)
	}

	// A failing check (no answer from the database) clears nothing.
	f.write(t, appendKeepalive(nil, 0x600, false))
	h.answer(t, nil)
	noNext(t, s, 400*time.Millisecond, "idle progress after a failed check")

	dropped := at(0x600)
	dropped.Tables[0].Member = Membership{}
	h.answer(t, dropped)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	tx, err := s.Next(ctx)
	if !errors.Is(err, source.ErrPositionLost) {
		t.Fatalf("Next after the table left the publication: %s, %v; want an error wrapping ErrPositionLost", tx.Position, err)
	}
	for _, w := range []string{"was removed from publication", "after 0/500", "ADD TABLE public.outbox", "outboxd offsets set"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("stop error lacks %q: %v", w, err)
		}
	}
	if tx, err2 := s.Next(ctx); err2 != err { // fatal: Next keeps returning the error, never the gated position
		t.Fatalf("Next after the stop: %s, %v", tx.Position, err2)
	}
}

// TestStreamCoverageDataFastPath: with a single relation, a data transaction without a new
// Relation message is handed out with no coverage check; one after a Relation message waits for
// a reading covering it; with several relations every transaction waits, and one reading covers
// every transaction committed before it (a backlog is not checked transaction by transaction).
func TestStreamCoverageDataFastPath(t *testing.T) {
	s, f, h := startCoverageFake(t, true)
	var b []byte
	b = appendXLogData(b, 0x18, 0x18, relMsg(1, "public", "outbox", outboxCols...))
	b = appendOutboxTx(b, testInsert(), 1, 0x100)
	f.write(t, b)
	noNext(t, s, 300*time.Millisecond, "the first transaction after a Relation message")
	h.answer(t, at(0x100))
	if pos, _ := nextWithin(t, s, 2*time.Second); pos != "0/100" {
		t.Fatalf("Next: %s, want 0/100", pos)
	}
	calls := h.calls.Load()
	f.write(t, appendOutboxTx(nil, testInsert(), 1, 0x200))
	if pos, rows := nextWithin(t, s, 500*time.Millisecond); pos != "0/200" || rows != 1 {
		t.Fatalf("Next: %s with %d rows, want 0/200 at once", pos, rows)
	}
	if h.calls.Load() != calls {
		t.Errorf("a data transaction on the fast path waited for a coverage check")
	}
	// pgoutput re-sends the Relation message after the table's membership changed: gate again.
	b = appendXLogData(nil, 0x218, 0x218, relMsg(1, "public", "outbox", outboxCols...))
	f.write(t, appendOutboxTx(b, testInsert(), 1, 0x300))
	noNext(t, s, 300*time.Millisecond, "a transaction after a new Relation message")
	readded := at(0x300)
	readded.Tables[0].Member.RelOID = 601
	h.answer(t, readded)
	_, err := s.Next(context.Background())
	if !errors.Is(err, source.ErrPositionLost) || !strings.Contains(err.Error(), "added again") {
		t.Fatalf("Next after the table was dropped and added again: %v", err)
	}
	// 0/200 went out on the fast path, after the last passed reading (0/100): a publication
	// change inside that very transaction would have dropped its later rows, so the rows to
	// re-publish start after 0/100, not after 0/200.
	for _, w := range []string{"rows committed to public.outbox after 0/100", "handed out transactions up to 0/200", "re-publish the rows committed after 0/100"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("stop error lacks %q: %v", w, err)
		}
	}

	s2, f2, h2 := startCoverageFake(t, false) // several relations: no fast path
	b = appendXLogData(nil, 0x18, 0x18, relMsg(1, "public", "outbox", outboxCols...))
	f2.write(t, appendOutboxTx(b, testInsert(), 1, 0x100))
	h2.answer(t, at(0x100))
	if pos, _ := nextWithin(t, s2, 2*time.Second); pos != "0/100" {
		t.Fatalf("Next: %s, want 0/100", pos)
	}
	f2.write(t, appendOutboxTx(nil, testInsert(), 1, 0x200))
	noNext(t, s2, 300*time.Millisecond, "a data transaction with several relations")
	h2.answer(t, at(0x1000)) // the server had flushed far more: a backlog
	if pos, _ := nextWithin(t, s2, 2*time.Second); pos != "0/200" {
		t.Fatalf("Next: %s, want 0/200", pos)
	}
	calls = h2.calls.Load()
	var backlog []byte
	for l := uint64(0x300); l <= 0x900; l += 0x100 {
		backlog = appendOutboxTx(backlog, testInsert(), 1, l)
	}
	f2.write(t, backlog)
	for l := 0x300; l <= 0x900; l += 0x100 {
		if pos, _ := nextWithin(t, s2, 500*time.Millisecond); pos != lsnPosition(pglogrepl.LSN(l)) {
			t.Fatalf("backlog: Next %s, want %s", pos, lsnPosition(pglogrepl.LSN(l)))
		}
	}
	if h2.calls.Load() != calls {
		t.Errorf("backlog transactions covered by a passed reading waited for %d more", h2.calls.Load()-calls)
	}
}

// TestStreamPublicationMissingIsPermanent (case 18): the walsender's `publication "X" does not
// exist` (a slot decoding changes from before its publication) ends the stream with an error
// wrapping ErrPositionLost (the pipeline never retries it) that names the fix; another server
// error stays retryable.
func TestStreamPublicationMissingIsPermanent(t *testing.T) {
	for _, tc := range []struct {
		code, msg string
		permanent bool
	}{
		{"42704", `publication "outboxd" does not exist`, true},
		{"XX000", "some other failure", false},
	} {
		s, f := startFake(t, Config{StandbyTimeout: 10 * time.Second}, 0x10)
		b, err := (&pgproto3.ErrorResponse{Severity: "ERROR", Code: tc.code, Message: tc.msg}).Encode(nil)
		if err != nil {
			t.Fatal(err)
		}
		f.write(t, b)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err = s.Next(ctx)
		cancel()
		if got := errors.Is(err, source.ErrPositionLost); got != tc.permanent {
			t.Fatalf("%s: permanent %v, want %v: %v", tc.msg, got, tc.permanent, err)
		}
		if tc.permanent && (!strings.Contains(err.Error(), "pg_drop_replication_slot('outboxd')") || !strings.Contains(err.Error(), "Retrying cannot help")) {
			t.Errorf("error lacks the fix: %v", err)
		}
	}
}

// TestOpenRefusesRowFilter: Open itself (not only the preflight) refuses a publication with a
// row filter, permanently (ErrPositionLost), before creating the slot.
func TestOpenRefusesRowFilter(t *testing.T) {
	dsn, conn := testDB(t, "covfilter")
	exec(t, conn, `CREATE PUBLICATION covfilter FOR TABLE public.outbox WHERE (aggregatetype <> 'x') WITH (publish = 'insert')`)
	s := newTestSource(dsn, "covfilter")
	err := s.Open(context.Background(), "")
	if err == nil {
		s.Close()
		t.Fatal("Open with a row filter succeeded")
	}
	if !errors.Is(err, source.ErrPositionLost) || !strings.Contains(err.Error(), "row filter") || !strings.Contains(err.Error(), "DROP TABLE public.outbox") {
		t.Errorf("error: %v", err)
	}
	var n int
	conn.QueryRow(context.Background(), `SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'covfilter'`).Scan(&n)
	if n != 0 {
		t.Error("a refused Open created the slot")
	}
}

// TestOpenSlotAge: with another, older slot on the server, a new slot's catalog_xmin is older
// than the publication outboxd created just before it, so the cheap xmin test says "maybe";
// decoding a copy of the slot settles that the publication is older than the stored position
// (the restart works). A table dropped from the publication and added again after the stored
// position is refused, naming the commit LSN of the change.
func TestOpenSlotAge(t *testing.T) {
	dsn, conn := testDB(t, "covage")
	exec(t, conn, `SELECT pg_create_logical_replication_slot('covage_hold', 'test_decoding')`)
	t.Cleanup(func() { conn.Exec(context.Background(), `SELECT pg_drop_replication_slot('covage_hold')`) })
	exec(t, conn, `INSERT INTO public.other (note) VALUES ('advance the xid counter')`)

	s := newTestSource(dsn, "covage")
	open(t, s, "")
	exec(t, conn, `INSERT INTO public.outbox (id, aggregatetype, aggregateid, payload) VALUES (gen_random_uuid(), 'a', 'b', '{}')`)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var tx source.Tx
	for len(tx.Rows) == 0 {
		var err error
		if tx, err = s.Next(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Confirm(ctx, tx.Position); err != nil {
		t.Fatal(err)
	}
	s.Close()

	v, _ := serverVersion(ctx, conn)
	shape, err := queryShape(ctx, conn, v, "covage", "covage", []string{"public.outbox"})
	if err != nil {
		t.Fatal(err)
	}
	if len(shape.NewerThanSlot()) == 0 {
		t.Fatalf("the cheap test finds nothing to settle (slot catalog_xmin age %d, publication age %d): the probe is not exercised", shape.SlotCatalogAge, shape.Age)
	}
	s2 := newTestSource(dsn, "covage")
	open(t, s2, tx.Position) // settled by the probe: the publication is older than the position
	s2.Close()

	exec(t, conn, `ALTER PUBLICATION covage DROP TABLE public.outbox`)
	exec(t, conn, `ALTER PUBLICATION covage ADD TABLE public.outbox`)
	s3 := newTestSource(dsn, "covage")
	err = s3.Open(ctx, tx.Position)
	if err == nil {
		s3.Close()
		t.Fatal("Open after the table left and re-joined the publication succeeded")
	}
	if !errors.Is(err, source.ErrPositionLost) || !strings.Contains(err.Error(), "committed at") || !strings.Contains(err.Error(), string(tx.Position)) {
		t.Errorf("error: %v", err)
	}
}

// TestStreamCoverageInFlightCommits: a reading whose snapshot saw a committed transaction as
// still running (InFlight: committed, not yet visible — its catalog change may be missing from
// the reading) vouches for nothing new; the next reading in which none of those is in flight
// any more vouches for what the earlier one could not.
func TestStreamCoverageInFlightCommits(t *testing.T) {
	s, f, h := startCoverageFake(t, true)
	f.write(t, appendKeepalive(nil, 0x500, false))
	busy := func(l uint64, xids ...string) *PubShape { p := at(l); p.InFlight = xids; return p }
	h.answer(t, busy(0x500, "100"))
	noNext(t, s, 200*time.Millisecond, "idle progress after a reading with an in-flight commit")
	h.answer(t, busy(0x510, "100", "101")) // 100 still in flight
	noNext(t, s, 200*time.Millisecond, "idle progress while the same commit is in flight")
	h.answer(t, busy(0x520, "102")) // 100 and 101 are visible now: the reading at 0/500 holds
	if pos, rows := nextWithin(t, s, 2*time.Second); pos != "0/500" || rows != 0 {
		t.Fatalf("Next: %s with %d rows, want idle progress 0/500", pos, rows)
	}
}
