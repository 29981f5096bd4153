package chaos

// The chaos suite's databases and writer (outbox transactions and the ids they committed), and the
// Kafka side (every record read back and counted against them).

import (
	"context"
	"crypto/rand"
	"fmt"
	mrand "math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/internal/testenv/harness"
)

// outboxDB writes outbox transactions and reads back every committed id.
type outboxDB interface {
	insert(ctx context.Context, rows []row) error // one transaction
	reset()                                       // drop the connection after an error
	ids(ctx context.Context) ([]string, error)
}

type row struct{ id, agg, key, payload string }

func uuid4() string {
	var b [16]byte
	rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

type pgDB struct {
	dsn  string
	conn *pgx.Conn
}

func (d *pgDB) insert(ctx context.Context, rows []row) error {
	if d.conn == nil {
		c, err := pgx.Connect(ctx, d.dsn)
		if err != nil {
			return err
		}
		d.conn = c
	}
	tx, err := d.conn.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.Background())
	for _, r := range rows {
		if _, err := tx.Exec(ctx, `INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES ($1, $2, $3, 'created', $4)`,
			r.id, r.agg, r.key, r.payload); err != nil {
			return err
		}
	}
	return tx.Commit(ctx)
}

func (d *pgDB) reset() {
	if d.conn != nil {
		d.conn.Close(context.Background())
		d.conn = nil
	}
}

func (d *pgDB) ids(ctx context.Context) ([]string, error) {
	c, err := pgx.Connect(ctx, d.dsn)
	if err != nil {
		return nil, err
	}
	defer c.Close(ctx)
	rows, err := c.Query(ctx, "SELECT id::text FROM outbox")
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

type mariaDB struct {
	m    *testenv.MariaDB
	conn *client.Conn
}

func (d *mariaDB) insert(ctx context.Context, rows []row) error {
	if d.conn == nil {
		c, err := client.ConnectWithTimeout(fmt.Sprintf("127.0.0.1:%d", d.m.Port), "root", "", "app", 3*time.Second)
		if err != nil {
			return err
		}
		c.ReadTimeout, c.WriteTimeout = 10*time.Second, 10*time.Second
		d.conn = c
	}
	if err := d.conn.Begin(); err != nil {
		return err
	}
	for _, r := range rows {
		if _, err := d.conn.Execute(fmt.Sprintf(`INSERT INTO app.outbox (id, aggregatetype, aggregateid, type, payload) VALUES ('%s', '%s', '%s', 'created', '%s')`,
			r.id, r.agg, r.key, r.payload)); err != nil {
			d.conn.Rollback()
			return err
		}
	}
	return d.conn.Commit()
}

func (d *mariaDB) reset() {
	if d.conn != nil {
		d.conn.Close()
		d.conn = nil
	}
}

func (d *mariaDB) ids(context.Context) ([]string, error) {
	rows, err := d.m.Query("app", "SELECT id FROM app.outbox")
	if err != nil {
		return nil, err
	}
	out := make([]string, len(rows))
	for i, r := range rows {
		out[i] = r[0]
	}
	return out, nil
}

// writer commits small outbox transactions (1–3 rows) until stopped; failed transactions (the
// database is down) are retried on a new connection. What counts is what the database has.
type writer struct {
	stopCh   chan struct{}
	done     chan struct{}
	txs      atomic.Int64
	failures atomic.Int64
}

var aggTypes = []string{"order", "customer", "invoice"}

// writerSeq numbers the writers' transactions (the payload's seq), increasing across the
// writers of a test run, so that a scenario that writes, stops and writes again keeps one
// commit order for the per-key order check.
var writerSeq atomic.Int64

func startWriter(db outboxDB, pause time.Duration) *writer {
	w := &writer{stopCh: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		defer db.reset()
		for {
			seq := int(writerSeq.Add(1)) // commit order across writers of one test run
			select {
			case <-w.stopCh:
				return
			default:
			}
			rows := make([]row, 1+mrand.IntN(3))
			for i := range rows {
				k := fmt.Sprintf("k%d", mrand.IntN(50))
				rows[i] = row{id: uuid4(), agg: aggTypes[seq%len(aggTypes)], key: k, payload: fmt.Sprintf(`{"seq": %d, "i": %d, "key": "%s"}`, seq, i, k)}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			err := db.insert(ctx, rows)
			cancel()
			if err != nil {
				w.failures.Add(1)
				db.reset()
				harness.Hold(100*time.Millisecond, "the writer's retry pace while the database is down")
				continue
			}
			w.txs.Add(1)
			harness.Hold(pause, "paces the writer")
		}
	}()
	return w
}

func (w *writer) stop() { close(w.stopCh); <-w.done }

// ---- the check ----

// readAll reads every record of the topics matching pattern (read_committed, from the
// beginning) that is in them now: to each partition's last stable offset (testenv.ReadAll), no
// quiet period.
func readAll(t *testing.T, addrs []string, pattern string) []testenv.Consumed {
	t.Helper()
	return toConsumed(testenv.ReadAll(t, addrs, pattern))
}

type tally struct {
	events, records, lost, dups, phantoms int
	lostIDs                               []string // the first few, for diagnosis
}

func count(truth []string, recs []testenv.Consumed) tally {
	want := make(map[string]bool, len(truth))
	for _, id := range truth {
		want[id] = true
	}
	seen := make(map[string]int, len(recs))
	for _, r := range recs {
		seen[r.Header("id")]++
	}
	tl := tally{events: len(truth), records: len(recs)}
	for id := range want {
		if seen[id] == 0 {
			tl.lost++
			if len(tl.lostIDs) < 20 {
				tl.lostIDs = append(tl.lostIDs, id)
			}
		}
	}
	for id, n := range seen {
		if !want[id] {
			tl.phantoms++
		}
		tl.dups += n - 1
	}
	return tl
}

// verify waits (up to within) until every committed id is in Kafka, then counts.
func verify(t *testing.T, f *fixture, within time.Duration) tally {
	t.Helper()
	truth, err := f.db.ids(context.Background())
	if err != nil {
		t.Fatalf("read committed ids back: %v", err)
	}
	var tl tally
	harness.Until(within, time.Second, func() error { // on a timeout the tally says what is lost
		if tl = count(truth, readAll(t, f.brokerAddrs(), f.topicPattern())); tl.lost > 0 {
			return fmt.Errorf("%d of %d committed ids not in Kafka", tl.lost, tl.events)
		}
		return nil
	})
	return tl
}
