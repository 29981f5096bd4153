package mysql

// Is a start position one of this server's binlog? A GTID position alone cannot say: after
// RESET MASTER (or on a server restored from a backup) the sequence numbers start again, and a
// stored "0-1-5" names another transaction once the server has written five more; streaming
// from it silently skips those. Observed on MariaDB 10.11 (and
// asserted by the RESET MASTER e2e tests, test/e2e/mysql_positions_e2e_test.go): RESET MASTER leaves @@server_id alone, deletes every binlog
// and starts again at mysql-bin.000001 (whose Gtid_list is empty), and empties
// gtid_binlog_state and gtid_binlog_pos; the next transaction is 0-1-1.
//
// So a position carries its origin (see origin): the server's identity and the binlog file
// and offset at which its last transaction ended. checkStart compares them with the server:
//
//   - identity: another server_uuid (MySQL) or server_id (MariaDB) is another server;
//   - the binlog file: one with a higher number than the server's newest means the numbering
//     restarted (RESET MASTER, a restore); a listed one must be long enough and have an event
//     boundary at the stored offset; on MariaDB, BINLOG_GTID_POS(file, offset) must give the
//     stored GTID of at least one domain (the transaction that ended there is the stored one);
//   - GTID history (also for positions of the older form, without origin): every stored
//     domain and server id must be in gtid_binlog_state, and not ahead of gtid_binlog_pos
//     (MySQL: gtid_executed must contain the stored set).
//
// Known limit: a server whose binlog after RESET MASTER happens to have the same layout as
// before (same sizes of every transaction up to the stored offset) and the same sequence
// numbers there is not told apart; MySQL has no BINLOG_GTID_POS, so there only the event
// boundary is checked in a listed file.

import (
	"fmt"
	"strings"

	"github.com/go-mysql-org/go-mysql/client"
	gomysql "github.com/go-mysql-org/go-mysql/mysql"
)

// startFacts is what checkStart reads from the server about a start position.
type startFacts struct {
	info serverInfo
	logs []binlogFile
	// For the position's binlog file, when listed and an offset is known:
	boundary   bool   // the offset is an event boundary of the file (or its end)
	atPosKnown bool   // MariaDB GTID: gtidAtPos was read
	gtidAtPos  string // BINLOG_GTID_POS(file, offset); "" with atPosKnown: NULL or empty
	// GTID history.
	binlogState string // MariaDB gtid_binlog_state
	binlogEnd   string // MariaDB gtid_binlog_pos
	executed    string // MySQL gtid_executed
}

// checkStart refuses a start position that this server cannot serve as the same history: a
// position of another server, of a binlog that was reset or restored, or purged. It wraps
// source.ErrPositionLost.
func checkStart(c *client.Conn, info serverInfo, start position) error {
	if start.kind == kindNone {
		return nil
	}
	f, err := readStartFacts(c, info, start)
	if err != nil {
		return err
	}
	if err := judgeStart(start, f); err != nil {
		return err
	}
	return checkServable(c, start)
}

// binlogOf returns the binlog file and offset a position was read at ("" when unknown).
func (p position) binlogOf() (string, uint32) {
	if p.kind == kindFile {
		return p.file, p.pos
	}
	return p.binlog, p.binlogPos
}

func readStartFacts(c *client.Conn, info serverInfo, start position) (startFacts, error) {
	f := startFacts{info: info}
	var err error
	if f.logs, err = binaryLogs(c); err != nil {
		return f, err
	}
	file, pos := start.binlogOf()
	if l, ok := findLog(f.logs, file); ok && pos != 0 && uint64(pos) <= l.size {
		if info.mariadb && start.kind == kindMariaGTID {
			// NULL: the offset is not an event boundary of the file.
			rows, err := query(c, fmt.Sprintf("SELECT IFNULL(BINLOG_GTID_POS(%s, %d), 'NULL')", sqlString(file), pos))
			if err != nil {
				return f, fmt.Errorf("BINLOG_GTID_POS(%s, %d): %w", file, pos, err)
			}
			f.boundary = rows[0][0] != "NULL"
			f.atPosKnown, f.gtidAtPos = f.boundary, rows[0][0]
		} else {
			_, err := query(c, fmt.Sprintf("SHOW BINLOG EVENTS IN %s FROM %d LIMIT 1", sqlString(file), pos))
			switch me := myError(err); {
			case err == nil:
				f.boundary = true
			case me != nil && me.Code == gomysql.ER_ERROR_WHEN_EXECUTING_COMMAND:
				f.boundary = false // "Wrong offset or I/O error"
			default:
				return f, fmt.Errorf("SHOW BINLOG EVENTS IN %s FROM %d: %w", file, pos, err)
			}
		}
	}
	switch start.kind {
	case kindMariaGTID:
		rows, err := query(c, "SELECT @@GLOBAL.gtid_binlog_state, @@GLOBAL.gtid_binlog_pos")
		if err != nil {
			return f, err
		}
		f.binlogState, f.binlogEnd = rows[0][0], rows[0][1]
	case kindMySQLGTID:
		rows, err := query(c, "SELECT @@GLOBAL.gtid_executed")
		if err != nil {
			return f, err
		}
		f.executed = rows[0][0]
	}
	return f, nil
}

func findLog(logs []binlogFile, name string) (binlogFile, bool) {
	for _, l := range logs {
		if l.name == name {
			return l, true
		}
	}
	return binlogFile{}, false
}

// lostFix is the recovery every origin refusal names.
const lostFix = "To recover: if source.dsn points at the wrong server, point it at the server the position was read from. " +
	"If this is the right server, the rows committed after the stored position may be lost or renumbered: re-publish what " +
	"consumers missed if needed (e.g. from the outbox table), then store a position of this server with " +
	"`outboxd offsets set -c FILE --position POS` (`outboxd offsets show` prints the server's current position), or remove " +
	"the stored offsets and set source.mysql.start"

func originLost(start position, format string, args ...any) error {
	return lostf("stored position %s does not belong to this server's binlog: %s. Resuming from it would silently skip "+
		"or mis-order outbox rows. %s", start, fmt.Sprintf(format, args...), lostFix)
}

// judgeStart decides from the facts whether start belongs to this server's binlog history.
func judgeStart(start position, f startFacts) error {
	// Identity.
	switch {
	case start.serverUUID != "" && f.info.serverUUID == "":
		return originLost(start, "it was read from the MySQL server with server_uuid %s, but source.dsn reaches a server without server_uuid (%s, server_id %s)",
			start.serverUUID, f.info.version, f.info.serverID)
	case start.serverUUID != "" && start.serverUUID != f.info.serverUUID:
		return originLost(start, "it was read from the server with server_uuid %s, but source.dsn reaches server_uuid %s (another server, or one restored from another's data)",
			start.serverUUID, f.info.serverUUID)
	case start.serverID != "" && f.info.serverUUID != "":
		return originLost(start, "it was read from the MariaDB server with server_id %s, but source.dsn reaches the MySQL server with server_uuid %s",
			start.serverID, f.info.serverUUID)
	case start.serverID != "" && start.serverID != f.info.serverID:
		return originLost(start, "it was read from the server with server_id %s, but source.dsn reaches server_id %s (another server)",
			start.serverID, f.info.serverID)
	}

	// The binlog file.
	file, pos := start.binlogOf()
	if file != "" && len(f.logs) > 0 {
		oldest, newest := f.logs[0].name, f.logs[len(f.logs)-1].name
		if l, ok := findLog(f.logs, file); ok {
			switch {
			case uint64(pos) > l.size:
				return originLost(start, "%s is only %d bytes long, shorter than the stored offset %d: the binlog was reset (RESET MASTER) or the server restored from a backup, and this %s is another file",
					file, l.size, pos, file)
			case pos != 0 && !f.boundary:
				return originLost(start, "offset %d is not an event boundary in %s: the binlog was reset (RESET MASTER) or the server restored from a backup, and this %s is another file",
					pos, file, file)
			case f.atPosKnown && !sameGTIDAt(start.maria, f.gtidAtPos):
				return originLost(start, "the transaction that ends at %s:%d has GTID position %q, not the stored %s: the binlog was reset (RESET MASTER) or the server restored from a backup, and the GTID sequence numbers now name other transactions",
					file, pos, f.gtidAtPos, start.maria)
			}
		} else if base, n := splitBinlogName(file); base == baseName(newest) {
			_, newestN := splitBinlogName(newest)
			if n > newestN {
				return originLost(start, "binlog file %s is not on the server, whose binlogs end at %s (%s .. %s): the binlog numbering restarted (RESET MASTER), or the server was restored from a backup",
					file, newest, oldest, newest)
			}
		}
	}

	// GTID history.
	switch start.kind {
	case kindMariaGTID:
		state, err := parseGTIDState(f.binlogState)
		if err != nil {
			return fmt.Errorf("server's gtid_binlog_state: %w", err)
		}
		end, err := parseGTIDState(f.binlogEnd)
		if err != nil {
			return fmt.Errorf("server's gtid_binlog_pos: %w", err)
		}
		if err := judgeMariaHistory(start, strings.ReplaceAll(f.binlogState, " ", ""), state, end); err != nil {
			return err
		}
	case kindMySQLGTID:
		exec, err := parsePosition2(f.executed, kindMySQLGTID)
		if err != nil {
			return fmt.Errorf("server's gtid_executed %q: %w", f.executed, err)
		}
		if !exec.mysql.Contain(start.mysql) {
			return originLost(start, "the server's gtid_executed %s does not contain every stored transaction: the binlog was reset (RESET MASTER), the server restored from a backup, or it is another server",
				exec.mysql)
		}
	}
	return nil
}

// judgeMariaHistory checks every stored GTID against the server's GTID state. stateText is
// gtid_binlog_state as text; state holds it as the highest GTID per domain, which loses the
// per-server entries, so those are looked up in the text.
func judgeMariaHistory(start position, stateText string, state, end mariaGTIDs) error {
	for _, g := range start.maria {
		if _, ok := state.seq(g.DomainID); !ok {
			return originLost(start, "the server has no GTIDs of domain %d (gtid_binlog_state is %q): its binlog was reset (RESET MASTER), or it is another or a restored server",
				g.DomainID, stateText)
		}
		if seq, _ := end.seq(g.DomainID); seq < g.SequenceNumber {
			return originLost(start, "the server's binlog ends at GTID %s in domain %d, before the stored %d-%d-%d: its binlog was reset (RESET MASTER) or it was restored from a backup",
				end, g.DomainID, g.DomainID, g.ServerID, g.SequenceNumber)
		}
		seq, ok := stateSeq(stateText, g.DomainID, g.ServerID)
		if !ok || seq < g.SequenceNumber {
			return originLost(start, "the server's binlog never had GTID %d-%d-%d (gtid_binlog_state is %q): its binlog was reset (RESET MASTER), or it is another or a restored server",
				g.DomainID, g.ServerID, g.SequenceNumber, stateText)
		}
	}
	return nil
}

// stateSeq returns the last sequence number of (domain, server) in a gtid_binlog_state text,
// which lists one GTID per domain and server id.
func stateSeq(stateText string, domain, server uint32) (uint64, bool) {
	for _, part := range strings.Split(stateText, ",") {
		g, err := gomysql.ParseMariadbGTID(strings.TrimSpace(part))
		if err == nil && g.DomainID == domain && g.ServerID == server {
			return g.SequenceNumber, true
		}
	}
	return 0, false
}

// sameGTIDAt reports whether the GTID position the server gives for a binlog offset names the
// same transaction as the stored one in at least one domain: the domain of the stored
// position's last transaction always matches when the offset is where it ended (other domains
// may be behind, in a position set by hand).
func sameGTIDAt(stored mariaGTIDs, atPos string) bool {
	for _, part := range strings.Split(atPos, ",") {
		h, err := gomysql.ParseMariadbGTID(strings.TrimSpace(part))
		if err != nil {
			return false // not a GTID state: not the stored transaction either
		}
		for _, g := range stored {
			if g == *h {
				return true
			}
		}
	}
	return false
}

func baseName(file string) string {
	b, _ := splitBinlogName(file)
	return b
}
