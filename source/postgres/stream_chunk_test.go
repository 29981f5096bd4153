package postgres

// The stream loop with chunked transactions (Config.ChunkRows), against the fake walsender:
// the hand-off of chunks, the skip rule decided at a transaction's first chunk, and the coverage
// gate on chunks.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/outboxd/outboxd/source"
)

// appendChunkTx appends a transaction of rows outbox rows with ids "<tag>-<i>", committing at
// end-0x10 and ending at end.
func appendChunkTx(b []byte, tag string, rows int, end uint64) []byte {
	b = appendXLogData(b, end-0x20, end, beginMsg(end-0x10, t0, uint32(end)))
	for i := 0; i < rows; i++ {
		b = appendXLogData(b, end-0x18, end, insertMsg(1, outboxRow(fmt.Sprintf("%s-%d", tag, i), "a", `{}`)...))
	}
	return appendXLogData(b, end-0x10, end, commitMsg(end-0x10, end, t1))
}

func nextTx(t *testing.T, s *Source, d time.Duration) source.Tx {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	tx, err := s.Next(ctx)
	if err != nil {
		t.Fatalf("Next: %v", err)
	}
	return tx
}

// takeTx takes the chunks of one transaction and returns their ids ("a-0 a-1 | a-2") and the
// last chunk.
func takeTx(t *testing.T, s *Source) (string, source.Tx) {
	t.Helper()
	var chunks []source.Tx
	for {
		tx := nextTx(t, s, 2*time.Second)
		chunks = append(chunks, tx)
		if !tx.More {
			checkChunks(t, chunks, string(tx.Position))
			return ids(t, chunks), tx
		}
	}
}

// TestStreamChunkHandOff: a transaction of 7 rows with ChunkRows 3 reaches Next as 3+3+1, in
// order, the position only on the last chunk; More chunks move neither the handed-out position
// (coverage bookkeeping) nor anything Confirm-related, and the next transaction follows.
func TestStreamChunkHandOff(t *testing.T) {
	s, f := startFake(t, Config{StandbyTimeout: 10 * time.Second, ChunkRows: 3}, 0x10)
	b := appendXLogData(nil, 0x18, 0x18, relMsg(1, "public", "outbox", outboxCols...))
	b = appendChunkTx(b, "a", 7, 0x200)
	b = appendChunkTx(b, "b", 2, 0x300)
	f.write(t, b)

	first := nextTx(t, s, 2*time.Second)
	if !first.More || first.Position != "" || len(first.Rows) != 3 {
		t.Fatalf("first chunk: More %v, position %q, %d rows; want a More chunk of 3 rows", first.More, first.Position, len(first.Rows))
	}
	// The loop hands out the second chunk only when Next takes it, and a More chunk moves no
	// handed-out position.
	if h := s.ext.cov.handed.Load(); h != 0 {
		t.Errorf("handed-out position %s after a More chunk, want none yet", pglogrepl.LSN(h))
	}
	got, last := takeTx(t, s)
	if got != "a-3 a-4 a-5 | a-6" || last.Position != "0/200" {
		t.Fatalf("rest of the transaction: %q ending at %s, want \"a-3 a-4 a-5 | a-6\" at 0/200", got, last.Position)
	}
	// Next records the handed-out position when it returns the transaction's last chunk (the
	// loop may have queued the next transaction already: stream_queue.go).
	if h := s.ext.cov.handed.Load(); h != 0x200 {
		t.Fatalf("handed-out position %s after the transaction's last chunk, want 0/200", pglogrepl.LSN(h))
	}
	if got, last := takeTx(t, s); got != "b-0 b-1" || last.Position != "0/300" {
		t.Fatalf("next transaction: %q at %s, want one chunk \"b-0 b-1\" at 0/300", got, last.Position)
	}
}

// TestStreamChunkSkipAtBegin: the skip rule is decided at a transaction's first chunk from its
// commit LSN. From a transaction's end, that transaction (chunked) is skipped whole and the next
// one arrives whole; from a keepalive position between transactions likewise; from a position
// inside a commit record (never handed out by outboxd) the transaction's chunks are skipped and
// its commit stops the stream loudly (ErrPositionLost) instead of losing it.
func TestStreamChunkSkipAtBegin(t *testing.T) {
	stream := func() []byte {
		b := appendXLogData(nil, 0x18, 0x18, relMsg(1, "public", "outbox", outboxCols...))
		b = appendChunkTx(b, "a", 7, 0x200) // commits at 0x1F0, ends at 0x200
		return appendChunkTx(b, "b", 7, 0x300)
	}
	for _, from := range []pglogrepl.LSN{0x200, 0x250, 0x2F0} { // a's end; a keepalive between; b's commit LSN itself
		t.Run(from.String(), func(t *testing.T) {
			s, f := startFake(t, Config{StandbyTimeout: 10 * time.Second, ChunkRows: 3}, from)
			f.write(t, stream())
			if got, last := takeTx(t, s); got != "b-0 b-1 b-2 | b-3 b-4 b-5 | b-6" || last.Position != "0/300" {
				t.Fatalf("from %s: %q at %s, want all of b in 3 chunks at 0/300", from, got, last.Position)
			}
		})
	}
	t.Run("from 0/1F0 delivers a", func(t *testing.T) { // a's commit LSN: a ends after it
		s, f := startFake(t, Config{StandbyTimeout: 10 * time.Second, ChunkRows: 3}, 0x1F0)
		f.write(t, stream())
		if got, _ := takeTx(t, s); got != "a-0 a-1 a-2 | a-3 a-4 a-5 | a-6" {
			t.Fatalf("from 0/1F0: %q, want all of a", got)
		}
	})
	t.Run("inside a commit record", func(t *testing.T) {
		s, f := startFake(t, Config{StandbyTimeout: 10 * time.Second, ChunkRows: 3}, 0x1F8)
		f.write(t, stream())
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		tx, err := s.Next(ctx)
		if !errors.Is(err, source.ErrPositionLost) {
			t.Fatalf("Next: %d rows at %q (More %v), %v; want a stop wrapping ErrPositionLost before any chunk", len(tx.Rows), tx.Position, tx.More, err)
		}
		for _, w := range []string{"committing at 0/1F0 ends at 0/200", "start position 0/1F8", "--position 0/1F0", "--position 0/200"} {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("stop lacks %q: %v", w, err)
			}
		}
	})
}

// TestStreamChunkCoverageGate: with several relations (no fast path), a More chunk waits for a
// coverage reading at or past its transaction's commit LSN (it stores no position, so that
// reading vouching for everything before the transaction is enough), and the last chunk for
// one at or past the transaction's end, as a whole transaction does.
func TestStreamChunkCoverageGate(t *testing.T) {
	h := newCoverageHook()
	s, f := startFakeWith(t, Config{StandbyTimeout: 10 * time.Second, CoverageCheckInterval: time.Hour, ChunkRows: 3}, 0x10, func(s *Source) {
		s.ext.cov.readShape = h.read
		s.ext.cov.base.Store(goodShape())
		s.ext.cov.single = false
	})
	h.answer(t, at(0x10))
	b := appendXLogData(nil, 0x18, 0x18, relMsg(1, "public", "outbox", outboxCols...))
	f.write(t, appendChunkTx(b, "a", 7, 0x200))
	noNext(t, s, 300*time.Millisecond, "a More chunk before any reading reaches its commit")
	h.answer(t, at(0x1EF))
	noNext(t, s, 300*time.Millisecond, "a More chunk after a reading short of its commit LSN")
	h.answer(t, at(0x1F0))
	for i := 0; i < 2; i++ {
		if tx := nextTx(t, s, 2*time.Second); !tx.More || len(tx.Rows) != 3 {
			t.Fatalf("chunk %d: More %v with %d rows, want a More chunk of 3", i, tx.More, len(tx.Rows))
		}
	}
	noNext(t, s, 300*time.Millisecond, "the last chunk after a reading short of the transaction's end")
	h.answer(t, at(0x200))
	if tx := nextTx(t, s, 2*time.Second); tx.More || tx.Position != "0/200" || len(tx.Rows) != 1 {
		t.Fatalf("last chunk: More %v at %q with %d rows, want the last row at 0/200", tx.More, tx.Position, len(tx.Rows))
	}
}
