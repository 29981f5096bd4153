package mysql

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/go-mysql-org/go-mysql/client"
	gomysql "github.com/go-mysql-org/go-mysql/mysql"
	perrors "github.com/pingcap/errors"

	"github.com/outboxd/outboxd/source"
)

// serverInfo is what Open learns about the server.
type serverInfo struct {
	version     string
	mariadb     bool
	logBin      string
	format      string
	rowImage    string
	rowMetadata string // "" when the server has no binlog_row_metadata (MySQL < 8.0.1, MariaDB < 10.5)
	gtidMode    string // MySQL only
	serverID    string // @@server_id
	serverUUID  string // @@server_uuid (MySQL only)
}

// origin returns the server part of a position read from this server: MySQL's server_uuid,
// else (MariaDB has none) the server_id.
func (i serverInfo) origin() origin {
	if i.serverUUID != "" {
		return origin{serverUUID: i.serverUUID}
	}
	return origin{serverID: i.serverID}
}

func (i serverInfo) flavor() string {
	if i.mariadb {
		return gomysql.MariaDBFlavor
	}
	return gomysql.MySQLFlavor
}

// connect opens a SQL connection to the DSN's server.
func connect(ctx context.Context, d dsn) (*client.Conn, error) {
	dialer := &net.Dialer{Timeout: d.Timeout}
	c, err := client.ConnectWithDialer(ctx, d.Net, d.Addr, d.User, d.Password, d.DB, dialer.DialContext,
		func(c *client.Conn) error {
			if t := d.TLSConfig(); t != nil {
				c.SetTLSConfig(t)
			}
			return nil
		})
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", d.Redacted(), cause(err))
	}
	return c, nil
}

// query runs a query and returns its rows as text (NULL as ""). The strings are copied: go-mysql
// returns them aliasing result-set memory that Close recycles for later queries.
func query(c *client.Conn, q string, args ...any) ([][]string, error) {
	r, err := c.Execute(q, args...)
	if err != nil {
		return nil, cause(err)
	}
	defer r.Close()
	out := make([][]string, r.RowNumber())
	for i := range out {
		out[i] = make([]string, r.ColumnNumber())
		for j := range out[i] {
			v, _ := r.GetString(i, j)
			out[i][j] = strings.Clone(v)
		}
	}
	return out, nil
}

func readServerInfo(c *client.Conn) (serverInfo, error) {
	var info serverInfo
	rows, err := query(c, "SELECT VERSION()")
	if err != nil {
		return info, err
	}
	info.version = rows[0][0]
	info.mariadb = strings.Contains(strings.ToLower(info.version), "mariadb")
	rows, err = query(c, "SHOW GLOBAL VARIABLES WHERE Variable_name IN "+
		"('log_bin','binlog_format','binlog_row_image','binlog_row_metadata','gtid_mode','server_id','server_uuid')")
	if err != nil {
		return info, err
	}
	for _, r := range rows {
		v := strings.ToUpper(r[1])
		switch strings.ToLower(r[0]) {
		case "log_bin":
			info.logBin = v
		case "binlog_format":
			info.format = v
		case "binlog_row_image":
			info.rowImage = v
		case "binlog_row_metadata":
			info.rowMetadata = v
		case "gtid_mode":
			info.gtidMode = v
		case "server_id":
			info.serverID = r[1]
		case "server_uuid":
			info.serverUUID = strings.ToLower(r[1])
		}
	}
	return info, nil
}

// checkPrerequisites reports the first binlog setting that makes capture impossible.
func (i serverInfo) checkPrerequisites() error {
	fix := "set log_bin, binlog_format=ROW and binlog_row_image=FULL in the server configuration (my.cnf) and restart it"
	if i.logBin != "ON" && i.logBin != "1" {
		return fmt.Errorf("the server's binary log is off (log_bin=%s): %s", i.logBin, fix)
	}
	if i.format != "ROW" {
		return fmt.Errorf("binlog_format=%s, outboxd needs ROW: %s", i.format, fix)
	}
	if i.rowImage != "FULL" {
		return fmt.Errorf("binlog_row_image=%s, outboxd needs FULL (other images may omit outbox columns): %s", i.rowImage, fix)
	}
	return nil
}

// currentPosition returns the server's current binlog end in the given form, with its origin
// (server identity and binlog file:pos; see origin).
func currentPosition(c *client.Conn, kind posKind) (position, error) {
	info, err := readServerInfo(c)
	if err != nil {
		return position{}, err
	}
	for attempt := 0; ; attempt++ {
		st, err := binlogStatus(c)
		if err != nil {
			return position{}, err
		}
		var p position
		switch kind {
		case kindMariaGTID:
			// gtid_binlog_pos and the binlog end are two reads: they belong together only if
			// the end did not move in between.
			rows, err := query(c, "SELECT @@GLOBAL.gtid_binlog_pos")
			if err != nil {
				return position{}, err
			}
			if p, err = parsePosition2(rows[0][0], kindMariaGTID); err != nil {
				return position{}, err
			}
			again, err := binlogStatus(c)
			if err != nil {
				return position{}, err
			}
			if again != st {
				if attempt < 10 {
					continue
				}
				p.origin = info.origin() // a busy server: the binlog part is left out
				return p, nil
			}
		case kindMySQLGTID:
			if p, err = parsePosition2(st.executed, kindMySQLGTID); err != nil {
				return position{}, err
			}
		default:
			p = position{kind: kindFile, file: st.file, pos: st.pos}
		}
		p.origin = info.origin()
		if kind != kindFile {
			p.binlog, p.binlogPos = st.file, st.pos
		}
		return p, nil
	}
}

// binlogStat is one SHOW BINARY LOG STATUS (SHOW MASTER STATUS) answer.
type binlogStat struct {
	file     string
	pos      uint32
	executed string // MySQL's Executed_Gtid_Set (read in the same statement as file and pos)
}

func binlogStatus(c *client.Conn) (binlogStat, error) {
	rows, err := query(c, "SHOW BINARY LOG STATUS") // MySQL 8.2+, MariaDB 10.5.2+
	if err != nil {
		if rows, err = query(c, "SHOW MASTER STATUS"); err != nil {
			return binlogStat{}, fmt.Errorf("read the current binlog position: %w", err)
		}
	}
	return binlogStatFromRows(rows) // snapshot.go
}

// earliestPosition returns the start of the oldest binlog the server still has, in the given
// form: its first file at offset 4, or the GTID state at its start (MariaDB: the file's
// Gtid_list; MySQL: gtid_purged, the transactions no longer in any binlog).
func earliestPosition(c *client.Conn, kind posKind) (position, error) {
	info, err := readServerInfo(c)
	if err != nil {
		return position{}, err
	}
	logs, err := binaryLogs(c)
	if err != nil {
		return position{}, err
	}
	if len(logs) == 0 {
		return position{}, errors.New("the server lists no binary logs (SHOW BINARY LOGS is empty): is log_bin on?")
	}
	oldest := logs[0].name
	var p position
	switch kind {
	case kindMariaGTID:
		name, state, err := oldestMariaState(c)
		if err != nil {
			return position{}, fmt.Errorf("read the GTID state at the start of %s: %w", oldest, err)
		}
		oldest = name
		p = position{kind: kindMariaGTID, maria: state}
	case kindMySQLGTID:
		rows, err := query(c, "SELECT @@GLOBAL.gtid_purged")
		if err != nil {
			return position{}, err
		}
		if p, err = parsePosition2(rows[0][0], kindMySQLGTID); err != nil {
			return position{}, err
		}
	default:
		p = position{kind: kindFile, file: oldest, pos: 4}
	}
	p.origin = info.origin()
	if kind != kindFile {
		p.binlog, p.binlogPos = oldest, 4
	}
	return p, nil
}

// parsePosition2 parses a server-reported GTID text (possibly empty) of a known form.
func parsePosition2(s string, kind posKind) (position, error) {
	s = strings.ReplaceAll(strings.TrimSpace(s), "\n", "")
	if s == "" {
		p := position{kind: kind}
		if kind == kindMySQLGTID {
			set, _ := gomysql.ParseMysqlGTIDSet("")
			p.mysql = set.(*gomysql.MysqlGTIDSet)
		}
		return p, nil
	}
	p, err := parsePosition(source.Position(s))
	if err != nil {
		return p, err
	}
	if p.kind != kind {
		return p, fmt.Errorf("server reported %q, expected a %s", s, kind)
	}
	return p, nil
}

type binlogFile struct {
	name string
	size uint64
}

func binaryLogs(c *client.Conn) ([]binlogFile, error) {
	rows, err := query(c, "SHOW BINARY LOGS")
	if err != nil {
		return nil, fmt.Errorf("SHOW BINARY LOGS (needs the REPLICATION CLIENT / BINLOG MONITOR privilege): %w", err)
	}
	out := make([]binlogFile, 0, len(rows))
	for _, r := range rows {
		n, _ := strconv.ParseUint(r[1], 10, 64)
		out = append(out, binlogFile{r[0], n})
	}
	return out, nil
}

// oldestMariaState returns the name of the oldest binlog and the GTID state at its start (its
// Gtid_list event): the server can stream from any position at or after that state.
func oldestMariaState(c *client.Conn) (string, mariaGTIDs, error) {
	logs, err := binaryLogs(c)
	if err != nil || len(logs) == 0 {
		return "", nil, err
	}
	rows, err := query(c, fmt.Sprintf("SHOW BINLOG EVENTS IN '%s' LIMIT 10", strings.ReplaceAll(logs[0].name, "'", "''")))
	if err != nil {
		return logs[0].name, nil, err
	}
	for _, r := range rows {
		if len(r) > 5 && strings.EqualFold(r[2], "Gtid_list") {
			info := strings.Trim(strings.TrimSpace(r[5]), "[]")
			if info == "" {
				return logs[0].name, nil, nil
			}
			state, err := parseGTIDState(info)
			if err != nil {
				return logs[0].name, nil, fmt.Errorf("unexpected Gtid_list %q: %w", info, err)
			}
			return logs[0].name, state, nil
		}
	}
	return logs[0].name, nil, nil
}

// purgedError is the loud failure for a position whose binlog is gone.
func purgedError(start position, what, suggestion string) error {
	return lostf("binlog position %s can no longer be served: %s. The events after it were purged from the "+
		"server's binary log, so resuming would silently lose outbox rows. To recover: republish whatever was lost if "+
		"needed, then store a position the server still has with `outboxd offsets set -c FILE --position %s` (or "+
		"remove the stored offsets to start at the current binlog end); and keep binlogs longer than outboxd can be "+
		"down (binlog_expire_logs_seconds / expire_logs_days)", start, what, suggestion)
}

// checkServable verifies that the server still holds the binlog from start on; it catches
// purged binlogs before streaming (the server would answer error 1236 anyway, see
// explainStreamError).
func checkServable(c *client.Conn, start position) error {
	switch start.kind {
	case kindFile:
		logs, err := binaryLogs(c)
		if err != nil {
			return err
		}
		if len(logs) == 0 {
			return errors.New("the server lists no binary logs (SHOW BINARY LOGS is empty)")
		}
		for _, l := range logs {
			if l.name == start.file {
				if uint64(start.pos) > l.size {
					return lostf("binlog position %s is past the end of %s (%d bytes): the stored position does not belong to this server's binlog", start, l.name, l.size)
				}
				return nil
			}
		}
		oldest, newest := logs[0].name, logs[len(logs)-1].name
		if compareBinlogFile(start.file, oldest) < 0 {
			return purgedError(start, fmt.Sprintf("binlog file %s was purged (the oldest binlog on the server is %s)", start.file, oldest), oldest+":4")
		}
		return lostf("binlog position %s: file %s is not on the server (its binlogs are %s .. %s): the stored position belongs to another server, or the binlog was reset (RESET MASTER); set a position with `outboxd offsets set`", start, start.file, oldest, newest)
	case kindMariaGTID:
		oldest, state, err := oldestMariaState(c)
		if err != nil {
			return nil // best effort: the server's own check (error 1236) still applies
		}
		for _, g := range state {
			have, _ := start.maria.seq(g.DomainID)
			if have < g.SequenceNumber {
				return purgedError(start, fmt.Sprintf("the transactions after it, GTID %d-%d-%d through %d-%d-%d, were purged (the oldest binlog on the server, %s, starts after %s)",
					g.DomainID, g.ServerID, have+1, g.DomainID, g.ServerID, g.SequenceNumber, oldest, state), state.String())
			}
		}
	case kindMySQLGTID:
		rows, err := query(c, "SELECT @@GLOBAL.gtid_purged")
		if err != nil {
			return nil
		}
		purged, err := parsePosition2(rows[0][0], kindMySQLGTID)
		if err != nil || purged.mysql.IsEmpty() {
			return nil
		}
		if !start.mysql.Contain(purged.mysql) {
			return purgedError(start, fmt.Sprintf("the server has purged GTIDs %s (gtid_purged), and the stored set does not contain them all", purged), purged.String())
		}
	}
	return nil
}

// myError returns the server error inside err, if any.
func myError(err error) *gomysql.MyError {
	var me *gomysql.MyError
	if errors.As(err, &me) {
		return me
	}
	if me, ok := perrors.Cause(err).(*gomysql.MyError); ok {
		return me
	}
	return nil
}

// cause strips pingcap's stack annotations, keeping the message.
func cause(err error) error {
	if c := perrors.Cause(err); c != nil {
		return c
	}
	return err
}

// fatalServerError reports whether err is a server answer that retrying cannot fix: the
// binlog position cannot be served (1236), or access is denied. Other server errors (shutdown
// in progress, connection killed, too many connections) are worth a reconnect.
func fatalServerError(err error) bool {
	me := myError(err)
	if me == nil {
		return false
	}
	switch me.Code {
	case gomysql.ER_MASTER_FATAL_ERROR_READING_BINLOG, gomysql.ER_ACCESS_DENIED_ERROR,
		gomysql.ER_DBACCESS_DENIED_ERROR, gomysql.ER_SPECIFIC_ACCESS_DENIED_ERROR,
		gomysql.ER_TABLEACCESS_DENIED_ERROR, gomysql.ER_BAD_DB_ERROR:
		return true
	}
	return false
}

// serverError is an error the server answered; it unwraps to the *MyError so that callers can
// tell it from a lost connection (and stop retrying).
type serverError struct {
	msg  string
	me   *gomysql.MyError
	lost bool // the position cannot be served (wraps source.ErrPositionLost)
}

func (e *serverError) Error() string { return e.msg }
func (e *serverError) Unwrap() []error {
	if e.lost {
		return []error{e.me, source.ErrPositionLost}
	}
	return []error{e.me}
}

// lostError is a position the server can no longer serve: it wraps source.ErrPositionLost so
// that the pipeline stops loudly instead of retrying.
type lostError struct{ msg string }

func (e *lostError) Error() string { return e.msg }
func (e *lostError) Unwrap() error { return source.ErrPositionLost }

func lostf(format string, args ...any) error { return &lostError{fmt.Sprintf(format, args...)} }

// explainStreamError turns the server's refusal to stream (error 1236, ER_MASTER_FATAL_ERROR_
// READING_BINLOG: purged binlog, unknown GTID, position out of range) into the purge message,
// and any other server error into one naming the position.
func explainStreamError(err error, start position) error {
	me := myError(err)
	if me == nil {
		return err
	}
	if me.Code == gomysql.ER_MASTER_FATAL_ERROR_READING_BINLOG {
		what := "the server refused to stream from it (error 1236: " + me.Message + ")"
		sugg := "<a position the server has>"
		if start.kind == kindFile {
			sugg = "<oldest binlog file>:4"
		}
		return &serverError{purgedError(start, what, sugg).Error(), me, true}
	}
	return &serverError{fmt.Sprintf("binlog stream from %s: server error %d: %s", start, me.Code, me.Message), me, false}
}
