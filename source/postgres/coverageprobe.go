package postgres

// Slot vs publication age at Open (issue 11, cases 3 and 18).
//
// pgoutput decides whether a change is published with the catalog as of that change. If the
// publication, or a table's membership in it, was created or changed after the stored position
// (while outboxd was stopped, or after it stopped because coverage changed), the rows committed
// between the stored position and that change were not published when committed, and the slot
// never streams them. A slot created before its publication is the same case (and the walsender
// fails with `publication "X" does not exist` as soon as it decodes a change from before it).
//
// The cheap test (PubShape.NewerThanSlot) compares the coverage rows' xmin with the slot's
// catalog_xmin: a row older than catalog_xmin was committed before anything the slot decodes.
// A younger one is only a "maybe", because catalog_xmin may lag behind the slot's restart point
// (a new slot starts with the oldest catalog_xmin of the server's other slots, or of the oldest
// running transaction, and it advances only as the slot confirms past running-xacts records).
// settleAge then decodes a temporary copy of the slot with test_decoding (skip-empty-xacts off,
// so catalog-only transactions show as BEGIN/COMMIT with their xid) and looks for those xids'
// commits: one at or after the stored position is a refusal; none means the change committed
// before the slot's confirmed position. When that probe cannot run (no test_decoding, no free
// slot), outboxd refuses, saying so.
//
// Known limit: a change made inside a subtransaction (SAVEPOINT) carries the subtransaction's
// xid, which test_decoding does not show; such a change after the stored position is then taken
// for an old one. While outboxd runs, the coverage watch catches every change regardless.

import (
	"context"
	"fmt"
	"strconv"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
)

// settleAge decides the NewerThanSlot hits: nil when every one committed before start (the stored
// position, or the slot's confirmed position when there is none), else the refusal.
func (s *Source) settleAge(ctx context.Context, conn *pgx.Conn, hits []AgeHit, from pglogrepl.LSN, si slotInfo) error {
	start := from
	if start == 0 && si.confirmedLSN != nil {
		start, _ = pglogrepl.ParseLSN(*si.confirmedLSN)
	}
	xids := make([]uint32, len(hits))
	for i, h := range hits {
		xids[i] = h.Xmin
	}
	commits, err := probeCommits(ctx, conn, s.cfg.Slot, xids)
	if err != nil {
		return s.refuseAge(hits, from, fmt.Sprintf(" (outboxd could not decode a copy of the slot to tell whether the change is older than the stored position: %v)", err))
	}
	var bad []AgeHit
	for _, h := range hits {
		if lsn, ok := commits[h.Xmin]; ok && lsn >= start {
			h.What += fmt.Sprintf(", committed at %s", lsn)
			bad = append(bad, h)
		}
	}
	if len(bad) == 0 {
		s.log.Info("publication changes younger than the slot's catalog_xmin committed before the slot's position (checked on a decoded copy of the slot)", "changes", len(hits), "position", start)
		return nil
	}
	return s.refuseAge(bad, from, "")
}

// probeCommits decodes a temporary test_decoding copy of slot and returns the commit LSN of each
// of xids that the slot still decodes (committed after its confirmed_flush_lsn).
func probeCommits(ctx context.Context, conn *pgx.Conn, slot string, xids []uint32) (map[uint32]pglogrepl.LSN, error) {
	probe := slot + "_probe"
	if len(probe) > 63 {
		probe = probe[len(probe)-63:]
	}
	if _, err := conn.Exec(ctx, `SELECT pg_copy_logical_replication_slot($1, $2, true, 'test_decoding')`, slot, probe); err != nil {
		return nil, fmt.Errorf("copy slot %q to a temporary test_decoding slot: %w", slot, err)
	}
	defer conn.Exec(context.Background(), `SELECT pg_drop_replication_slot($1)`, probe) // temporary: also dropped with the session
	texts := make([]string, len(xids))
	for i, x := range xids {
		texts[i] = strconv.FormatUint(uint64(x), 10)
	}
	rows, err := conn.Query(ctx, `SELECT xid::text, min(lsn)::text
		FROM pg_logical_slot_peek_changes($1, NULL, NULL, 'include-xids', '1', 'skip-empty-xacts', '0')
		WHERE data LIKE 'COMMIT%' AND xid::text = ANY ($2::text[]) GROUP BY xid::text`, probe, texts)
	if err != nil {
		return nil, fmt.Errorf("decode the temporary copy of slot %q: %w", slot, err)
	}
	defer rows.Close()
	out := make(map[uint32]pglogrepl.LSN)
	for rows.Next() {
		var x, l string
		if err := rows.Scan(&x, &l); err != nil {
			return nil, fmt.Errorf("decode the temporary copy of slot %q: %w", slot, err)
		}
		xid, err1 := strconv.ParseUint(x, 10, 32)
		lsn, err2 := pglogrepl.ParseLSN(l)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("decode the temporary copy of slot %q: unreadable row %q %q", slot, x, l)
		}
		out[uint32(xid)] = lsn
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("decode the temporary copy of slot %q: %w", slot, err)
	}
	return out, nil
}
