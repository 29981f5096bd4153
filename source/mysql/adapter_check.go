package mysql

// The MySQL lines of `outboxd check` (and of `run` before it starts): the server's binlog
// settings, privileges, the outbox tables, and where the run starts.

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/outboxd/outboxd/source"
)

// Preflight runs the MySQL checks of `outboxd check` and reports each line in order: the server
// (Inspect), then the start position (checkStart). stored reads the stored position; nil when
// the store's position is not read by check (see checkStart).
func (a *Adapter) Preflight(ctx context.Context, stored func(context.Context) (source.Position, error), report func(name string, ok bool, reason, fix string)) {
	a.checkServer(ctx, report)
	a.checkStart(ctx, stored, report)
}

func (a *Adapter) checkServer(ctx context.Context, report func(name string, ok bool, reason, fix string)) {
	pass := func(name, reason string) { report(name, true, reason, "") }
	fail := func(name, reason, fix string) { report(name, false, reason, fix) }
	st, err := Inspect(ctx, a.Config(), a.set.Columns...)
	if err != nil {
		fail("mysql reachable", err.Error(), "check source.dsn (host, port, user, password, database) and that the server accepts the connection")
		return
	}
	pass("mysql reachable", st.Flavor+" "+st.Version)
	want := func(name, got, want, fix string) {
		if strings.EqualFold(got, want) {
			pass(name, got)
		} else {
			fail(name, fmt.Sprintf("is %q, needs %s", got, want), fix)
		}
	}
	want("log_bin", st.LogBin, "ON", "start the server with log-bin (and a server_id) and restart it")
	want("binlog_format", st.BinlogFormat, "ROW", "SET GLOBAL binlog_format = ROW (and in my.cnf); reconnect writers")
	want("binlog_row_image", st.BinlogRowImage, "FULL", "SET GLOBAL binlog_row_image = FULL (and in my.cnf)")
	switch {
	case st.ColumnNames == "binlog":
		pass("column names", "from the binlog (binlog_row_metadata=FULL)")
	case a.set.AllowMinimalRowMetadata:
		pass("column names", "from information_schema, tracked across DDL (binlog_row_metadata="+st.BinlogRowMetadata+
			", allowed by source.mysql.allow_minimal_row_metadata: an ALTER while outboxd is stopped mis-decodes older rows)")
	}
	lctn := "case-sensitively: source.tables must match the spelling exactly"
	if st.LowerCaseTableNames != 0 {
		lctn = "case-insensitively"
	}
	pass("lower_case_table_names", fmt.Sprintf("%d, table names compared %s", st.LowerCaseTableNames, lctn))
	filters := "none"
	if len(st.BinlogDoDB)+len(st.BinlogIgnoreDB) > 0 {
		filters = fmt.Sprintf("binlog-do-db=%s binlog-ignore-db=%s", strings.Join(st.BinlogDoDB, ","), strings.Join(st.BinlogIgnoreDB, ","))
	}
	if !slices.ContainsFunc(st.Problems, func(p Problem) bool { return p.Check == "binlog filters" }) {
		pass("binlog filters", filters+" (every outbox database is logged)")
	}
	for _, p := range st.Problems {
		fail(p.Check, p.Reason, p.Fix)
	}
	if st.ReplicationGrant {
		pass("replication privileges", "")
	} else {
		fail("replication privileges", "the user lacks REPLICATION SLAVE", "GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO <user>")
	}
	for _, t := range a.set.Tables {
		switch {
		case slices.Contains(st.MissingTables, t):
			fail("table "+t, "does not exist (or is not visible to this user)", "create the outbox table or fix source.tables")
		case len(st.MissingColumns[t]) > 0:
			cols := st.MissingColumns[t]
			sort.Strings(cols)
			fail("table "+t, "lacks column(s) "+strings.Join(cols, ", "), "add the columns or map them in outbox.columns / outbox.headers")
		case !slices.ContainsFunc(st.Problems, func(p Problem) bool { return p.Check == "table "+t }):
			pass("table "+t, "")
		}
	}
	if st.Prerequisites != nil {
		fail("binlog capture", st.Prerequisites.Error(), "see the settings above")
	}
	// Binlog retention (WARN lines) and replica-side filters: preflight_retention.go.
	a.checkRetention(ctx, st, report)
}

// checkStart is the preflight of where a run starts, so that `check` catches what `run`
// refuses: no stored position and no source.mysql.start, a damaged offsets file, a stored (or
// configured) position this server cannot serve as the same binlog history (purged, RESET
// MASTER, a restored or another server). A nil stored means the positions are in a store check
// does not read (offsets.store kafka: reading them may wait for a transaction of a crashed
// exactly_once producer, which only the pipeline's own producer ends); the source checks them
// when it opens.
func (a *Adapter) checkStart(ctx context.Context, stored func(context.Context) (source.Position, error), report func(name string, ok bool, reason, fix string)) {
	const name = "start position"
	if stored == nil {
		report(name, true, "stored in "+a.store+"; checked when the pipeline starts", "")
		return
	}
	pos, err := stored(ctx)
	if err != nil {
		report(name, false, err.Error(), "restore the offsets file, or store a position with `outboxd offsets set`")
		return
	}
	what := "stored position " + string(pos)
	if snap, _ := snapshotInitial(a.set.Snapshot); pos == "" && snap {
		rows, err := snapshotPlan(ctx, a.Config(), true)
		if err != nil {
			report(name, false, "none stored, and source.mysql.snapshot: initial cannot be taken: "+err.Error(),
				"see the reason; or set source.mysql.snapshot: never and source.mysql.start")
			return
		}
		report(name, true, snapshotLine(rows, a.set.Start), "") // snapshot_check.go
		return
	}
	if pos == "" {
		switch s := a.set.Start; s {
		case "":
			report(name, false, fmt.Sprintf("no stored position in %s, and source.mysql.start is not set (run refuses to guess)", a.store),
				"first run: set source.mysql.start: current (from the binlog end now) or earliest (from the oldest binlog on the server); "+
					"offsets lost: restore them, or set source.mysql.start (or `outboxd offsets set`) to the last delivered position")
			return
		case "current", "earliest":
			report(name, true, "none stored; the run starts at source.mysql.start: "+s, "")
			return
		default:
			what, pos = "source.mysql.start "+s, source.Position(s)
		}
	}
	if err := CheckPosition(ctx, a.Config(), pos); err != nil {
		report(name, false, what+" cannot be served: "+err.Error(), "see the reason; `outboxd offsets show` prints the server's current position")
		return
	}
	report(name, true, what+" is servable", "")
}
