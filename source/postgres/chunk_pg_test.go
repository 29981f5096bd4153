package postgres

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outboxd/source"
	"github.com/outboxd/outboxd/source/sourcetest"
)

// TestChunkByteCapEndToEnd: on a real PostgreSQL, a transaction of five rows with ~300 KB jsonb
// payloads (TOASTed on disk, sent whole) and a 700 KB byte cap arrives as chunks of 2+2+1, each
// within the cap, with the payloads intact and the position on the last chunk only.
func TestChunkByteCapEndToEnd(t *testing.T) {
	dsn, conn := testDB(t, "chunkbytes")
	const byteCap = 700 << 10
	s := New(Config{DSN: dsn, Tables: []string{"public.outbox"}, Slot: "chunkbytes", Publication: "chunkbytes",
		StandbyTimeout: testStandby, ChunkBytes: byteCap, ChunkRows: -1}, testLog())
	open(t, s, "")
	evs := make([]sourcetest.Event, 5)
	inTx(t, conn, false, func(tx pgx.Tx) {
		for i := range evs {
			evs[i] = sourcetest.NewEvent(fmt.Sprintf("big-%d", i))
			evs[i].Payload = fmt.Sprintf(`{"i": %d, "pad": "%s"}`, i, strings.Repeat(string(rune('a'+i)), 300<<10))
			insertEvent(t, tx, evs[i])
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var chunks []source.Tx
	for len(chunks) == 0 || chunks[len(chunks)-1].More {
		tx, err := s.Next(ctx)
		if err != nil {
			t.Fatalf("Next after %d chunks: %v", len(chunks), err)
		}
		if len(chunks) == 0 && len(tx.Rows) == 0 {
			continue // idle progress
		}
		chunks = append(chunks, tx)
	}
	var shape []string
	var rows []source.Row
	for i, c := range chunks {
		shape = append(shape, fmt.Sprint(len(c.Rows)))
		last := i == len(chunks)-1
		if c.More == last || last != (c.Position != "") {
			t.Errorf("chunk %d: More %v, position %q", i, c.More, c.Position)
		}
		if c.Bytes > byteCap || c.Bytes != source.ChunkBytes(&source.Tx{Rows: c.Rows}) {
			t.Errorf("chunk %d: Bytes %d (cap %d), rows say %d", i, c.Bytes, byteCap, source.ChunkBytes(&source.Tx{Rows: c.Rows}))
		}
		rows = append(rows, c.Rows...)
	}
	if got := strings.Join(shape, "+"); got != "2+2+1" {
		t.Fatalf("chunks %s, want 2+2+1", got)
	}
	for i, ev := range evs {
		id, _ := rows[i].Get("id")
		p, _ := rows[i].Get("payload")
		if string(id.Bytes) != ev.ID || !strings.Contains(string(p.Bytes), strings.Repeat(string(rune('a'+i)), 300<<10)) {
			t.Errorf("row %d: id %s (want %s), payload of %d bytes", i, id.Bytes, ev.ID, len(p.Bytes))
		}
	}
}
