package postgres

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outboxd/internal/testenv/harness"
	"github.com/outboxd/outboxd/source"
)

func newSnapshotSource(dsn, slot string, chunkRows int, tables ...string) *Source {
	return New(Config{DSN: dsn, Tables: tables, Slot: slot, Publication: slot, StandbyTimeout: testStandby,
		Snapshot: SnapshotInitial, ChunkRows: chunkRows}, testLog())
}

// nextTxChunks returns the chunks of the next source transaction (until one without More),
// skipping idle progress before it.
func nextTxChunks(t *testing.T, s *Source) []source.Tx {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var chunks []source.Tx
	for {
		tx, err := s.Next(ctx)
		if err != nil {
			t.Fatalf("Next: %v", err)
		}
		chunks = append(chunks, tx)
		if !tx.More {
			return chunks
		}
	}
}

func rowIDs(rows []source.Row) []string {
	var ids []string
	for _, r := range rows {
		v, _ := r.Get("id")
		ids = append(ids, string(v.Bytes))
	}
	return ids
}

func chunkRows(chunks []source.Tx) []source.Row {
	var rows []source.Row
	for _, c := range chunks {
		rows = append(rows, c.Rows...)
	}
	return rows
}

// heapIDs are the ids of table in its physical order.
func heapIDs(t *testing.T, conn *pgx.Conn, table string) []string {
	t.Helper()
	rows, err := conn.Query(context.Background(), `SELECT id::text FROM `+table+` ORDER BY ctid`)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

const insertRow = `INSERT INTO public.outbox (id, aggregatetype, aggregateid, type, payload)
	VALUES (gen_random_uuid(), 'A', 'live', 'T', '{}') RETURNING id::text`

// writer inserts rows, one transaction each, until stopped.
type writer struct {
	mu   sync.Mutex
	ids  []string
	err  error
	stop chan struct{}
	done chan struct{}
}

func startWriter(t *testing.T, dsn string) *writer {
	w := &writer{stop: make(chan struct{}), done: make(chan struct{})}
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(w.done)
		defer conn.Close(context.Background())
		for {
			select {
			case <-w.stop:
				return
			default:
			}
			var id string
			if err := conn.QueryRow(context.Background(), insertRow).Scan(&id); err != nil {
				w.mu.Lock()
				w.err = err
				w.mu.Unlock()
				return
			}
			w.mu.Lock()
			w.ids = append(w.ids, id)
			w.mu.Unlock()
		}
	}()
	t.Cleanup(w.halt)
	return w
}

func (w *writer) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.ids)
}

func (w *writer) halt() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
}

// TestSnapshotInitial: rows already in the tables when the slot is created are handed out once,
// as one transaction of bounded chunks ending at the slot's consistent point, in source.tables
// order and each table's heap order; rows committed after the slot's creation (before the
// snapshot's import, during the scan and after it) come on the stream, each once; a restart
// with a stored position takes no snapshot.
func TestSnapshotInitial(t *testing.T) {
	dsn, conn := testDB(t, "snapinit")
	exec(t, conn, `CREATE TABLE public.outbox2 (LIKE public.outbox INCLUDING ALL)`)
	exec(t, conn, `INSERT INTO public.outbox (id, aggregatetype, aggregateid, type, payload)
		SELECT gen_random_uuid(), 'A', 'pre', 'T', jsonb_build_object('n', g) FROM generate_series(1, 3000) g`)
	exec(t, conn, `INSERT INTO public.outbox2 (id, aggregatetype, aggregateid, type, payload)
		SELECT gen_random_uuid(), 'A', 'pre2', 'T', '{}' FROM generate_series(1, 10) g`)
	pre := append(heapIDs(t, conn, "public.outbox"), heapIDs(t, conn, "public.outbox2")...)

	w := startWriter(t, dsn) // writes before, while and after the snapshot is taken and read
	waitWrites := func(n int) {
		t.Helper()
		if err := harness.Until(20*time.Second, harness.Interval, func() error {
			if w.count() < n {
				return context.DeadlineExceeded
			}
			return nil
		}); err != nil {
			t.Fatalf("the writer wrote %d rows, want %d", w.count(), n)
		}
	}
	waitWrites(3)
	s := newSnapshotSource(dsn, "snapinit", 100, "public.outbox", "public.outbox2")
	var hookIDs []string // committed after the slot's creation, before the snapshot's import
	s.snap.created = func() {
		for i := 0; i < 3; i++ {
			var id string
			if err := conn.QueryRow(context.Background(), insertRow).Scan(&id); err != nil {
				t.Error(err)
			}
			hookIDs = append(hookIDs, id)
		}
	}
	open(t, s, "")
	consistent := slotConfirmed(t, conn, "snapinit")

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	first, err := s.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The scan is still open: rows written now commit during the snapshot.
	waitWrites(w.count() + 5)
	snap := append([]source.Tx{first}, func() []source.Tx {
		if !first.More {
			return nil
		}
		return nextTxChunks(t, s)
	}()...)
	last := snap[len(snap)-1]
	if last.Position != consistent {
		t.Errorf("snapshot's position %s, want the slot's consistent point %s", last.Position, consistent)
	}
	for i, c := range snap {
		if c.More != (i < len(snap)-1) || len(c.Rows) > 100 || len(c.Rows) == 0 || c.CommitTime.IsZero() || c.Bytes == 0 {
			t.Errorf("chunk %d of %d: More %v, %d rows, CommitTime %v, Bytes %d", i, len(snap), c.More, len(c.Rows), c.CommitTime, c.Bytes)
		}
		if c.More && c.Position != "" {
			t.Errorf("chunk %d has More and a position", i)
		}
	}
	snapIDs := rowIDs(chunkRows(snap))

	// Stop the writer after the snapshot was handed out; then the stream must bring the rest.
	waitWrites(w.count() + 5)
	w.halt()
	if w.err != nil {
		t.Fatal(w.err)
	}
	want := map[string]bool{}
	for _, id := range heapIDs(t, conn, "public.outbox") {
		want[id] = true
	}
	for _, id := range heapIDs(t, conn, "public.outbox2") {
		want[id] = true
	}
	seen := map[string]int{}
	for _, id := range snapIDs {
		seen[id]++
	}
	lastPos := last.Position
	for len(seen) < len(want) {
		tx := nextTxChunks(t, s)
		end := tx[len(tx)-1]
		if CompareLSN(end.Position, lastPos) <= 0 {
			t.Fatalf("stream transaction at %s, not after %s", end.Position, lastPos)
		}
		lastPos = end.Position
		for _, id := range rowIDs(chunkRows(tx)) {
			seen[id]++
		}
	}
	for id := range want {
		if seen[id] != 1 {
			t.Errorf("row %s delivered %d times", id, seen[id])
		}
	}
	if len(seen) != len(want) {
		t.Errorf("%d distinct rows delivered, the tables hold %d", len(seen), len(want))
	}
	inSnap := map[string]bool{}
	for _, id := range snapIDs {
		inSnap[id] = true
	}
	for _, id := range pre {
		if !inSnap[id] {
			t.Errorf("row %s, in the table before the start, is not in the snapshot", id)
		}
	}
	for _, id := range hookIDs {
		if inSnap[id] {
			t.Errorf("row %s, committed after the slot's creation, is in the snapshot", id)
		}
	}
	// Table order: the first table's rows (the 3000 and the writer's committed before the
	// slot's creation), then the second's, each in heap order.
	rows := chunkRows(snap)
	split := 0
	for split < len(rows) && rows[split].Table == "public.outbox" {
		split++
	}
	for _, r := range rows[split:] {
		if r.Table != "public.outbox2" {
			t.Fatalf("a row of %s after public.outbox2's rows began", r.Table)
		}
	}
	// (The writer's single-row inserts may fill free space in earlier pages: heap order is
	// read back now, restricted to the snapshot's rows.)
	var heapOrder []string
	for _, id := range heapIDs(t, conn, "public.outbox") {
		if inSnap[id] {
			heapOrder = append(heapOrder, id)
		}
	}
	if !slices.Equal(snapIDs[:split], heapOrder) {
		t.Errorf("public.outbox's %d snapshot rows are not its rows in heap order (%d)", split, len(heapOrder))
	}
	if !slices.Equal(snapIDs[split:], pre[3000:]) {
		t.Errorf("public.outbox2's snapshot rows %v, want %v", snapIDs[split:], pre[3000:])
	}
	t.Logf("snapshot: %d rows in %d chunks at %s; %d rows during/after it; %d before the import", len(snapIDs), len(snap), consistent, len(want)-len(snapIDs), len(hookIDs))

	// A second start with a stored position takes no snapshot.
	s.Close()
	s2 := newSnapshotSource(dsn, "snapinit", 100, "public.outbox", "public.outbox2")
	open(t, s2, lastPos)
	var id string
	if err := conn.QueryRow(context.Background(), insertRow).Scan(&id); err != nil {
		t.Fatal(err)
	}
	tx := nextRows(t, s2)
	if got := rowIDs(tx.Rows); !slices.Equal(got, []string{id}) || tx.More {
		t.Errorf("after a restart with a stored position: first rows %d (%v...), want only the new row %s", len(got), got[:min(3, len(got))], id)
	}
}

// TestSnapshotCrashRedo: a source closed in the middle of its snapshot stored nothing; the next
// start with no stored position drops the slot and takes the snapshot again, whole, with the
// rows written in between, each once.
func TestSnapshotCrashRedo(t *testing.T) {
	dsn, conn := testDB(t, "snapcrash")
	exec(t, conn, `INSERT INTO public.outbox (id, aggregatetype, aggregateid, type, payload)
		SELECT gen_random_uuid(), 'A', 'pre', 'T', '{}' FROM generate_series(1, 500) g`)
	s := newSnapshotSource(dsn, "snapcrash", 50, "public.outbox")
	open(t, s, "")
	firstPoint := slotConfirmed(t, conn, "snapcrash")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := 0; i < 2; i++ {
		tx, err := s.Next(ctx)
		if err != nil || !tx.More || len(tx.Rows) != 50 {
			t.Fatalf("chunk %d: %d rows, More %v, %v", i, len(tx.Rows), tx.More, err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Next(ctx); err != ErrClosed {
		t.Errorf("Next after Close mid-snapshot: %v, want ErrClosed", err)
	}
	for i := 0; i < 5; i++ {
		exec(t, conn, insertRow)
	}

	s2 := newSnapshotSource(dsn, "snapcrash", 50, "public.outbox")
	open(t, s2, "")
	secondPoint := slotConfirmed(t, conn, "snapcrash")
	if CompareLSN(secondPoint, firstPoint) <= 0 {
		t.Errorf("the slot was not created again: consistent point %s, first %s", secondPoint, firstPoint)
	}
	snap := nextTxChunks(t, s2)
	ids := rowIDs(chunkRows(snap))
	if want := heapIDs(t, conn, "public.outbox"); !slices.Equal(ids, want) {
		t.Errorf("redone snapshot: %d rows, want the table's %d in heap order", len(ids), len(want))
	}
	if snap[len(snap)-1].Position != secondPoint {
		t.Errorf("redone snapshot at %s, want the new slot's consistent point %s", snap[len(snap)-1].Position, secondPoint)
	}
	var id string
	if err := conn.QueryRow(context.Background(), insertRow).Scan(&id); err != nil {
		t.Fatal(err)
	}
	if got := rowIDs(nextRows(t, s2).Rows); !slices.Equal(got, []string{id}) {
		t.Errorf("after the redone snapshot: %v, want the new row %s", got, id)
	}
}

// TestSnapshotEmptyTables: empty tables give one transaction without rows at the slot's
// consistent point, then the stream. An order column a table lacks is refused before any slot
// is created.
func TestSnapshotEmptyTables(t *testing.T) {
	dsn, conn := testDB(t, "snapempty")
	bad := newSnapshotSource(dsn, "snapempty", 0, "public.outbox")
	bad.cfg.OrderColumn = "seq"
	if err := bad.Open(context.Background(), ""); err == nil || !strings.Contains(err.Error(), `outbox.order_column "seq" is not a column of public.outbox`) {
		t.Errorf("Open with a missing order column: %v", err)
	}
	bad.Close()
	var slots int
	if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'snapempty'`).Scan(&slots); err != nil || slots != 0 {
		t.Errorf("%d slots after the refused Open (%v), want none", slots, err)
	}
	s := newSnapshotSource(dsn, "snapempty", 0, "public.outbox")
	s.cfg.OrderColumn = "created_at"
	open(t, s, "")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tx, err := s.Next(ctx)
	if err != nil || tx.More || len(tx.Rows) != 0 || tx.Position != slotConfirmed(t, conn, "snapempty") {
		t.Fatalf("snapshot of empty tables: %+v, %v; want no rows at the slot's consistent point", tx, err)
	}
	var id string
	if err := conn.QueryRow(context.Background(), insertRow).Scan(&id); err != nil {
		t.Fatal(err)
	}
	if got := rowIDs(nextRows(t, s).Rows); !slices.Equal(got, []string{id}) {
		t.Errorf("after the snapshot: %v, want the new row %s", got, id)
	}
}

// TestSnapshotReopenSameProcess: the Adapter's Sources share a snapshot keeper, so a Source
// opened again without a stored position (the pipeline re-opening, exactly_once re-reading a
// spilled transaction) reads the same snapshot (same rows, same order, same position) from the
// same slot, however the table changed; a Confirm of the snapshot's position lets go of it.
func TestSnapshotReopenSameProcess(t *testing.T) {
	dsn, conn := testDB(t, "snapkeep")
	exec(t, conn, `INSERT INTO public.outbox (id, aggregatetype, aggregateid, type, payload)
		SELECT gen_random_uuid(), 'A', 'pre', 'T', '{}' FROM generate_series(1, 300) g`)
	want := heapIDs(t, conn, "public.outbox")
	a := NewAdapter(Settings{DSN: dsn, Tables: []string{"public.outbox"}, Slot: "snapkeep", Publication: "snapkeep", Snapshot: SnapshotInitial}, testLog())
	t.Cleanup(a.keeper.releaseAny)
	newSource := func() *Source {
		s := a.NewSource().(*Source)
		s.cfg.ChunkRows, s.cfg.StandbyTimeout = 50, testStandby
		return s
	}
	s1 := newSource()
	open(t, s1, "")
	point := slotConfirmed(t, conn, "snapkeep")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := s1.Next(ctx); err != nil {
		t.Fatal(err)
	}
	s1.Close()
	// The table changes: a snapshot row deleted, rows inserted (into its free space, too).
	exec(t, conn, `DELETE FROM public.outbox WHERE id = $1`, want[10])
	exec(t, conn, `VACUUM public.outbox`)
	var later []string
	for i := 0; i < 5; i++ {
		var id string
		if err := conn.QueryRow(context.Background(), insertRow).Scan(&id); err != nil {
			t.Fatal(err)
		}
		later = append(later, id)
	}

	s2 := newSource()
	open(t, s2, "")
	if p := slotConfirmed(t, conn, "snapkeep"); p != point {
		t.Errorf("slot at %s after the reopen, want it kept at %s", p, point)
	}
	snap := nextTxChunks(t, s2)
	if got := rowIDs(chunkRows(snap)); !slices.Equal(got, want) {
		t.Errorf("the reopened Source's snapshot has %d rows, want the first one's %d in the same order", len(got), len(want))
	}
	if pos := snap[len(snap)-1].Position; pos != point {
		t.Errorf("snapshot at %s, want %s", pos, point)
	}
	var streamed []string
	for len(streamed) < len(later) {
		streamed = append(streamed, rowIDs(nextRows(t, s2).Rows)...)
	}
	if !slices.Equal(streamed, later) {
		t.Errorf("streamed %v, want the rows inserted after the snapshot %v", streamed, later)
	}
	if err := s2.Confirm(ctx, point); err != nil {
		t.Fatal(err)
	}
	if err := harness.Until(10*time.Second, harness.Interval, func() error {
		a.keeper.mu.Lock()
		defer a.keeper.mu.Unlock()
		if a.keeper.held != nil {
			return context.DeadlineExceeded
		}
		return nil
	}); err != nil {
		t.Error("the keeper still holds the snapshot after its position was confirmed")
	}
}

// TestSnapshotKeptIdle: a kept snapshot no Source takes again is let go of keptIdle after the
// last Source closed (a process that lost the active role must not hold back VACUUM).
func TestSnapshotKeptIdle(t *testing.T) {
	dsn, conn := testDB(t, "snapidle")
	exec(t, conn, `INSERT INTO public.outbox (id, aggregatetype, aggregateid, type, payload)
		SELECT gen_random_uuid(), 'A', 'pre', 'T', '{}' FROM generate_series(1, 100) g`)
	old := keptIdle
	keptIdle = 200 * time.Millisecond
	t.Cleanup(func() { keptIdle = old })
	a := NewAdapter(Settings{DSN: dsn, Tables: []string{"public.outbox"}, Slot: "snapidle", Publication: "snapidle", Snapshot: SnapshotInitial}, testLog())
	t.Cleanup(a.keeper.releaseAny)
	s := a.NewSource().(*Source)
	s.cfg.ChunkRows, s.cfg.StandbyTimeout = 10, testStandby
	open(t, s, "")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := s.Next(ctx); err != nil {
		t.Fatal(err)
	}
	held := func() bool {
		a.keeper.mu.Lock()
		defer a.keeper.mu.Unlock()
		return a.keeper.held != nil
	}
	s.Close()
	if !held() {
		t.Fatal("the snapshot was let go of at Close, before keptIdle")
	}
	var sessions int
	countKept := func() int {
		conn.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity WHERE datname = 'snapidle' AND application_name = 'outboxd' AND state = 'idle in transaction'`).Scan(&sessions)
		return sessions
	}
	// The scan's own session ends with the Source (its backend may take a moment to go).
	if err := harness.Until(10*time.Second, harness.Interval, func() error {
		if countKept() != 1 {
			return context.DeadlineExceeded
		}
		return nil
	}); err != nil && held() {
		t.Errorf("%d idle-in-transaction outboxd sessions while the snapshot is kept, want 1", sessions)
	}
	if err := harness.Until(10*time.Second, harness.Interval, func() error {
		if held() || countKept() != 0 {
			return context.DeadlineExceeded
		}
		return nil
	}); err != nil {
		t.Errorf("the kept snapshot is still held %v after the Source closed (held %v, sessions %d)", keptIdle, held(), sessions)
	}
}
