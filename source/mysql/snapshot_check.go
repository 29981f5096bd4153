package mysql

import (
	"context"
	"fmt"
	"strings"
)

// CheckSnapshot reports why source.mysql.snapshot: initial could not be taken on the server, for
// `outboxd check` (nil when it can): every outbox table must exist and be readable (SELECT),
// with Config.OrderColumn among its columns; MariaDB must report the snapshot's binlog position
// (binlog_snapshot_file: the binlog is on); on MySQL the user needs RELOAD (FLUSH TABLES WITH
// READ LOCK, see snapshot.go), read from SHOW GRANTS (privileges granted through a role that is
// not active by default are not seen). It opens its own connection, bounded by ctx.
func CheckSnapshot(ctx context.Context, cfg Config) error {
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
	}
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
