package mysql

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"
	"github.com/google/uuid"
	"github.com/outboxd/outboxd/source"
)

// posKind is the form of a position text.
type posKind int

const (
	kindNone      posKind = iota // the empty position
	kindFile                     // "mysql-bin.000003:1234"
	kindMariaGTID                // "0-1-42" or "0-1-42,1-2-7" (one GTID per replication domain)
	kindMySQLGTID                // "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-42[,...]"
)

func (k posKind) String() string {
	switch k {
	case kindFile:
		return "binlog file:pos"
	case kindMariaGTID:
		return "MariaDB GTID"
	case kindMySQLGTID:
		return "MySQL GTID set"
	}
	return "empty"
}

// mariaGTIDs is a MariaDB GTID position: the last GTID of each replication domain, sorted by
// domain id.
type mariaGTIDs []gomysql.MariadbGTID

func (g mariaGTIDs) String() string {
	var buf [64]byte
	b := buf[:0]
	for i, x := range g {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendUint(b, uint64(x.DomainID), 10)
		b = append(b, '-')
		b = strconv.AppendUint(b, uint64(x.ServerID), 10)
		b = append(b, '-')
		b = strconv.AppendUint(b, x.SequenceNumber, 10)
	}
	return string(b)
}

// set records gtid as the last one of its domain and returns the updated position.
func (g mariaGTIDs) set(gtid gomysql.MariadbGTID) mariaGTIDs {
	i, found := slices.BinarySearchFunc(g, gtid.DomainID, func(x gomysql.MariadbGTID, d uint32) int {
		return int(int64(x.DomainID) - int64(d))
	})
	if found {
		g[i] = gtid
		return g
	}
	return slices.Insert(g, i, gtid)
}

// parseGTIDState reads a MariaDB GTID state as the server reports it (gtid_binlog_state, a
// Gtid_list event, BINLOG_GTID_POS), which may list several server ids per domain (after a
// failover), as a position: per domain the GTID with the highest sequence number (sequence
// numbers only grow within a domain). The empty text is the empty state.
func parseGTIDState(text string) (mariaGTIDs, error) {
	var g mariaGTIDs
	for _, part := range strings.Split(text, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		x, err := gomysql.ParseMariadbGTID(part)
		if err != nil {
			return nil, fmt.Errorf("GTID state %q: %w", text, err)
		}
		if have, ok := g.seq(x.DomainID); !ok || x.SequenceNumber > have {
			g = g.set(*x)
		}
	}
	return g, nil
}

func (g mariaGTIDs) seq(domain uint32) (uint64, bool) {
	for _, x := range g {
		if x.DomainID == domain {
			return x.SequenceNumber, true
		}
	}
	return 0, false
}

// position is a parsed position text: the core (where to resume: file:pos or a GTID
// position) and, in the current form, where it was read (see origin).
type position struct {
	kind  posKind
	file  string
	pos   uint32
	maria mariaGTIDs
	mysql *gomysql.MysqlGTIDSet
	origin
}

// origin says which server and binlog a position was read from, so that Open can tell a
// position of this server's binlog from one that only looks servable (RESET MASTER, a server
// restored from a backup, another server: see checkStart). It is the text after the core:
//
//	0-1-42;binlog=mysql-bin.000003:1234;server_id=1                  MariaDB GTID
//	3e11fa47-...:1-42;binlog=binlog.000003:1234;server_uuid=3e11fa47-... MySQL GTID set
//	mysql-bin.000003:1234;server_id=1                                 binlog file:pos
//
// binlog is the file in which the position's last transaction ended and the offset just after
// it (GTID forms only: file:pos says it already); the offset is left out when the server did
// not report one. Positions of the older forms (the core alone) have an empty origin.
type origin struct {
	serverID   string // MariaDB @@server_id of the server read from
	serverUUID string // MySQL @@server_uuid
	binlog     string // GTID forms: the binlog file of the last transaction
	binlogPos  uint32 // its end offset in that file (0: unknown)
}

func (o origin) isZero() bool { return o == origin{} }

// suffix renders the origin as the text after a core ("" when empty).
func (o origin) suffix(kind posKind) string {
	var b strings.Builder
	if o.binlog != "" && kind != kindFile {
		b.WriteString(";binlog=")
		b.WriteString(o.binlog)
		if o.binlogPos != 0 {
			b.WriteByte(':')
			b.WriteString(strconv.FormatUint(uint64(o.binlogPos), 10))
		}
	}
	switch {
	case o.serverUUID != "":
		b.WriteString(";server_uuid=")
		b.WriteString(o.serverUUID)
	case o.serverID != "":
		b.WriteString(";server_id=")
		b.WriteString(o.serverID)
	}
	return b.String()
}

// String renders the position with its origin.
func (p position) String() string {
	c := p.coreString()
	if c == "" {
		return ""
	}
	return c + p.origin.suffix(p.kind)
}

// coreString renders the core alone (the older form).
func (p position) coreString() string {
	switch p.kind {
	case kindFile:
		return p.file + ":" + strconv.FormatUint(uint64(p.pos), 10)
	case kindMariaGTID:
		return p.maria.String()
	case kindMySQLGTID:
		return p.mysql.String()
	}
	return ""
}

// core returns the position without its origin.
func (p position) core() position {
	p.origin = origin{}
	return p
}

// parsePosition reads a position text in any of the three forms, with or without its origin
// (see origin). The empty text is kindNone.
func parsePosition(s source.Position) (position, error) {
	t := strings.TrimSpace(string(s))
	if t == "" {
		return position{kind: kindNone}, nil
	}
	core, rest, hasOrigin := strings.Cut(t, ";")
	p, err := parseCore(strings.TrimSpace(core))
	if err != nil || !hasOrigin {
		return p, err
	}
	if p.origin, err = parseOrigin(rest, p.kind); err != nil {
		return position{}, fmt.Errorf("position %q: %w", t, err)
	}
	return p, nil
}

// parseOrigin reads the ";key=value" fields after a core.
func parseOrigin(rest string, kind posKind) (origin, error) {
	var o origin
	seen := map[string]bool{}
	for _, f := range strings.Split(rest, ";") {
		k, v, ok := strings.Cut(strings.TrimSpace(f), "=")
		if !ok || v == "" {
			return o, fmt.Errorf("%q is not key=value (keys: binlog, server_id, server_uuid)", f)
		}
		if seen[k] {
			return o, fmt.Errorf("%s appears twice", k)
		}
		seen[k] = true
		switch k {
		case "binlog":
			if kind == kindFile {
				return o, errors.New("binlog= is only for GTID positions (a file:pos position names its file)")
			}
			file, pos, hasPos := strings.Cut(v, ":")
			if file == "" || strings.ContainsAny(file, "/ ") {
				return o, fmt.Errorf("binlog=%s: not a binlog file name", v)
			}
			o.binlog = file
			if hasPos {
				n, err := strconv.ParseUint(pos, 10, 32)
				if err != nil || n == 0 {
					return o, fmt.Errorf("binlog=%s: the offset is not a positive number", v)
				}
				o.binlogPos = uint32(n)
			}
		case "server_id":
			if _, err := strconv.ParseUint(v, 10, 32); err != nil {
				return o, fmt.Errorf("server_id=%s is not a number", v)
			}
			o.serverID = v
		case "server_uuid":
			u, err := uuid.Parse(v)
			if err != nil {
				return o, fmt.Errorf("server_uuid=%s is not a UUID", v)
			}
			o.serverUUID = u.String()
		default:
			return o, fmt.Errorf("unknown field %q (keys: binlog, server_id, server_uuid)", k)
		}
	}
	if o.serverID != "" && o.serverUUID != "" {
		return o, errors.New("both server_id and server_uuid: a position is read from one server")
	}
	return o, nil
}

// parseCore reads the core of a position text (trimmed, non-empty).
func parseCore(t string) (position, error) {
	if t == "" {
		return position{}, errors.New("position has no binlog position or GTID before ';'")
	}
	if i := strings.IndexByte(t, ':'); i == 36 {
		if _, err := uuid.Parse(t[:i]); err == nil {
			set, err := gomysql.ParseMysqlGTIDSet(strings.ReplaceAll(t, "\n", ""))
			if err != nil {
				return position{}, fmt.Errorf("position %q: invalid MySQL GTID set: %v", t, err)
			}
			return position{kind: kindMySQLGTID, mysql: set.(*gomysql.MysqlGTIDSet)}, nil
		}
	}
	if isMariaGTIDText(t) {
		var g mariaGTIDs
		for _, part := range strings.Split(t, ",") {
			x, err := gomysql.ParseMariadbGTID(part)
			if err != nil {
				return position{}, fmt.Errorf("position %q: %v", t, err)
			}
			if _, dup := g.seq(x.DomainID); dup {
				return position{}, fmt.Errorf("position %q: domain %d appears twice", t, x.DomainID)
			}
			g = g.set(*x)
		}
		return position{kind: kindMariaGTID, maria: g}, nil
	}
	if i := strings.LastIndexByte(t, ':'); i > 0 {
		n, err := strconv.ParseUint(t[i+1:], 10, 32)
		if err == nil && !strings.ContainsAny(t[:i], ":/ ") {
			return position{kind: kindFile, file: t[:i], pos: uint32(n)}, nil
		}
	}
	return position{}, fmt.Errorf("position %q is neither a GTID set (MariaDB 0-1-42, MySQL uuid:1-42) nor binlog-file:pos", t)
}

func isMariaGTIDText(t string) bool {
	for _, part := range strings.Split(t, ",") {
		f := strings.Split(part, "-")
		if len(f) != 3 {
			return false
		}
		for _, x := range f {
			if x == "" || strings.Trim(x, "0123456789") != "" {
				return false
			}
		}
	}
	return true
}

// ComparePosition orders two positions handed out by this source: -1 if a is before b, 0 if
// equal, 1 if after.
//
//   - binlog file:pos: by file sequence number (the numeric extension), then offset.
//   - MariaDB GTID: per replication domain by sequence number (a missing domain counts as 0).
//     If every domain of a is at or before b's, a is before (or equal to) b; symmetrically for
//     after. Positions that are ahead in one domain and behind in another are ordered by the sum
//     of their sequence numbers (only possible with several domains).
//   - MySQL GTID set: by inclusion (a ⊂ b means before); sets that are not nested are ordered by
//     the number of transactions they contain.
//
// Only the cores are compared: the origin (server and binlog file, see origin) is ignored, so
// a position of the older form compares with its current form as equal. The empty position is
// before every other one. Positions of different forms, or texts that do
// not parse, compare as plain strings: one source never hands out such a mix.
func ComparePosition(a, b source.Position) int {
	if a == b {
		return 0
	}
	pa, ea := parsePosition(a)
	pb, eb := parsePosition(b)
	switch {
	case ea != nil || eb != nil:
		return strings.Compare(string(a), string(b))
	case pa.kind == kindNone:
		return -1
	case pb.kind == kindNone:
		return 1
	case pa.kind != pb.kind:
		return strings.Compare(string(a), string(b))
	}
	switch pa.kind {
	case kindFile:
		if c := compareBinlogFile(pa.file, pb.file); c != 0 {
			return c
		}
		return cmpInt(uint64(pa.pos), uint64(pb.pos))
	case kindMariaGTID:
		return compareMaria(pa.maria, pb.maria)
	default:
		return compareMySQLSets(pa.mysql, pb.mysql)
	}
}

func cmpInt(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// compareBinlogFile orders binlog file names by base name, then numeric extension.
func compareBinlogFile(a, b string) int {
	ab, an := splitBinlogName(a)
	bb, bn := splitBinlogName(b)
	if ab != bb {
		return strings.Compare(ab, bb)
	}
	return cmpInt(an, bn)
}

func splitBinlogName(n string) (string, uint64) {
	i := strings.LastIndexByte(n, '.')
	if i < 0 {
		return n, 0
	}
	seq, err := strconv.ParseUint(n[i+1:], 10, 64)
	if err != nil {
		return n, 0
	}
	return n[:i], seq
}

func compareMaria(a, b mariaGTIDs) int {
	less, more := false, false
	var sa, sb uint64
	domains := map[uint32]bool{}
	for _, x := range a {
		domains[x.DomainID] = true
		sa += x.SequenceNumber
	}
	for _, x := range b {
		domains[x.DomainID] = true
		sb += x.SequenceNumber
	}
	for d := range domains {
		x, _ := a.seq(d)
		y, _ := b.seq(d)
		if x < y {
			less = true
		} else if x > y {
			more = true
		}
	}
	switch {
	case less && !more:
		return -1
	case more && !less:
		return 1
	case !less && !more:
		return 0
	}
	return cmpInt(sa, sb)
}

func compareMySQLSets(a, b *gomysql.MysqlGTIDSet) int {
	ab, ba := b.Contain(a), a.Contain(b)
	switch {
	case ab && ba:
		return 0
	case ab:
		return -1
	case ba:
		return 1
	}
	return cmpInt(countMySQL(a), countMySQL(b))
}

func countMySQL(s *gomysql.MysqlGTIDSet) uint64 {
	var n uint64
	for _, tags := range *s {
		for _, ivs := range tags {
			for _, iv := range ivs {
				n += uint64(iv.Stop - iv.Start)
			}
		}
	}
	return n
}
