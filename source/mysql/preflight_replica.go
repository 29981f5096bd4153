package mysql

// Replica-side filters (issue 17): when the server outboxd reads is itself a replica and logs
// what it applies (log_slave_updates / log_replica_updates), its replicate-* filters decide
// which rows replicated from its primary reach its binlog. A filter that keeps an outbox table
// out means outboxd never sees the rows the application writes on the primary: a FAIL.
// readReplicas does the I/O; replicaLines and replicaFilters.excludes decide, as pure functions.

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/go-mysql-org/go-mysql/client"
)

// replicaFilters are one replication channel's (MariaDB: connection's) filters, as
// SHOW REPLICA STATUS shows them (comma-separated lists split).
type replicaFilters struct {
	Channel                                                            string // "" for the default channel / connection
	Source                                                             string // host:port of its primary
	MariaDB                                                            bool   // the fix is MariaDB's SET GLOBAL replicate_*, else MySQL's CHANGE REPLICATION FILTER
	DoDB, IgnoreDB, DoTable, IgnoreTable, WildDoTable, WildIgnoreTable []string
}

// filterColumns are the status columns (and MariaDB's global variables, lower-cased) of each
// filter, in replicaFilters' field order.
var filterColumns = []string{"replicate_do_db", "replicate_ignore_db", "replicate_do_table",
	"replicate_ignore_table", "replicate_wild_do_table", "replicate_wild_ignore_table"}

func (f *replicaFilters) lists() []*[]string {
	return []*[]string{&f.DoDB, &f.IgnoreDB, &f.DoTable, &f.IgnoreTable, &f.WildDoTable, &f.WildIgnoreTable}
}

// readReplicas returns the server's replication channels; none when it is not a replica.
// MariaDB: SHOW ALL SLAVES STATUS (every named connection) with the global replicate_*
// variables merged into the default connection's; MySQL: SHOW REPLICA STATUS (8.0.22+), else
// SHOW SLAVE STATUS.
func readReplicas(c *client.Conn, mariadb bool) ([]replicaFilters, error) {
	var rows []nullRow
	var err error
	if mariadb {
		rows, err = queryNamed(c, "SHOW ALL SLAVES STATUS")
	} else if rows, err = queryNamed(c, "SHOW REPLICA STATUS"); err != nil {
		rows, err = queryNamed(c, "SHOW SLAVE STATUS")
	}
	if err != nil {
		return nil, fmt.Errorf("read the replica status (SHOW REPLICA STATUS): %w", err)
	}
	get := func(r nullRow, names ...string) string {
		for _, n := range names {
			if v, ok := r[n]; ok {
				return v.String
			}
		}
		return ""
	}
	var out []replicaFilters
	for _, r := range rows {
		f := replicaFilters{Channel: get(r, "channel_name", "connection_name"), MariaDB: mariadb,
			Source: get(r, "source_host", "master_host") + ":" + get(r, "source_port", "master_port")}
		for i, l := range f.lists() {
			*l = splitList(get(r, filterColumns[i]))
		}
		out = append(out, f)
	}
	if !mariadb || len(out) == 0 {
		return out, nil
	}
	vars, err := query(c, "SHOW GLOBAL VARIABLES WHERE Variable_name IN ('"+strings.Join(filterColumns, "','")+"')")
	if err != nil {
		return nil, fmt.Errorf("read the replicate_* variables: %w", err)
	}
	for i := range out {
		if out[i].Channel != "" {
			continue
		}
		for _, v := range vars {
			j := slices.Index(filterColumns, strings.ToLower(v[0]))
			if j < 0 {
				continue
			}
			l := out[i].lists()[j]
			for _, e := range splitList(v[1]) {
				if !slices.Contains(*l, e) {
					*l = append(*l, e)
				}
			}
		}
	}
	return out, nil
}

// mariadbReplicaFallback is the "replica filters" line from what a user without SLAVE MONITOR
// may read on MariaDB: the Slaves_running status (0: no replication applies rows here now)
// and the global replicate_* variables (the default connection's filters).
func mariadbReplicaFallback(c *client.Conn, logUpdates string, captured map[tableKey]string, fold bool) (checkLine, error) {
	rows, err := query(c, "SHOW GLOBAL STATUS WHERE Variable_name = 'Slaves_running'")
	if err != nil || len(rows) == 0 {
		return checkLine{}, fmt.Errorf("read Slaves_running: %v", err)
	}
	if strings.TrimSpace(rows[0][1]) == "0" {
		return checkLine{name: "replica filters", ok: true, reason: "no replication applies rows here (Slaves_running=0)"}, nil
	}
	vars, err := query(c, "SHOW GLOBAL VARIABLES WHERE Variable_name IN ('"+strings.Join(filterColumns, "','")+"')")
	if err != nil {
		return checkLine{}, err
	}
	f := replicaFilters{Source: "its primary", MariaDB: true}
	for _, v := range vars {
		if j := slices.Index(filterColumns, strings.ToLower(v[0])); j >= 0 {
			*f.lists()[j] = splitList(v[1])
		}
	}
	return replicaLines([]replicaFilters{f}, logUpdates, captured, fold)[0], nil
}

// exclusion is why a channel's filters keep a table out: the filter (a filterColumns name),
// and the entry to remove from it, or (add) the entry to add to it.
type exclusion struct {
	Filter, Entry string
	Add           bool
	Why           string
}

// excludes evaluates MySQL's replica filter rules for a row change of table k (row-based
// logging: the database checked is the changed table's): database options first
// (replicate-do-db: the database must be listed; else replicate-ignore-db: it must not be),
// then table options in order: a replicate-do-table match executes, a replicate-ignore-table
// match ignores, a replicate-wild-do-table match executes, a replicate-wild-ignore-table match
// ignores; with no match the change is ignored when any do-table or wild-do-table option
// exists, else executed. Names compare case-insensitively when fold (lower_case_table_names
// != 0); wild patterns match db.table with LIKE's % and _, case-insensitively. nil: the table
// is replicated.
func (f replicaFilters) excludes(k tableKey, fold bool) *exclusion {
	eq := func(a, b string) bool {
		if fold {
			return strings.EqualFold(a, b)
		}
		return a == b
	}
	name := k.String()
	if len(f.DoDB) > 0 {
		if !slices.ContainsFunc(f.DoDB, func(d string) bool { return eq(d, k.DB) }) {
			return &exclusion{Filter: "replicate_do_db", Entry: k.DB, Add: true,
				Why: fmt.Sprintf("Replicate_Do_DB (%s) does not list %s", strings.Join(f.DoDB, ","), k.DB)}
		}
	} else if i := slices.IndexFunc(f.IgnoreDB, func(d string) bool { return eq(d, k.DB) }); i >= 0 {
		return &exclusion{Filter: "replicate_ignore_db", Entry: f.IgnoreDB[i], Why: "Replicate_Ignore_DB lists " + f.IgnoreDB[i]}
	}
	if slices.ContainsFunc(f.DoTable, func(t string) bool { return eq(t, name) }) {
		return nil
	}
	if i := slices.IndexFunc(f.IgnoreTable, func(t string) bool { return eq(t, name) }); i >= 0 {
		return &exclusion{Filter: "replicate_ignore_table", Entry: f.IgnoreTable[i], Why: "Replicate_Ignore_Table lists " + f.IgnoreTable[i]}
	}
	if slices.ContainsFunc(f.WildDoTable, func(p string) bool { return likeMatch(p, name) }) {
		return nil
	}
	if i := slices.IndexFunc(f.WildIgnoreTable, func(p string) bool { return likeMatch(p, name) }); i >= 0 {
		return &exclusion{Filter: "replicate_wild_ignore_table", Entry: f.WildIgnoreTable[i],
			Why: fmt.Sprintf("Replicate_Wild_Ignore_Table pattern %s matches %s", f.WildIgnoreTable[i], name)}
	}
	if len(f.DoTable)+len(f.WildDoTable) > 0 {
		return &exclusion{Filter: "replicate_do_table", Entry: name, Add: true,
			Why: fmt.Sprintf("Replicate_Do_Table (%s) and Replicate_Wild_Do_Table (%s) neither list nor match %s",
				orNone(strings.Join(f.DoTable, ",")), orNone(strings.Join(f.WildDoTable, ",")), name)}
	}
	return nil
}

// likeMatch reports whether s matches the LIKE pattern p (% any run, _ one character, \
// escapes), case-insensitively, as the server matches replicate-wild-*-table patterns.
func likeMatch(p, s string) bool {
	pr, sr := []rune(strings.ToLower(p)), []rune(strings.ToLower(s))
	var match func(i, j int) bool
	match = func(i, j int) bool {
		for i < len(pr) {
			switch c := pr[i]; {
			case c == '%':
				for i < len(pr) && pr[i] == '%' {
					i++
				}
				if i == len(pr) {
					return true
				}
				for ; j <= len(sr); j++ {
					if match(i, j) {
						return true
					}
				}
				return false
			case j == len(sr):
				return false
			case c == '_':
			case c == '\\' && i+1 < len(pr):
				i++
				if pr[i] != sr[j] {
					return false
				}
			default:
				if c != sr[j] {
					return false
				}
			}
			i++
			j++
		}
		return j == len(sr)
	}
	return match(0, 0)
}

// checkLine is one line of `outboxd check`.
type checkLine struct {
	name, reason, fix string
	ok                bool
}

// replicaLines decides the "replica filters" line: not a replica (OK); a replica that does not
// log what it applies (WARN: outboxd sees only rows written on this server itself); a table
// that every channel's filters keep out (FAIL); one that only some channels keep out (WARN:
// fine when another channel carries it); else OK. logUpdates is @@log_replica_updates (or
// @@log_slave_updates).
func replicaLines(reps []replicaFilters, logUpdates string, captured map[tableKey]string, fold bool) []checkLine {
	const name = "replica filters"
	if len(reps) == 0 {
		return []checkLine{{name: name, ok: true, reason: "not a replica (no replication channel): its binlog holds the writes made on this server"}}
	}
	var sources []string
	for _, r := range reps {
		s := r.Source
		if r.Channel != "" {
			s += " (channel " + r.Channel + ")"
		}
		sources = append(sources, s)
	}
	of := "a replica of " + strings.Join(sources, ", ")
	if !strings.EqualFold(logUpdates, "ON") && logUpdates != "1" {
		return []checkLine{{name: name, ok: true,
			reason: fmt.Sprintf("this server is %s and log_slave_updates is %s: rows it applies from its primary are not written to its binlog, "+
				"so outboxd sees only rows written on this server itself", of, orNone(logUpdates)),
			fix: "point source.dsn at the primary the application writes to, or set log_slave_updates=ON " +
				"(log_replica_updates on MySQL 8.0.26+) in my.cnf and restart the server"}}
	}
	keys := make([]tableKey, 0, len(captured))
	for k := range captured {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].String() < keys[j].String() })
	var fails, warns, fixes []string
	for _, k := range keys {
		var whys []string
		for _, r := range reps {
			e := r.excludes(k, fold)
			if e == nil {
				continue
			}
			ch := "the default channel"
			if r.Channel != "" {
				ch = "channel " + r.Channel
			}
			whys = append(whys, ch+": "+e.Why)
			fixes = append(fixes, filterFix(r, e))
		}
		switch {
		case len(whys) == 0:
		case len(whys) == len(reps):
			fails = append(fails, fmt.Sprintf("rows of %s replicated from the primary are not applied here, so they never reach this binlog (%s)",
				captured[k], strings.Join(whys, "; ")))
		default:
			warns = append(warns, fmt.Sprintf("%s is filtered out on %s; fine only if another channel carries it", captured[k], strings.Join(whys, "; ")))
		}
	}
	fix := strings.Join(fixes, "; ") + "; or point source.dsn at the primary the application writes to"
	switch {
	case len(fails) > 0:
		return []checkLine{{name: name, reason: "this server is " + of + ": " + strings.Join(append(fails, warns...), "; "), fix: fix}}
	case len(warns) > 0:
		return []checkLine{{name: name, ok: true, reason: "this server is " + of + ": " + strings.Join(warns, "; "), fix: fix}}
	}
	return []checkLine{{name: name, ok: true, reason: "this server is " + of + " with log_slave_updates=ON; no replicate-* filter excludes an outbox table"}}
}

// filterFix is the statement that stops the channel's filter from excluding the table: its
// list with the entry removed (or added), as MariaDB or MySQL sets it at runtime.
func filterFix(r replicaFilters, e *exclusion) string {
	list := *r.lists()[slices.Index(filterColumns, e.Filter)]
	var next []string
	for _, v := range list {
		if v != e.Entry {
			next = append(next, v)
		}
	}
	if e.Add {
		next = append(slices.Clone(list), e.Entry)
	}
	if r.MariaDB {
		conn := ""
		if r.Channel != "" {
			conn = fmt.Sprintf("SET default_master_connection = '%s'; ", r.Channel)
		}
		return fmt.Sprintf("%sSTOP SLAVE; SET GLOBAL %s = '%s'; START SLAVE (and the same %s in my.cnf)",
			conn, e.Filter, strings.Join(next, ","), e.Filter)
	}
	quoted := next
	if strings.Contains(e.Filter, "wild") {
		quoted = make([]string, len(next))
		for i, v := range next {
			quoted[i] = "'" + v + "'"
		}
	}
	ch := ""
	if r.Channel != "" {
		ch = fmt.Sprintf(" FOR CHANNEL '%s'", r.Channel)
	}
	return fmt.Sprintf("STOP REPLICA SQL_THREAD%s; CHANGE REPLICATION FILTER %s = (%s)%s; START REPLICA SQL_THREAD%s (and --%s in my.cnf)",
		ch, strings.ToUpper(e.Filter), strings.Join(quoted, ", "), ch, ch, strings.ReplaceAll(e.Filter, "_", "-"))
}
