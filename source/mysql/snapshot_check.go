package mysql

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/go-mysql-org/go-mysql/client"
	"github.com/outboxd/outboxd/source"
)

// CheckSnapshot reports why source.mysql.snapshot: initial could not be taken on the server, for
// `outboxd check` (nil when it can): every outbox table must exist and be readable (SELECT),
// with Config.OrderColumn among its columns; MariaDB must report the snapshot's binlog position
// (binlog_snapshot_file: the binlog is on); on MySQL the user needs RELOAD (FLUSH TABLES WITH
// READ LOCK, see snapshot.go), read from SHOW GRANTS (privileges granted through a role that is
// not active by default are not seen). It opens its own connection, bounded by ctx.
func CheckSnapshot(ctx context.Context, cfg Config) error {
	_, err := snapshotPlan(ctx, cfg, false)
	return err
}

// snapshotPlan is CheckSnapshot; with count, it also says how many rows the snapshot would
// publish now: "N rows of T", joined for several tables (rowsOf), counted (an estimate when
// counting takes over 5 s).
func snapshotPlan(ctx context.Context, cfg Config, count bool) (string, error) {
	var counts []string
	err := func() error {
		s := New(cfg, nil)
		if s.cfgErr != nil {
			return s.cfgErr
		}
		c, err := connect(ctx, s.dsn)
		if err != nil {
			return err
		}
		defer c.Close()
		info, err := readServerInfo(c)
		if err != nil {
			return err
		}
		for _, name := range cfg.Tables {
			t, err := s.loadScanTable(c, name)
			if err != nil {
				return err
			}
			if _, err := t.orderBy(cfg.OrderColumn); err != nil {
				return err
			}
			if _, err := query(c, "SELECT 1 FROM "+t.from()+" LIMIT 0"); err != nil {
				return fmt.Errorf("cannot read table %s (GRANT SELECT ON %s TO the outboxd user): %w", name, t.from(), err)
			}
			if count {
				n, err := countTableRows(c, t, info.mariadb)
				if err != nil {
					return err
				}
				counts = append(counts, n+" of "+name)
			}
		}
		return snapshotServerCheck(c, info)
	}()
	return source.JoinCounts(counts, "no rows"), err
}

// countTableRows counts t's rows ("N rows"), or, when that takes over 5 s, gives InnoDB's
// estimate ("about N rows").
func countTableRows(c *client.Conn, t *scanTable, mariadb bool) (string, error) {
	q := "SELECT /*+ MAX_EXECUTION_TIME(5000) */ COUNT(*) FROM " + t.from()
	if mariadb {
		q = "SET STATEMENT max_statement_time = 5 FOR SELECT COUNT(*) FROM " + t.from()
	}
	rows, err := query(c, q)
	if err == nil && len(rows) == 1 && len(rows[0]) == 1 {
		n, perr := strconv.ParseInt(rows[0][0], 10, 64)
		if perr == nil {
			return source.RowCount(n, false), nil
		}
	}
	if err == nil {
		return "", fmt.Errorf("count the rows of %s: unexpected answer %v", t.name, rows)
	}
	if me := myError(err); me == nil || (me.Code != 1969 && me.Code != 3024) { // ER_STATEMENT_TIMEOUT, ER_QUERY_TIMEOUT
		return "", fmt.Errorf("count the rows of %s: %w", t.name, err)
	}
	rows, err = query(c, "SELECT IFNULL(TABLE_ROWS, 0) FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?", t.key.DB, t.key.Table)
	if err != nil {
		return "", fmt.Errorf("estimate the rows of %s: %w", t.name, err)
	}
	if len(rows) != 1 {
		return "", fmt.Errorf("estimate the rows of %s: not in information_schema.TABLES", t.name)
	}
	n, _ := strconv.ParseInt(rows[0][0], 10, 64)
	return source.RowCount(n, true), nil
}

// snapshotServerCheck: the server can give the snapshot's binlog position (see CheckSnapshot).
func snapshotServerCheck(c *client.Conn, info serverInfo) error {
	if info.mariadb {
		rows, err := query(c, "SHOW STATUS LIKE 'binlog_snapshot_file'")
		if err != nil {
			return fmt.Errorf("SHOW STATUS LIKE 'binlog_snapshot_file': %w", err)
		}
		if len(rows) == 0 || len(rows[0]) < 2 || rows[0][1] == "" {
			return fmt.Errorf("the server reports no binlog_snapshot_file: the binary log must be on")
		}
		return nil
	}
	rows, err := query(c, "SHOW GRANTS")
	if err != nil {
		return fmt.Errorf("SHOW GRANTS: %w", err)
	}
	if !hasReload(rows) {
		return fmt.Errorf("the user lacks the RELOAD privilege, which snapshot: initial needs on MySQL for FLUSH TABLES WITH READ LOCK " +
			"(GRANT RELOAD ON *.* TO the outboxd user)")
	}
	return nil
}

// hasReload reports whether SHOW GRANTS lines grant RELOAD (or ALL PRIVILEGES) on *.*. Pure.
func hasReload(rows [][]string) bool {
	for _, r := range rows {
		for _, g := range r {
			u := strings.ToUpper(g)
			on := strings.Index(u, " ON *.*")
			if !strings.HasPrefix(u, "GRANT ") || on < 0 {
				continue
			}
			for _, p := range strings.Split(u[len("GRANT "):on], ",") {
				if p = strings.TrimSpace(p); p == "RELOAD" || p == "ALL" || p == "ALL PRIVILEGES" {
					return true
				}
			}
		}
	}
	return false
}

// snapshotLine is `outboxd check`'s start line when source.mysql.snapshot: initial takes a
// snapshot (rows: rowsOf). Pure.
func snapshotLine(rows, start string) string {
	s := "none stored; the next run takes a snapshot and publishes " + rows + " first (source.mysql.snapshot: initial), then streams from the snapshot's binlog position"
	if start != "" {
		s += "; source.mysql.start (" + start + ") is ignored"
	}
	return s
}
