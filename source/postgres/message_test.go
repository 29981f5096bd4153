package postgres

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/outboxd/outboxd/source"
	"github.com/outboxd/outboxd/source/postgres/pgoutputtest"
)

// TestDecodeMessages: byte fixtures of pgoutput Message records. With a message prefix set, a
// transactional message with exactly it is a row of its transaction in write order (its
// content copied, not aliasing the buffer), under the chunk caps; non-transactional ones with
// it are ignored and logged at debug; other prefixes go to onMessage; without a prefix every
// message goes to onMessage; a transactional outbox message outside a transaction is an error.
func TestDecodeMessages(t *testing.T) {
	var logs bytes.Buffer
	d := NewDecoder([]string{"public.outbox"})
	d.log = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	var other []string
	d.onMessage = func(m pgMessage) { other = append(other, m.prefix) }
	d.SetMessagePrefix("outboxd.event")
	d.SetChunkCaps(2, 0)
	buf := pgoutputtest.Message(true, 0x120, "outboxd.event", `{"m":1}`)
	txs := feed(t, d,
		relMsg(1, "public", "outbox", outboxCols...),
		beginMsg(0x100, t0, 1),
		insertMsg(1, outboxRow("id-1", "a", `{}`)...),
		buf,
		pgoutputtest.Message(true, 0x130, "outboxd.eventX", `x`), // not exactly the prefix
		pgoutputtest.Message(false, 0x131, "outboxd.event", `nontx`),
		pgoutputtest.Message(true, 0x132, HeartbeatPrefix, `hb`),
		pgoutputtest.Message(true, 0x140, "outboxd.event", ``),
		insertMsg(1, outboxRow("id-2", "a", `{}`)...),
		commitMsg(0x100, 0x200, t1),
		beginMsg(0x300, t1, 2),
		pgoutputtest.Message(true, 0x310, "outboxd.event", `only`),
		commitMsg(0x300, 0x400, t1),
	)
	copy(buf[len(buf)-7:], "XXXXXXX") // the decoder's row must not alias the message buffer
	var got []string
	for _, tx := range txs {
		var s []string
		for _, r := range tx.Rows {
			if r.Message {
				if r.Table != "pg_logical_emit_message:outboxd.event" || r.Columns[0] != source.MessageColumn || r.Types[0].Kind != source.KindJSON {
					t.Errorf("message row %+v", r)
				}
				s = append(s, "msg:"+string(r.Values[0].Bytes))
			} else {
				v, _ := r.Get("id")
				s = append(s, "row:"+string(v.Bytes))
			}
		}
		if tx.More {
			s = append(s, "|")
		}
		got = append(got, strings.Join(s, " "))
	}
	if want := []string{`row:id-1 msg:{"m":1} |`, `msg: row:id-2`, "msg:only"}; strings.Join(got, ";") != strings.Join(want, ";") {
		t.Errorf("chunks %q, want %q", got, want)
	}
	for i, tx := range txs {
		if tx.Bytes != source.ChunkBytes(&source.Tx{Rows: tx.Rows}) {
			t.Errorf("chunk %d: Bytes %d, its rows count %d", i, tx.Bytes, source.ChunkBytes(&source.Tx{Rows: tx.Rows}))
		}
	}
	if strings.Join(other, ",") != "outboxd.eventX,"+HeartbeatPrefix {
		t.Errorf("onMessage got %v", other)
	}
	if !strings.Contains(logs.String(), "non-transactional") || !strings.Contains(logs.String(), "level=DEBUG") {
		t.Errorf("no debug log for the non-transactional message: %s", logs.String())
	}

	// Outside a transaction (the stream's path for messages between transactions).
	if err := d.message(pgoutputtest.Message(false, 0x500, "outboxd.event", `x`)); err != nil {
		t.Errorf("non-transactional outside a transaction: %v", err)
	}
	if err := d.message(pgoutputtest.Message(true, 0x500, "outboxd.event", `x`)); err == nil || !strings.Contains(err.Error(), "outside a transaction") {
		t.Errorf("transactional outbox message outside a transaction: %v", err)
	}
	if _, _, err := d.Decode(pgoutputtest.Message(true, 0x500, "outboxd.event", `x`)); err == nil {
		t.Error("Decode: transactional outbox message outside a transaction accepted")
	}

	// Messages off: every message is another application's.
	off := NewDecoder([]string{"public.outbox"})
	other = nil
	off.onMessage = func(m pgMessage) { other = append(other, m.prefix) }
	txs = feed(t, off, beginMsg(0x600, t0, 3), pgoutputtest.Message(true, 0x610, "outboxd.event", `{}`), commitMsg(0x600, 0x700, t1))
	if len(txs) != 1 || len(txs[0].Rows) != 0 || strings.Join(other, ",") != "outboxd.event" {
		t.Errorf("messages off: %+v, onMessage %v", txs, other)
	}
}
