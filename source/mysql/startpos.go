package mysql

// Where a source starts. A stored position wins; without one, Config.Start (source.mysql.start)
// must say where a first run begins: "current" (the binlog end now), "earliest" (the oldest
// binlog the server still has) or an explicit position, unless Config.Snapshot is "initial"
// (the snapshot's own position is then the start, snapshot.go). None of them is a refusal: a lost offsets
// file must not turn into a silent start at the binlog end that skips every row committed
// while outboxd was stopped. This is Debezium's rule too: stored offsets win over
// snapshot.mode / the configured start.

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/go-mysql-org/go-mysql/client"
	"github.com/go-mysql-org/go-mysql/replication"
	"github.com/outboxd/outboxd/source"
)

type startMode int

const (
	startUnset    startMode = iota // no source.mysql.start
	startCurrent                   // "current"
	startEarliest                  // "earliest"
	startAt                        // an explicit position
)

// startSpec is a parsed Config.Start.
type startSpec struct {
	mode startMode
	at   position // startAt
}

// parseStart reads a source.mysql.start value.
func parseStart(s string) (startSpec, error) {
	switch t := strings.TrimSpace(s); strings.ToLower(t) {
	case "":
		return startSpec{}, nil
	case "current":
		return startSpec{mode: startCurrent}, nil
	case "earliest":
		return startSpec{mode: startEarliest}, nil
	default:
		p, err := parsePosition(source.Position(t))
		if err != nil {
			return startSpec{}, fmt.Errorf("source.mysql.start: %q is not current, earliest or a position: %w", s, err)
		}
		return startSpec{mode: startAt, at: p}, nil
	}
}

// ValidStart reports whether s is a valid source.mysql.start value: "" (unset), "current",
// "earliest" or a position in the form stored positions have (GTID or file:pos, with or
// without its origin).
func ValidStart(s string) error {
	_, err := parseStart(s)
	return err
}

// noStartError is the refusal for a run with neither a stored position nor Config.Start.
func (s *Source) noStartError() error {
	store := s.cfg.OffsetsStore
	if store == "" {
		store = "the offsets store"
	}
	return fmt.Errorf("no stored position in %s, and source.mysql.start is not set: outboxd does not guess where to start, "+
		"because starting at the binlog end would silently skip every row committed while no position was stored. "+
		"If this is the first run, set source.mysql.start: current (from the binlog end now) or earliest (from the oldest "+
		"binlog the server still has), or source.mysql.snapshot: initial (publish the rows already in the outbox tables, then stream). If the offsets were lost, restore them, or set source.mysql.start (or `outboxd offsets "+
		"set`) to the last delivered position", store)
}

// startPosition decides where to start: the stored position (checked against the server, see
// checkStart), else the one Config.Start names. fromCfg reports the latter.
func (s *Source) startPosition(c *client.Conn, stored position, want startSpec) (start position, fromCfg bool, err error) {
	start = stored
	if stored.kind != kindNone {
		switch want.mode {
		case startAt:
			if ComparePosition(source.Position(stored.String()), source.Position(want.at.String())) != 0 {
				s.log.Warn("source.mysql.start names a position, but a stored position exists and wins (source.mysql.start only applies to a run "+
					"without one); to replay from another position, stop outboxd and use `outboxd offsets set`",
					"stored", stored.String(), "start", s.cfg.Start)
			}
		case startCurrent, startEarliest:
			s.log.Info("stored position found: source.mysql.start applies only to a run without one and is ignored",
				"stored", stored.String(), "start", s.cfg.Start)
		}
	} else {
		fromCfg = true
		if want.mode == startAt {
			start = want.at
		}
	}
	kind, err := s.positionKind(start)
	if err != nil {
		return start, fromCfg, err
	}
	switch {
	case start.kind != kindNone:
		if start.origin.isZero() {
			s.log.Info("the start position has the older form without the server's identity and binlog file: only its GTIDs can be "+
				"checked against the server (a RESET MASTER or restored server after which the numbers grew past it goes unnoticed); "+
				"positions stored from now on carry them", "position", start.String())
		}
		err = checkStart(c, s.info, start)
	case want.mode == startEarliest:
		start, err = earliestPosition(c, kind)
	default:
		start, err = currentPosition(c, kind)
	}
	return start, fromCfg, err
}

// startOrigin describes where Open started, for its log line.
func (s *Source) startOrigin(fromCfg, snapshot bool) string {
	if snapshot {
		return "source.mysql.snapshot: initial (the rows already in the outbox tables from a consistent snapshot, then the binlog from the snapshot's position)"
	}
	if !fromCfg {
		return "stored position"
	}
	switch strings.ToLower(strings.TrimSpace(s.cfg.Start)) {
	case "current":
		return "source.mysql.start: current (the binlog end now; rows committed before it are not delivered)"
	case "earliest":
		return "source.mysql.start: earliest (the oldest binlog on the server)"
	}
	return "source.mysql.start: " + s.cfg.Start
}

// handle passes ev to the assembler and stamps the transactions it finished with their origin.
func (s *Source) handle(ev *replication.BinlogEvent) error {
	n := len(s.asm.ready)
	if err := s.asm.handle(ev); err != nil {
		return err
	}
	s.stamp.observe(s.asm, ev)
	s.stamp.apply(s.asm, n)
	return nil
}

// stamper adds the origin (see origin) to the positions the assembler hands out, which carry
// the core alone.
type stamper struct {
	kind posKind
	id   string // ";server_id=…" or ";server_uuid=…"
	file string // GTID forms: the binlog file and end offset of the last transaction
	pos  uint32
}

func (st *stamper) begin(info serverInfo, start position) {
	st.kind = start.kind
	st.id = info.origin().suffix(start.kind)
	st.file, st.pos = "", 0
	if start.kind != kindFile {
		st.file, st.pos = start.binlog, start.binlogPos
	}
}

// observe notes where the transaction that ev ended (if any) ended.
func (st *stamper) observe(a *assembler, ev *replication.BinlogEvent) {
	if st.kind == kindFile || a.inTx {
		return
	}
	switch ev.Event.(type) {
	case *replication.XIDEvent, *replication.QueryEvent, *replication.TransactionPayloadEvent:
		st.file, st.pos = a.file, ev.Header.LogPos
	}
}

// apply stamps a.ready[from:].
func (st *stamper) apply(a *assembler, from int) {
	for i := from; i < len(a.ready); i++ {
		a.ready[i].Position = st.position(a.ready[i].Position)
	}
}

func (st *stamper) position(core source.Position) source.Position {
	if core == "" {
		return core
	}
	// One allocation per transaction: the text is put together on the stack (when it fits).
	var buf [160]byte
	b := append(buf[:0], core...)
	if st.file != "" {
		b = append(b, ";binlog="...)
		b = append(b, st.file...)
		if st.pos != 0 {
			b = append(b, ':')
			b = strconv.AppendUint(b, uint64(st.pos), 10)
		}
	}
	b = append(b, st.id...)
	return source.Position(b)
}
