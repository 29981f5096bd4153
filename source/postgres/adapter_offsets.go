package postgres

// The PostgreSQL side of `outboxd check` and `outboxd offsets show/set`: what the slot has
// confirmed and retains, and whether a position can be replayed from it.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxd/outboxd/source"
)

// Preflight runs the PostgreSQL checks of `outboxd check` (Preflight) and reports each line in
// order. The stored position does not matter to them (Open settles it against the slot).
//
// With source.postgres.snapshot: initial and no stored position, a "snapshot" line says what the
// next run does first (snapshotCheck); a nil stored (positions in a store check does not read)
// says the snapshot depends on it.
func (a *Adapter) Preflight(ctx context.Context, stored func(context.Context) (source.Position, error), report func(name string, ok bool, reason, fix string)) {
	res := Preflight(ctx, Config{DSN: a.cfg.DSN, Tables: a.cfg.Tables, Slot: a.cfg.Slot,
		Publication: a.cfg.Publication, Columns: a.cfg.Columns, MessagePrefix: a.cfg.MessagePrefix,
		FailoverSlot: a.cfg.FailoverSlot, MinSafeWALSize: a.cfg.MinSafeWALSize})
	for _, r := range res {
		fix := r.Fix
		if r.OK && !r.Warn {
			fix = "" // an OK line with a fix would print as WARN
		}
		report(r.Name, r.OK, r.Reason, fix)
	}
	if a.cfg.Snapshot != SnapshotInitial || len(res) == 0 || !res[0].OK { // off, or the server is unreachable
		return
	}
	if len(a.cfg.Tables) == 0 {
		report("snapshot", true, noTableSnapshot, "")
		return
	}
	if stored == nil {
		report("snapshot", true, "source.postgres.snapshot: initial: a run that finds no stored position in the offsets store (not read by check) publishes the rows already in the tables first", "")
		return
	}
	if pos, err := stored(ctx); err != nil || pos != "" {
		return // a stored position: no snapshot (a damaged store is reported by the pipeline's check)
	}
	r := a.snapshotCheck(ctx)
	report(r.Name, r.OK, r.Reason, r.Fix)
}

// snapshotCheck is `outboxd check`'s snapshot line when source.postgres.snapshot: initial and no
// position is stored: the next run creates the slot with an exported snapshot, or drops the
// existing slot (a pgoutput slot; one of another kind is refused, never dropped) and takes the
// snapshot again, and publishes the tables' rows (counted now; an estimate when counting takes
// over 5 s) first. It fails for a table the snapshot cannot read and for an outbox.order_column
// a table lacks, as Open does.
func (a *Adapter) snapshotCheck(ctx context.Context) CheckResult {
	const name = "snapshot"
	conn, err := connectSession(ctx, a.cfg.DSN)
	if err != nil {
		return CheckResult{Name: name, Reason: err.Error(), Fix: "check source.dsn"}
	}
	defer conn.Close(context.Background())
	var plugin *string
	err = conn.QueryRow(ctx, "SELECT plugin FROM pg_replication_slots WHERE slot_name = $1", a.cfg.Slot).Scan(&plugin)
	exists := err == nil
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return CheckResult{Name: name, Reason: "look up slot " + a.cfg.Slot + ": " + err.Error(), Fix: "check the role may read pg_replication_slots"}
	}
	if exists && (plugin == nil || *plugin != "pgoutput") {
		return CheckResult{Name: name, Reason: fmt.Sprintf("slot %s exists but is not a pgoutput logical slot: the run refuses it (it never drops it)", a.cfg.Slot),
			Fix: "drop it or choose another source.postgres.slot"}
	}
	var counts []string
	for _, t := range a.cfg.Tables {
		cols, err := readScanColumns(ctx, conn, t)
		if err != nil {
			return CheckResult{Name: name, Reason: err.Error(), Fix: "see the table lines"}
		}
		if oc := a.cfg.OrderColumn; oc != "" && !slices.Contains(cols.names, oc) {
			return CheckResult{Name: name, Reason: fmt.Sprintf("outbox.order_column %q is not a column of %s, and the snapshot orders its rows by it", oc, t),
				Fix: "add the column, fix outbox.order_column, or remove it (the table's own order)"}
		}
		n, err := countRows(ctx, conn, t)
		if err != nil {
			return CheckResult{Name: name, Reason: err.Error(), Fix: "GRANT SELECT ON " + tableIdent(t) + " to the role"}
		}
		counts = append(counts, n+" of "+t)
	}
	what := "publishes " + source.JoinCounts(counts, "no rows (source.tables is empty)") + " first"
	if exists {
		return CheckResult{Name: name, OK: true, Reason: fmt.Sprintf("the next run drops the existing slot %s (no stored position) and takes the snapshot again: it %s (source.postgres.snapshot: initial)", a.cfg.Slot, what)}
	}
	return CheckResult{Name: name, OK: true, Reason: fmt.Sprintf("the next run creates slot %s with an exported snapshot and %s (source.postgres.snapshot: initial)", a.cfg.Slot, what)}
}

// countRows counts table's rows ("N rows"), or, when that takes over 5 s, gives the planner's
// estimate ("about N rows").
func countRows(ctx context.Context, conn *pgx.Conn, table string) (string, error) {
	var n int64
	_, err := conn.Exec(ctx, "SET statement_timeout = '5s'")
	if err == nil {
		err = conn.QueryRow(ctx, "SELECT count(*) FROM "+tableIdent(table)).Scan(&n)
	}
	if err == nil {
		return source.RowCount(n, false), nil
	}
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "57014" { // query_canceled
		return "", fmt.Errorf("count the rows of %s: %w", table, err)
	}
	var est float64
	if err := conn.QueryRow(ctx, "SELECT reltuples FROM pg_class WHERE oid = $1::regclass", tableIdent(table)).Scan(&est); err != nil {
		return "", fmt.Errorf("estimate the rows of %s: %w", table, err)
	}
	return source.RowCount(int64(max(est, 0)), true), nil
}

// noTableSnapshot is what snapshot: initial does with no table (setup.go takes no snapshot).
const noTableSnapshot = "source.postgres.snapshot: initial: source.tables is empty (the tableless outbox): there is nothing to snapshot; the next run streams from the slot's start as with never"

// snapshots reports whether a run without a stored position takes a snapshot (setup.go).
func (a *Adapter) snapshots() bool { return a.cfg.Snapshot == SnapshotInitial && len(a.cfg.Tables) > 0 }

// NoStoredPosition says what the next run does without a stored position.
func (a *Adapter) NoStoredPosition() string {
	if a.cfg.Snapshot == SnapshotInitial && len(a.cfg.Tables) == 0 {
		return noTableSnapshot
	}
	if a.snapshots() {
		return fmt.Sprintf("with source.postgres.snapshot: initial the next run publishes the rows already in the tables first: it creates slot %s with an exported snapshot, "+
			"or, when slot %s exists (it has no stored position), drops it and takes the snapshot again; then it streams from the slot's start", a.cfg.Slot, a.cfg.Slot)
	}
	return "the next run starts at the slot's confirmed position, or at the WAL end when it creates the slot"
}

// slotState is the slot as pg_replication_slots shows it, and the server's WAL end.
type slotState struct {
	exists                 bool
	confirmed, restart     *string
	walStatus              *string
	walEnd                 string
	lagBytes, retainedByte *int64
}

func (a *Adapter) querySlot(ctx context.Context) (slotState, error) {
	var s slotState
	conn, err := pgx.Connect(ctx, a.cfg.DSN)
	if err != nil {
		return s, fmt.Errorf("connect to PostgreSQL (source.dsn %s): %w", a.RedactedDSN(), err)
	}
	defer conn.Close(context.Background())
	if err := conn.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&s.walEnd); err != nil {
		return s, err
	}
	err = conn.QueryRow(ctx, `SELECT confirmed_flush_lsn::text, restart_lsn::text, wal_status,
			(pg_current_wal_lsn() - confirmed_flush_lsn)::bigint, (pg_current_wal_lsn() - restart_lsn)::bigint
		FROM pg_replication_slots WHERE slot_name = $1`, a.cfg.Slot).
		Scan(&s.confirmed, &s.restart, &s.walStatus, &s.lagBytes, &s.retainedByte)
	if errors.Is(err, pgx.ErrNoRows) {
		return s, nil
	}
	s.exists = err == nil
	return s, err
}

func orNone[T any](p *T, none string) string {
	if p == nil {
		return none
	}
	return fmt.Sprint(*p)
}

// ShowOffsets writes the server's WAL end and the slot's confirmed and restart positions, its
// wal_status, retained WAL and lag. stored is the stored position ("" for none).
func (a *Adapter) ShowOffsets(ctx context.Context, stored source.Position, w io.Writer) error {
	s, err := a.querySlot(ctx)
	if err != nil {
		return err
	}
	slot := a.cfg.Slot
	fmt.Fprintf(w, "server WAL end:       %s\n", s.walEnd)
	snap := stored == "" && a.snapshots()
	if !s.exists {
		fmt.Fprintf(w, "slot %s:        absent (created by the next run", slot)
		if stored != "" {
			fmt.Fprint(w, "; with a stored position the run refuses to start: the events after it are lost")
		} else if snap {
			fmt.Fprint(w, " with an exported snapshot: the rows already in the tables are published first, source.postgres.snapshot: initial")
		}
		fmt.Fprintln(w, ")")
		return nil
	}
	if snap {
		fmt.Fprintf(w, "next run:             drops slot %s (no stored position) and takes the snapshot again (source.postgres.snapshot: initial)\n", slot)
	}
	fmt.Fprintf(w, "slot %s confirmed_flush_lsn: %s\n", slot, orNone(s.confirmed, "-"))
	fmt.Fprintf(w, "slot restart_lsn:     %s (wal_status %s, retains %s bytes)\n", orNone(s.restart, "-"), orNone(s.walStatus, "-"), orNone(s.retainedByte, "?"))
	fmt.Fprintf(w, "lag:                  %s bytes (server WAL end - confirmed_flush_lsn)\n", orNone(s.lagBytes, "?"))
	return nil
}

// CheckPosition tells whether the slot can replay from pos: refused says why not (not an LSN,
// beyond the WAL end, no slot, a lost slot, before what the slot has confirmed); err is a
// failure to find out. A position after the slot's confirmed one is accepted with a warning on
// w: the transactions between them are skipped.
func (a *Adapter) CheckPosition(ctx context.Context, pos source.Position, w io.Writer) (refused, err error) {
	l, err := ParseLSN(pos)
	if err != nil {
		return fmt.Errorf("%q is not a PostgreSQL LSN like 0/16B3748: %v", pos, err), nil
	}
	s, err := a.querySlot(ctx)
	if err != nil {
		return nil, err
	}
	slot := a.cfg.Slot
	end, _ := ParseLSN(source.Position(s.walEnd))
	if l > end {
		return fmt.Errorf("%s is beyond the server's WAL end %s", pos, s.walEnd), nil
	}
	if !s.exists {
		return fmt.Errorf("slot %q does not exist, so no position can be replayed (a new slot starts at the WAL end); remove the offsets file to start fresh", slot), nil
	}
	if s.walStatus != nil && *s.walStatus == "lost" {
		return fmt.Errorf("slot %q is lost (wal_status lost): drop and recreate it", slot), nil
	}
	conf, _ := ParseLSN(source.Position(orNone(s.confirmed, "0/0")))
	if l < conf {
		return fmt.Errorf("slot %q has already confirmed %s; PostgreSQL cannot decode from the earlier %s. "+
			"Replaying older events needs a new slot created before them (not possible after the fact) or a backfill from the outbox table",
			slot, conf, pos), nil
	}
	if l > conf {
		fmt.Fprintf(w, "warning: transactions between the slot's confirmed %s and %s will be skipped (not delivered)\n", conf, pos)
	}
	return nil, nil
}
