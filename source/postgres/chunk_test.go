package postgres

// The decoder's chunk cuts (Decoder.SetChunkCaps): byte fixtures for the row cap, the byte cap,
// a row bigger than the byte cap, the last chunk, and a fuzz target checking that any caps
// only cut a transaction, never change it.

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pglogrepl"

	"github.com/outboxd/outboxd/source"
)

// chunkTx is the messages of one transaction (commit LSN 0x1F0, end 0x200) inserting one outbox
// row per payload, id "id-<i>", after the outbox's Relation message.
func chunkTx(payloads ...string) [][]byte {
	msgs := [][]byte{relMsg(1, "public", "outbox", outboxCols...), beginMsg(0x1F0, t0, 9)}
	for i, p := range payloads {
		msgs = append(msgs, insertMsg(1, outboxRow(fmt.Sprintf("id-%d", i), "a", p)...))
	}
	return append(msgs, commitMsg(0x1F0, 0x200, t1))
}

// ids renders the rows of chunks as "id-0 id-1 | id-2" (chunks separated by "|").
func ids(t *testing.T, chunks []source.Tx) string {
	t.Helper()
	var parts []string
	for _, c := range chunks {
		var s []string
		for _, r := range c.Rows {
			v, _ := r.Get("id")
			s = append(s, string(v.Bytes))
		}
		parts = append(parts, strings.Join(s, " "))
	}
	return strings.Join(parts, " | ")
}

// checkChunks checks the chunk fields the contract fixes: More on all but the last, Position
// only on the last, Begin's commit time on More chunks, Bytes equal to source.ChunkBytes
// computed from the rows, no empty More chunk, and row slices that do not share memory.
func checkChunks(t *testing.T, chunks []source.Tx, wantPos string) {
	t.Helper()
	if len(chunks) == 0 {
		t.Fatal("no chunks")
	}
	for i, c := range chunks {
		last := i == len(chunks)-1
		if c.More == last {
			t.Errorf("chunk %d of %d: More %v", i, len(chunks), c.More)
		}
		switch {
		case last && string(c.Position) != wantPos:
			t.Errorf("last chunk: position %q, want %q", c.Position, wantPos)
		case !last && c.Position != "":
			t.Errorf("chunk %d (More): position %q, want none", i, c.Position)
		case !last && len(c.Rows) == 0:
			t.Errorf("chunk %d (More) has no rows", i)
		case !last && !c.CommitTime.Equal(t0):
			t.Errorf("chunk %d (More): commit time %v, want Begin's %v", i, c.CommitTime, t0)
		}
		recomputed := c
		recomputed.Bytes = 0
		if want := source.ChunkBytes(&recomputed); c.Bytes != want {
			t.Errorf("chunk %d: Bytes %d, want %d (source.ChunkBytes)", i, c.Bytes, want)
		}
		if i > 0 && len(c.Rows) > 0 {
			// Writing into the spare capacity of the previous chunk's slice (as an append
			// by its holder would) must not reach this chunk's rows.
			prev := chunks[i-1].Rows
			table := c.Rows[0].Table
			for j, full := len(prev), prev[:cap(prev)]; j < cap(prev); j++ {
				full[j].Table = "clobbered"
			}
			if c.Rows[0].Table != table {
				t.Errorf("chunk %d's rows share the previous chunk's backing array", i)
			}
		}
	}
}

func decodeChunks(t *testing.T, rows, byteCap int, msgs [][]byte) []source.Tx {
	t.Helper()
	d := NewDecoder([]string{"public.outbox"})
	d.SetChunkCaps(rows, byteCap)
	return feed(t, d, msgs...)
}

// TestDecodeChunksRowCap: with a row cap of 3, 7 rows come as 3+3+1 and 6 rows as 3+3 (a
// transaction is cut only when a row does not fit, so its last chunk is never empty); 3 rows
// are one chunk, a whole transaction.
func TestDecodeChunksRowCap(t *testing.T) {
	p := make([]string, 7)
	for i := range p {
		p[i] = fmt.Sprintf(`{"n": %d}`, i)
	}
	chunks := decodeChunks(t, 3, 0, chunkTx(p...))
	if got, want := ids(t, chunks), "id-0 id-1 id-2 | id-3 id-4 id-5 | id-6"; got != want {
		t.Fatalf("chunks %q, want %q", got, want)
	}
	checkChunks(t, chunks, "0/200")
	wantValue(t, chunks[1].Rows[2], "payload", `{"n": 5}`)
	if !chunks[2].CommitTime.Equal(t1) {
		t.Errorf("last chunk commit time %v, want the Commit's %v", chunks[2].CommitTime, t1)
	}

	chunks = decodeChunks(t, 3, 0, chunkTx(p[:6]...))
	if got, want := ids(t, chunks), "id-0 id-1 id-2 | id-3 id-4 id-5"; got != want {
		t.Fatalf("6 rows: chunks %q, want %q", got, want)
	}
	checkChunks(t, chunks, "0/200")

	chunks = decodeChunks(t, 3, 0, chunkTx(p[:3]...))
	if got, want := ids(t, chunks), "id-0 id-1 id-2"; got != want || chunks[0].More {
		t.Fatalf("3 rows: chunks %q (More %v), want one whole transaction %q", got, chunks[0].More, want)
	}
	checkChunks(t, chunks, "0/200")

	// No caps: one chunk whatever the size, with Bytes set.
	chunks = decodeChunks(t, 0, 0, chunkTx(p...))
	if len(chunks) != 1 || len(chunks[0].Rows) != 7 || chunks[0].More {
		t.Fatalf("no caps: %d chunks, want one of 7 rows", len(chunks))
	}
	checkChunks(t, chunks, "0/200")
}

// rowBytes is source.RowBytes of the row chunkTx builds for payload p.
func rowBytes(t *testing.T, p string) int {
	t.Helper()
	tx := one(t, decodeChunks(t, 0, 0, chunkTx(p)))
	return source.RowBytes(&tx.Rows[0])
}

// TestDecodeChunksByteCap: the byte cap cuts before the row that would overflow it, so every
// chunk is within it, except a row bigger than the cap, which is a chunk alone wherever it comes.
func TestDecodeChunksByteCap(t *testing.T) {
	small := `{"s": 1}`
	rb := rowBytes(t, small)
	// Room for two rows and a half: chunks of two.
	chunks := decodeChunks(t, 0, 2*rb+rb/2, chunkTx(small, small, small, small, small))
	if got, want := ids(t, chunks), "id-0 id-1 | id-2 id-3 | id-4"; got != want {
		t.Fatalf("chunks %q, want %q", got, want)
	}
	checkChunks(t, chunks, "0/200")
	// Exactly two rows fit: still chunks of two (the cap is inclusive).
	chunks = decodeChunks(t, 0, 2*rb, chunkTx(small, small, small))
	if got, want := ids(t, chunks), "id-0 id-1 | id-2"; got != want {
		t.Fatalf("cap of exactly two rows: chunks %q, want %q", got, want)
	}
	for _, c := range chunks {
		if c.Bytes > 2*rb {
			t.Errorf("chunk of %d bytes, over the cap %d", c.Bytes, 2*rb)
		}
	}

	big := `"` + strings.Repeat("x", 4*rb) + `"`
	chunks = decodeChunks(t, 0, 2*rb, chunkTx(small, big, small, small, big))
	if got, want := ids(t, chunks), "id-0 | id-1 | id-2 id-3 | id-4"; got != want {
		t.Fatalf("oversized rows: chunks %q, want %q", got, want)
	}
	checkChunks(t, chunks, "0/200")
	if chunks[1].Bytes != rowBytes(t, big) || chunks[1].Bytes <= 2*rb {
		t.Errorf("the oversized row's chunk: %d bytes, want its own %d (> cap %d)", chunks[1].Bytes, rowBytes(t, big), 2*rb)
	}
	// An oversized first row, and a transaction of it alone (one whole chunk).
	chunks = decodeChunks(t, 0, 2*rb, chunkTx(big, small))
	if got, want := ids(t, chunks), "id-0 | id-1"; got != want {
		t.Fatalf("oversized first row: chunks %q, want %q", got, want)
	}
	if chunks = decodeChunks(t, 0, 2*rb, chunkTx(big)); len(chunks) != 1 || chunks[0].More {
		t.Fatalf("a transaction of one oversized row: %d chunks, want one whole", len(chunks))
	}
	// Both caps: whichever is hit first.
	chunks = decodeChunks(t, 2, 3*rb, chunkTx(small, small, small, big, small))
	if got, want := ids(t, chunks), "id-0 id-1 | id-2 | id-3 | id-4"; got != want {
		t.Fatalf("both caps: chunks %q, want %q", got, want)
	}
	checkChunks(t, chunks, "0/200")
}

// TestDecodeChunksEmptyAndMixed: a transaction without rows is one empty chunk with its position
// (a 0-row last chunk only ever closes a transaction that has no rows at all); messages that
// are not inserts (Update, Delete, a Relation message after ALTER TABLE) do not cut; rows built
// before a new Relation message keep their columns.
func TestDecodeChunksEmptyAndMixed(t *testing.T) {
	chunks := decodeChunks(t, 1, 1, [][]byte{beginMsg(0x1F0, t0, 9), updateMsg(1, txt("x")), commitMsg(0x1F0, 0x200, t1)})
	if len(chunks) != 1 || len(chunks[0].Rows) != 0 || chunks[0].More || chunks[0].Position != "0/200" || chunks[0].Bytes != 0 {
		t.Fatalf("empty transaction: %+v, want one chunk without rows at 0/200", chunks)
	}
	wide := append(append([]col(nil), outboxCols...), col{"extra", oidText})
	msgs := [][]byte{relMsg(1, "public", "outbox", outboxCols...), beginMsg(0x1F0, t0, 9),
		insertMsg(1, outboxRow("id-0", "a", `{}`)...), updateMsg(1, txt("x")), deleteMsg(1, txt("x")),
		insertMsg(1, outboxRow("id-1", "a", `{}`)...),
		relMsg(1, "public", "outbox", wide...),
		insertMsg(1, append(outboxRow("id-2", "a", `{}`), txt("e"))...),
		commitMsg(0x1F0, 0x200, t1)}
	chunks = decodeChunks(t, 2, 0, msgs)
	if got, want := ids(t, chunks), "id-0 id-1 | id-2"; got != want {
		t.Fatalf("chunks %q, want %q", got, want)
	}
	checkChunks(t, chunks, "0/200")
	if len(chunks[0].Rows[1].Columns) != 6 || len(chunks[1].Rows[0].Columns) != 7 {
		t.Errorf("columns %d and %d, want 6 (before ALTER TABLE) and 7", len(chunks[0].Rows[1].Columns), len(chunks[1].Rows[0].Columns))
	}
}

// TestDecodeChunkedStopNamesHandedRows: a loud stop inside a chunked transaction (an insert
// into a relation that is not attributed) still stops, before the transaction's end, and says
// how many of its rows went out in earlier chunks.
func TestDecodeChunkedStopNamesHandedRows(t *testing.T) {
	d := NewDecoderFor(loaded())
	d.SetChunkCaps(2, 0)
	d.Resolve(300, CatalogRelation{Exists: true})
	msgs := [][]byte{beginMsg(0x2000, t0, 1), relMsg(100, "public", "outbox", outboxCols...)}
	for i := 0; i < 5; i++ {
		msgs = append(msgs, insertMsg(100, outboxRow(fmt.Sprintf("id-%d", i), "a", `{}`)...))
	}
	msgs = append(msgs, relMsg(300, "public", "elsewhere", outboxCols...), insertMsg(300, outboxRow("x", "a", `{}`)...),
		commitMsg(0x2000, 0x2100, t0))
	txs, err := decodeAll(d, msgs...)
	wantErr(t, err, "INSERT into public.elsewhere", "4 of its rows were already handed out in earlier chunks", "committing at LSN 0/2000")
	if len(txs) != 2 || txs[0].More != true || txs[1].More != true {
		t.Fatalf("%d chunks before the stop (%+v), want the two full ones", len(txs), txs)
	}
}

// FuzzDecodeChunks: whatever the caps, the chunks of a transaction concatenate to the
// transaction decoded without caps; every chunk but the last has More and no position; every
// chunk is within the caps or a single row; and a cut is made only where the next row did not
// fit (chunks are as large as the caps allow). The input's bytes are the transactions: 0xFF
// separates rows, 0xFE transactions; a row's bytes are its payload.
func FuzzDecodeChunks(f *testing.F) {
	f.Add([]byte("a\xffbb\xffccc\xfedd\xff\xfe\xfe"+strings.Repeat("x", 300)), uint8(2), uint16(200))
	f.Add([]byte("one\xfftwo\xffthree\xfffour"), uint8(0), uint16(150))
	f.Add([]byte("\xff\xff\xff"), uint8(1), uint16(0))
	f.Fuzz(func(t *testing.T, in []byte, rowCap uint8, byteCap uint16) {
		var msgs [][]byte
		msgs = append(msgs, relMsg(1, "public", "outbox", col{"id", oidText}, col{"payload", oidBytea}))
		var ends []string
		for i, txb := range bytes.Split(in, []byte{0xFE}) {
			final := uint64(0x1000 + 0x100*i)
			msgs = append(msgs, beginMsg(final, t0, uint32(i)))
			for j, p := range bytes.Split(txb, []byte{0xFF}) {
				hex := fmt.Sprintf(`\x%x`, p)
				msgs = append(msgs, insertMsg(1, txt(fmt.Sprintf("%d.%d", i, j)), txt(hex)))
			}
			msgs = append(msgs, commitMsg(final, final+0x10, t1))
			ends = append(ends, string(lsnPosition(pglogrepl.LSN(final+0x10))))
		}
		whole := NewDecoder([]string{"public.outbox"})
		want := feed(t, whole, msgs...)
		d := NewDecoder([]string{"public.outbox"})
		d.SetChunkCaps(int(rowCap), int(byteCap))
		got := feed(t, d, msgs...)

		k := 0
		for ti, w := range want {
			if w.More || string(w.Position) != ends[ti] {
				t.Fatalf("uncapped transaction %d: More %v position %s", ti, w.More, w.Position)
			}
			var rows []source.Row
			for {
				if k == len(got) {
					t.Fatalf("transaction %d: chunks end early", ti)
				}
				c := got[k]
				k++
				if n := len(c.Rows); c.More && n == 0 || rowCap > 0 && n > int(rowCap) ||
					byteCap > 0 && n > 1 && source.ChunkBytes(&source.Tx{Rows: c.Rows}) > int(byteCap) {
					t.Fatalf("transaction %d: chunk of %d rows, %d bytes, More %v: outside the caps %d/%d", ti, n, c.Bytes, c.More, rowCap, byteCap)
				}
				if c.Bytes != source.ChunkBytes(&source.Tx{Rows: c.Rows}) {
					t.Fatalf("chunk Bytes %d, rows say %d", c.Bytes, source.ChunkBytes(&source.Tx{Rows: c.Rows}))
				}
				if c.More {
					if c.Position != "" {
						t.Fatalf("More chunk with position %s", c.Position)
					}
					// The next row did not fit: this cut was needed.
					next := &got[k].Rows[0]
					fits := (rowCap == 0 || len(c.Rows) < int(rowCap)) && (byteCap == 0 || c.Bytes+source.RowBytes(next) <= int(byteCap))
					if fits {
						t.Fatalf("transaction %d: cut after %d rows (%d bytes) although the next row (%d bytes) fits the caps %d/%d",
							ti, len(c.Rows), c.Bytes, source.RowBytes(next), rowCap, byteCap)
					}
				}
				rows = append(rows, c.Rows...)
				if !c.More {
					if c.Position != w.Position || !c.CommitTime.Equal(w.CommitTime) {
						t.Fatalf("last chunk %s at %v, want %s at %v", c.Position, c.CommitTime, w.Position, w.CommitTime)
					}
					break
				}
			}
			if len(rows) != len(w.Rows) {
				t.Fatalf("transaction %d: %d rows in chunks, %d whole", ti, len(rows), len(w.Rows))
			}
			for i := range rows {
				a, b := rows[i], w.Rows[i]
				if a.Table != b.Table || len(a.Values) != len(b.Values) {
					t.Fatalf("transaction %d row %d differs", ti, i)
				}
				for j := range a.Values {
					if a.Values[j].Null != b.Values[j].Null || !bytes.Equal(a.Values[j].Bytes, b.Values[j].Bytes) {
						t.Fatalf("transaction %d row %d column %d: %q, whole %q", ti, i, j, a.Values[j].Bytes, b.Values[j].Bytes)
					}
				}
			}
		}
		if k != len(got) {
			t.Fatalf("%d chunks left over", len(got)-k)
		}
	})
}

// BenchmarkDecodeInsertChunked is BenchmarkDecodeInsert with the default chunk caps and
// transactions of 5000 rows (several chunks each): allocations per row stay those of the
// unchunked decoder (the chunk's fresh row slice is amortised over its rows).
func BenchmarkDecodeInsertChunked(b *testing.B) {
	d := NewDecoder([]string{"public.outbox"})
	d.SetChunkCaps(DefaultChunkRows, DefaultChunkBytes)
	benchDecodeInserts(b, d, testInsert(), 5000)
}
