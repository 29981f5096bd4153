package postgres

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxd/outboxd/internal/testenv/harness"
	"github.com/outboxd/outboxd/source"
	"github.com/outboxd/outboxd/source/postgres/pgoutputtest"
)

// The stream loop against a fake walsender on a loopback TCP connection: no PostgreSQL, so the
// wake-up paths (read deadline, Confirm, keepalive replies, Close) can be driven exactly, and the
// loop's own cost per message can be benchmarked.

// fakeWalsender is the server end of a replication connection in copy-both mode. It writes
// backend messages and collects the flush positions of the standby status updates it receives.
type fakeWalsender struct {
	conn net.Conn

	mu     sync.Mutex
	status []pglogrepl.LSN // flush LSN of every status update received
	notify chan struct{}   // signalled (capacity 1) on every status update
}

// startFake opens a Source on a fake walsender, streaming from from. Every coverage check passes.
func startFake(tb testing.TB, cfg Config, from pglogrepl.LSN) (*Source, *fakeWalsender) {
	tb.Helper()
	return startFakeWith(tb, cfg, from, nil)
}

// startFakeWith is startFake with prep run on the Source before it starts (coverage tests set
// their own coverage hook and baseline there).
func startFakeWith(tb testing.TB, cfg Config, from pglogrepl.LSN, prep func(*Source)) (*Source, *fakeWalsender) {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer ln.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		tb.Fatal(err)
	}
	server, err := ln.Accept()
	if err != nil {
		tb.Fatal(err)
	}
	pcfg, err := pgconn.ParseConfig("host=127.0.0.1 user=outboxd sslmode=disable")
	if err != nil {
		tb.Fatal(err)
	}
	pc, err := pgconn.Construct(&pgconn.HijackedConn{Conn: client, ParameterStatuses: map[string]string{},
		TxStatus: 'I', Config: pcfg})
	if err != nil {
		tb.Fatal(err)
	}
	f := &fakeWalsender{conn: server, notify: make(chan struct{}, 1)}
	go f.readStatus()

	cfg.DSN = "fake"
	if cfg.Tables == nil {
		cfg.Tables = []string{"public.outbox"}
	}
	cfg.SlotCheckInterval = -1
	s := New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	s.opened = true
	s.ext.cov.readShape = func(context.Context) (*PubShape, error) { // no baseline: every check passes, covering everything
		return &PubShape{ReadAt: ^pglogrepl.LSN(0)}, nil
	}
	if prep != nil {
		prep(s)
	}
	if err := s.start(context.Background(), pc, from, nil); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		s.Close()
		server.Close()
	})
	return s, f
}

// readStatus reads the client's messages until the connection ends.
func (f *fakeWalsender) readStatus() {
	var hdr [5]byte
	var body []byte
	for {
		if _, err := io.ReadFull(f.conn, hdr[:]); err != nil {
			return
		}
		n := int(binary.BigEndian.Uint32(hdr[1:])) - 4
		if cap(body) < n {
			body = make([]byte, n)
		}
		body = body[:n]
		if _, err := io.ReadFull(f.conn, body); err != nil {
			return
		}
		if hdr[0] == 'd' && n >= 17 && body[0] == pglogrepl.StandbyStatusUpdateByteID {
			f.mu.Lock()
			f.status = append(f.status, pglogrepl.LSN(binary.BigEndian.Uint64(body[9:17])))
			f.mu.Unlock()
			select {
			case f.notify <- struct{}{}:
			default:
			}
		}
	}
}

// statusCount returns how many status updates arrived and the last flush LSN.
func (f *fakeWalsender) statusCount() (int, pglogrepl.LSN) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.status) == 0 {
		return 0, 0
	}
	return len(f.status), f.status[len(f.status)-1]
}

// waitStatus waits until a status update arrives that makes ok true, and reports how long it took.
func (f *fakeWalsender) waitStatus(tb testing.TB, within time.Duration, what string, ok func(n int, flush pglogrepl.LSN) bool) time.Duration {
	tb.Helper()
	start := time.Now()
	deadline := time.After(within)
	for {
		if n, flush := f.statusCount(); ok(n, flush) {
			return time.Since(start)
		}
		select {
		case <-f.notify:
		case <-deadline:
			n, flush := f.statusCount()
			tb.Fatalf("%s: not within %v (%d status updates, last flush %s)", what, within, n, flush)
		}
	}
}

func (f *fakeWalsender) write(tb testing.TB, b []byte) {
	tb.Helper()
	if _, err := f.conn.Write(b); err != nil {
		tb.Fatal(err)
	}
}

// appendXLogData appends a CopyData message carrying an XLogData message carrying data (one
// pgoutput message).
func appendXLogData(b []byte, walStart, walEnd uint64, data []byte) []byte {
	b = pgoutputtest.AppendCopyDataHeader(b, pgoutputtest.XLogDataHeaderLen+len(data))
	return pgoutputtest.AppendXLogData(b, walStart, walEnd, data)
}

// appendKeepalive appends a CopyData message carrying a primary keepalive message.
func appendKeepalive(b []byte, walEnd uint64, reply bool) []byte {
	return pgoutputtest.AppendKeepalive(pgoutputtest.AppendCopyDataHeader(b, pgoutputtest.KeepaliveLen), walEnd, reply)
}

// appendOutboxTx appends a transaction with rows outbox rows ending at end. It allocates
// nothing (the benchmark's allocations are the loop's): begin and commit are built in a stack
// buffer by pgoutputtest.AppendBegin and AppendCommit.
func appendOutboxTx(b []byte, ins []byte, rows int, end uint64) []byte {
	var msg [26]byte
	b = appendXLogData(b, end-0x20, end, pgoutputtest.AppendBegin(msg[:0], end-0x10, t0, uint32(end)))
	for i := 0; i < rows; i++ {
		b = appendXLogData(b, end-0x18, end, ins)
	}
	return appendXLogData(b, end-0x10, end, pgoutputtest.AppendCommit(msg[:0], end-0x10, end, t0))
}

var benchPayload = `{"orderId": "6d3f1c2e-5a4b-4c3d-9e8f-0a1b2c3d4e5f", "amount": 12345, "currency": "EUR", "items": [1, 2, 3]}`

func testInsert() []byte {
	return insertMsg(1, outboxRow("6d3f1c2e-5a4b-4c3d-9e8f-0a1b2c3d4e5f", "customer-42", benchPayload)...)
}

func nextWithin(t *testing.T, s *Source, d time.Duration) (source.Position, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	tx, err := s.Next(ctx)
	if err != nil {
		t.Fatalf("Next: %v", err)
	}
	return tx.Position, len(tx.Rows)
}

// TestStreamFakeWakeups drives every way the loop's wait ends: a message, a Confirm (while
// blocked in a read and while blocked handing a transaction to Next), a keepalive asking for a
// reply, the periodic status update, and Close.
func TestStreamFakeWakeups(t *testing.T) {
	s, f := startFake(t, Config{StandbyTimeout: 10 * time.Second}, 0x10)
	f.waitStatus(t, time.Second, "first status update", func(n int, flush pglogrepl.LSN) bool { return n >= 1 && flush == 0x10 })

	var b []byte
	b = appendXLogData(b, 0x18, 0x18, relMsg(1, "public", "outbox", outboxCols...))
	b = appendOutboxTx(b, testInsert(), 1, 0x100)
	f.write(t, b)
	if pos, rows := nextWithin(t, s, 2*time.Second); pos != "0/100" || rows != 1 {
		t.Fatalf("Next: %s with %d rows, want 0/100 with 1", pos, rows)
	}

	// The loop is blocked in a read with a 10s deadline: Confirm must wake it.
	if err := s.Confirm(context.Background(), "0/100"); err != nil {
		t.Fatal(err)
	}
	d := f.waitStatus(t, 2*time.Second, "status update after Confirm (blocked read)", func(_ int, flush pglogrepl.LSN) bool { return flush == 0x100 })
	t.Logf("status after Confirm: %v", d)

	// A keepalive asking for a reply is answered at once.
	n0, _ := f.statusCount()
	f.write(t, appendKeepalive(nil, 0x100, true))
	f.waitStatus(t, 2*time.Second, "reply to a keepalive", func(n int, _ pglogrepl.LSN) bool { return n > n0 })

	// A transaction nobody takes: the loop waits in the hand-off; a Confirm still wakes it.
	f.write(t, appendOutboxTx(nil, testInsert(), 1, 0x200))
	harness.WaitBlocked(t, 2*time.Second, 0, "postgres.(*stream).handOff")
	if err := s.Confirm(context.Background(), "0/180"); err != nil {
		t.Fatal(err)
	}
	f.waitStatus(t, 2*time.Second, "status update after Confirm (blocked hand-off)", func(_ int, flush pglogrepl.LSN) bool { return flush == 0x180 })
	if pos, _ := nextWithin(t, s, 2*time.Second); pos != "0/200" {
		t.Fatalf("Next: %s, want 0/200", pos)
	}

	// Close unblocks a Next waiting while the loop is blocked in a read.
	errc, next := make(chan error, 1), make(chan uint64, 1)
	go func() {
		next <- harness.GoroutineID()
		_, err := s.Next(context.Background())
		errc <- err
	}()
	harness.WaitBlocked(t, 2*time.Second, <-next, "postgres.(*Source).Next")
	start := time.Now()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errc:
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("Next after Close: %v", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("Close did not unblock Next")
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("Close took %v", d)
	}
	if _, flush := f.statusCount(); flush != 0x180 {
		t.Errorf("final status update: flush %s, want 0/180", flush)
	}
}

// TestStreamFakeStandbyAndPartialMessages: status updates go out every StandbyTimeout while the
// server is silent and while nobody takes a transaction, and a message that arrives in pieces
// across several read deadlines (and wakes) is decoded intact.
func TestStreamFakeStandbyAndPartialMessages(t *testing.T) {
	const standby = 100 * time.Millisecond
	s, f := startFake(t, Config{StandbyTimeout: standby}, 0x10)
	f.waitStatus(t, time.Second, "periodic status updates (silent server)", func(n int, _ pglogrepl.LSN) bool { return n >= 4 })

	var b []byte
	b = appendXLogData(b, 0x18, 0x18, relMsg(1, "public", "outbox", outboxCols...))
	b = appendOutboxTx(b, testInsert(), 2, 0x100)
	prev := 0
	for i, cut := range []int{3, len(b) / 3, len(b) / 2, len(b) - 1, len(b)} {
		n0, _ := f.statusCount()
		f.write(t, b[prev:cut])
		prev = cut
		if cut == len(b) {
			break // the message is whole
		}
		// A read deadline passes mid-message: the next status update ends the wait during
		// which the piece arrived (n0 was read just after a status update, none in flight).
		f.waitStatus(t, 2*time.Second, "a read deadline mid-message", func(n int, _ pglogrepl.LSN) bool { return n > n0 })
		if i == 2 {
			_ = s.Confirm(context.Background(), "0/20") // and a wake
			f.waitStatus(t, 2*time.Second, "status update after a Confirm mid-message", func(_ int, flush pglogrepl.LSN) bool { return flush == 0x20 })
		}
	}
	// Nobody takes the transaction yet: status updates keep going out.
	n0, _ := f.statusCount()
	f.waitStatus(t, time.Second, "periodic status updates (stalled hand-off)", func(n int, _ pglogrepl.LSN) bool { return n >= n0+3 })

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	tx, err := s.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if tx.Position != "0/100" || len(tx.Rows) != 2 || string(tx.Rows[1].Values[4].Bytes) != benchPayload {
		t.Fatalf("got %+v", tx)
	}

	// Close while the loop waits in a hand-off.
	f.write(t, appendOutboxTx(nil, testInsert(), 1, 0x200))
	harness.WaitBlocked(t, 2*time.Second, 0, "postgres.(*stream).handOff")
	start := time.Now()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("Close took %v", d)
	}
}

// BenchmarkStream measures the stream loop's cost per transaction (one op = one transaction
// handed to Next) with a fake walsender on loopback TCP: receive, decode, hand-off, and a
// Confirm every 100 transactions as the pipeline's acks would. The fake server's writes run on
// the same cores; -benchmem counts its allocations too (it makes none per transaction).
func BenchmarkStream(b *testing.B) {
	for _, rows := range []int{1, 100} {
		name := "1row"
		if rows > 1 {
			name = "100rows"
		}
		b.Run(name, func(b *testing.B) { benchStream(b, rows) })
	}
}

func benchStream(b *testing.B, rows int) {
	ins := testInsert()
	var want []byte
	want = appendXLogData(want, 0xE0, 0x100, beginMsg(0xF0, t0, 0x100))
	want = appendXLogData(want, 0xE8, 0x100, ins)
	want = appendXLogData(want, 0xF0, 0x100, commitMsg(0xF0, 0x100, t0))
	if got := appendOutboxTx(nil, ins, 1, 0x100); string(got) != string(want) {
		b.Fatalf("appendOutboxTx differs from the fixtures:\n%x\n%x", got, want)
	}
	s, f := startFake(b, Config{StandbyTimeout: 10 * time.Second}, 0x10)
	go func() {
		buf := appendXLogData(nil, 0x18, 0x18, relMsg(1, "public", "outbox", outboxCols...))
		end := uint64(0x100)
		for {
			for i := 0; i < 64; i++ {
				buf = appendOutboxTx(buf, ins, rows, end)
				end += 0x100
			}
			if _, err := f.conn.Write(buf); err != nil {
				return
			}
			buf = buf[:0]
		}
	}()
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		tx, err := s.Next(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if i%100 == 99 {
			if err := s.Confirm(ctx, tx.Position); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*rows), "ns/row")
}
