package mysql

import (
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/replication"
	"github.com/outboxd/outboxd/source"
)

// TestStamper: positions handed out carry the server identity and, for GTID positions, the
// binlog file and end offset of the transaction they end at (not of later events).
func TestStamper(t *testing.T) {
	a := newAssembler(position{kind: kindMariaGTID}, nil, nil, true, time.Hour, testLogger())
	var st stamper
	start, _ := parsePosition("0-1-5;binlog=mysql-bin.000002:900;server_id=7")
	st.begin(serverInfo{mariadb: true, serverID: "7"}, start)
	if got := st.position("0-1-5"); got != "0-1-5;binlog=mysql-bin.000002:900;server_id=7" {
		t.Errorf("start stamp %q", got)
	}
	a.file = "mysql-bin.000003"
	for _, tc := range []struct {
		ev   replication.Event
		pos  uint32
		inTx bool
		want source.Position
	}{
		{&replication.QueryEvent{Query: []byte("BEGIN")}, 1000, true, "0-1-6;binlog=mysql-bin.000002:900;server_id=7"}, // inside: unchanged
		{&replication.XIDEvent{}, 1200, false, "0-1-6;binlog=mysql-bin.000003:1200;server_id=7"},
		{&replication.HeartbeatEvent{}, 5000, false, "0-1-6;binlog=mysql-bin.000003:1200;server_id=7"}, // not an end
		{&replication.QueryEvent{Query: []byte("CREATE TABLE x (a int)")}, 1500, false, "0-1-7;binlog=mysql-bin.000003:1500;server_id=7"},
	} {
		a.inTx = tc.inTx
		st.observe(a, &replication.BinlogEvent{Header: &replication.EventHeader{LogPos: tc.pos}, Event: tc.ev})
		core, _, _ := cutOrigin(tc.want)
		if got := st.position(core); got != tc.want {
			t.Errorf("after %T at %d: %q, want %q", tc.ev, tc.pos, got, tc.want)
		}
	}
	// file:pos positions get the identity only; MySQL's is the server_uuid.
	st.begin(serverInfo{serverID: "1", serverUUID: "3e11fa47-71ca-11e1-9e33-c80aa9429562"}, position{kind: kindFile, file: "binlog.000001", pos: 4})
	if got := st.position("binlog.000001:4"); got != "binlog.000001:4;server_uuid=3e11fa47-71ca-11e1-9e33-c80aa9429562" {
		t.Errorf("file stamp %q", got)
	}
	if got := st.position(""); got != "" {
		t.Errorf("empty position stamped: %q", got)
	}
}

func cutOrigin(p source.Position) (source.Position, string, bool) {
	for i := range p {
		if p[i] == ';' {
			return p[:i], string(p[i+1:]), true
		}
	}
	return p, "", false
}

// BenchmarkStamp: one op stamps a MariaDB GTID position, as every transaction handed out is.
func BenchmarkStamp(b *testing.B) {
	st := stamper{kind: kindMariaGTID, id: ";server_id=1", file: "mysql-bin.000002", pos: 123456789}
	b.ReportAllocs()
	for b.Loop() {
		if st.position("0-1-12345678") == "" {
			b.Fatal("empty")
		}
	}
}
