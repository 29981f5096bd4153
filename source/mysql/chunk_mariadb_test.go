package mysql

// Chunked transactions against a private MariaDB: a connection cut inside a transaction that is
// being handed out in chunks. (ROLLBACK after chunks is tested on the assembler only: with
// binlog_format=ROW, MariaDB logs a rolled-back transaction's non-transactional changes as a
// group of their own and drops its InnoDB rows, as mariadb-binlog shows, so a ROLLBACK event
// after outbox rows does not arise from an ordinary InnoDB outbox.)

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/source"
)

// cutProxy is a TCP proxy that, once armed, closes the first connection that carries budget
// more bytes from the server after the arming, then disarms: a connection lost at a chosen
// point of the binlog stream. New connections work normally.
type cutProxy struct {
	ln     net.Listener
	armed  atomic.Bool
	budget int64
	cuts   atomic.Int32

	mu   sync.Mutex
	sent map[net.Conn]*atomic.Int64 // bytes sent to each client since arming
}

func newCutProxy(t *testing.T, target string, budget int64) *cutProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	p := &cutProxy{ln: ln, budget: budget, sent: map[net.Conn]*atomic.Int64{}}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			n := &atomic.Int64{}
			p.mu.Lock()
			p.sent[c] = n
			p.mu.Unlock()
			go p.pipe(u, c, nil)
			go p.pipe(c, u, n)
		}
	}()
	return p
}

// arm starts counting: every connection gets budget bytes from now on.
func (p *cutProxy) arm() {
	p.mu.Lock()
	for _, n := range p.sent {
		n.Store(0)
	}
	p.mu.Unlock()
	p.armed.Store(true)
}

func (p *cutProxy) pipe(dst, src net.Conn, counted *atomic.Int64) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 4<<10)
	for {
		n, err := src.Read(buf)
		if err != nil {
			return
		}
		if counted != nil && p.armed.Load() {
			left := p.budget - counted.Load()
			if int64(n) >= left {
				if left > 0 {
					dst.Write(buf[:left])
				}
				if p.armed.CompareAndSwap(true, false) {
					p.cuts.Add(1)
				}
				return // closes both ends
			}
			counted.Add(int64(n))
		}
		if _, err := dst.Write(buf[:n]); err != nil {
			return
		}
	}
}

// TestMariaDBReconnectInsideChunkedTx: the binlog connection is cut in the middle of a
// 1500-row transaction whose first chunks were already handed out; the source reconnects,
// reads the transaction again from its start and skips the rows it had handed out: every row
// arrives exactly once, in order, the position only on the last chunk.
func TestMariaDBReconnectInsideChunkedTx(t *testing.T) {
	t.Parallel()
	m := testenv.NewMariaDB(t, testenv.MariaDBOptions{RowMetadata: true})
	c := db(t, m)
	mustExec(t, c, testenv.MariaDBOutboxDDL("outbox", "CHAR(36)"))
	proxy := newCutProxy(t, fmt.Sprintf("127.0.0.1:%d", m.Port), 96<<10)
	logs := &logSink{}
	s := New(Config{Start: "current", DSN: "mysql://root@" + proxy.ln.Addr().String() + "/app", Tables: []string{"app.outbox"},
		ServerID: serverIDs.Add(1), HeartbeatPeriod: 200 * time.Millisecond, ReconnectTimeout: 30 * time.Second, ChunkRows: 7}, slog.New(logs))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := s.Open(ctx, ""); err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	const n = 1500
	ids := make([]string, n)
	mustExec(t, c, "BEGIN")
	for i := range ids {
		ids[i] = fmt.Sprintf("00000000-0000-4000-8000-%012d", i)
		mustExec(t, c, "INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES (?, 'order', 'a', 'created', ?)",
			ids[i], fmt.Sprintf(`{"n": %d, "pad": "%s"}`, i, strings.Repeat("p", 100)))
	}
	proxy.arm() // the transaction's events come after COMMIT: the cut falls inside them
	mustExec(t, c, "COMMIT")

	var rows []source.Row
	chunks := 0
	for {
		tx, err := s.Next(ctx)
		if err != nil {
			t.Fatalf("Next after %d rows: %v", len(rows), err)
		}
		if len(rows) == 0 && len(tx.Rows) == 0 && !tx.More {
			continue // idle progress
		}
		chunks++
		if tx.More == (tx.Position != "") || len(tx.Rows) > 7 {
			t.Fatalf("chunk %d: More %v, position %q, %d rows", chunks, tx.More, tx.Position, len(tx.Rows))
		}
		rows = append(rows, tx.Rows...)
		if !tx.More {
			break
		}
	}
	if proxy.cuts.Load() != 1 {
		t.Fatalf("the proxy cut %d connections, want 1 (budget too large for the transaction?)", proxy.cuts.Load())
	}
	skipped := logs.find("skipping the rows already handed out")
	if skipped == "" || strings.Contains(skipped, "skip_rows=0") {
		t.Fatalf("no reconnect inside the chunked transaction was logged (the cut came before any chunk was handed out?): %q", skipped)
	}
	t.Logf("%s; %d chunks", skipped, chunks)
	if len(rows) != n {
		t.Fatalf("%d rows arrived, want %d exactly once", len(rows), n)
	}
	for i, r := range rows {
		if got := string(r.Values[0].Bytes); got != ids[i] {
			t.Fatalf("row %d is %s, want %s (a row handed out twice or lost)", i, got, ids[i])
		}
	}
}
