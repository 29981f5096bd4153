package app

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"

	"github.com/outboxd/outboxd/internal/config"
	"github.com/outboxd/outboxd/source"
	"github.com/outboxd/outboxd/source/mysql"
)

func mysqlConfig(c *config.Config) mysql.Config {
	return mysql.Config{DSN: c.Source.DSN, Tables: c.Source.Tables, ServerID: c.Source.MySQL.ServerID,
		Start: c.Source.MySQL.Start, AllowMinimalRowMetadata: c.Source.MySQL.AllowMinimalRowMetadata,
		OffsetsStore: storeDescription(c)}
}

func outboxColumns(c *config.Config) []string {
	cols := []string{c.Outbox.Columns.ID, c.Outbox.Columns.AggregateID, c.Outbox.Columns.Payload}
	if strings.Contains(c.Outbox.Topic, "${routedByValue}") {
		cols = append(cols, c.Outbox.Columns.AggregateType)
	}
	for _, h := range c.Outbox.Headers {
		cols = append(cols, h.Column)
	}
	return cols
}

func checkMySQL(ctx context.Context, c *config.Config) []CheckResult {
	st, err := mysql.Inspect(ctx, mysqlConfig(c), outboxColumns(c)...)
	if err != nil {
		return []CheckResult{{Name: "mysql reachable", Reason: err.Error(),
			Fix: "check source.dsn (host, port, user, password, database) and that the server accepts the connection"}}
	}
	out := []CheckResult{{Name: "mysql reachable", OK: true, Reason: st.Flavor + " " + st.Version}}
	add := func(name, got, want, fix string) {
		if strings.EqualFold(got, want) {
			out = append(out, CheckResult{Name: name, OK: true, Reason: got})
		} else {
			out = append(out, CheckResult{Name: name, Reason: fmt.Sprintf("is %q, needs %s", got, want), Fix: fix})
		}
	}
	add("log_bin", st.LogBin, "ON", "start the server with log-bin (and a server_id) and restart it")
	add("binlog_format", st.BinlogFormat, "ROW", "SET GLOBAL binlog_format = ROW (and in my.cnf); reconnect writers")
	add("binlog_row_image", st.BinlogRowImage, "FULL", "SET GLOBAL binlog_row_image = FULL (and in my.cnf)")
	switch {
	case st.ColumnNames == "binlog":
		out = append(out, CheckResult{Name: "column names", OK: true, Reason: "from the binlog (binlog_row_metadata=FULL)"})
	case c.Source.MySQL.AllowMinimalRowMetadata:
		out = append(out, CheckResult{Name: "column names", OK: true,
			Reason: "from information_schema, tracked across DDL (binlog_row_metadata=" + st.BinlogRowMetadata +
				", allowed by source.mysql.allow_minimal_row_metadata: an ALTER while outboxd is stopped mis-decodes older rows)"})
	}
	lctn := "case-sensitively: source.tables must match the spelling exactly"
	if st.LowerCaseTableNames != 0 {
		lctn = "case-insensitively"
	}
	out = append(out, CheckResult{Name: "lower_case_table_names", OK: true, Reason: fmt.Sprintf("%d, table names compared %s", st.LowerCaseTableNames, lctn)})
	filters := "none"
	if len(st.BinlogDoDB)+len(st.BinlogIgnoreDB) > 0 {
		filters = fmt.Sprintf("binlog-do-db=%s binlog-ignore-db=%s", strings.Join(st.BinlogDoDB, ","), strings.Join(st.BinlogIgnoreDB, ","))
	}
	filtersOK := true
	for _, p := range st.Problems {
		filtersOK = filtersOK && p.Check != "binlog filters"
	}
	if filtersOK {
		out = append(out, CheckResult{Name: "binlog filters", OK: true, Reason: filters + " (every outbox database is logged)"})
	}
	for _, p := range st.Problems {
		out = append(out, CheckResult{Name: p.Check, Reason: p.Reason, Fix: p.Fix})
	}
	if st.ReplicationGrant {
		out = append(out, CheckResult{Name: "replication privileges", OK: true})
	} else {
		out = append(out, CheckResult{Name: "replication privileges", Reason: "the user lacks REPLICATION SLAVE",
			Fix: "GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO <user>"})
	}
	for _, t := range c.Source.Tables {
		missingTable := false
		for _, m := range st.MissingTables {
			missingTable = missingTable || m == t
		}
		switch {
		case missingTable:
			out = append(out, CheckResult{Name: "table " + t, Reason: "does not exist (or is not visible to this user)", Fix: "create the outbox table or fix source.tables"})
		case len(st.MissingColumns[t]) > 0:
			cols := st.MissingColumns[t]
			sort.Strings(cols)
			out = append(out, CheckResult{Name: "table " + t, Reason: "lacks column(s) " + strings.Join(cols, ", "),
				Fix: "add the columns or map them in outbox.columns / outbox.headers"})
		case !slices.ContainsFunc(st.Problems, func(p mysql.Problem) bool { return p.Check == "table "+t }):
			out = append(out, CheckResult{Name: "table " + t, OK: true})
		}
	}
	if st.Prerequisites != nil {
		out = append(out, CheckResult{Name: "binlog capture", Reason: st.Prerequisites.Error(), Fix: "see the settings above"})
	}
	return out
}

func showMySQL(ctx context.Context, c *config.Config, stored source.Position, w io.Writer) error {
	st, err := mysql.Inspect(ctx, mysqlConfig(c))
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "server:               %s %s\n", st.Flavor, st.Version)
	fmt.Fprintf(w, "server position now:  %s\n", st.Position)
	if stored != "" {
		if err := mysql.CheckPosition(ctx, mysqlConfig(c), stored); err != nil {
			fmt.Fprintf(w, "stored position servable: NO — %v\n", err)
		} else {
			fmt.Fprintf(w, "stored position servable: yes\n")
		}
	} else if s := c.Source.MySQL.Start; s != "" {
		fmt.Fprintf(w, "next run starts at:   source.mysql.start: %s\n", s)
	}
	return nil
}

func validateMySQLPosition(ctx context.Context, c *config.Config, pos source.Position, w io.Writer) error {
	if err := mysql.CheckPosition(ctx, mysqlConfig(c), pos); err != nil {
		return fmt.Errorf("%w: %v", ErrRefused, err)
	}
	return nil
}
