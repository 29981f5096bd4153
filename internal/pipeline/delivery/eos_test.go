package delivery

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/outboxd/outboxd/sink"
	"github.com/outboxd/outboxd/source"
)

// The exactly_once core against a model of Kafka (transactions visible only on commit; a new
// producer aborts what the old one left open; a request fails whole when one record of it is
// refused; after a failure every later record of the transaction fails too) and of a source that
// re-reads from the committed position. After every step: Check(), and the VISIBLE log (what
// read_committed consumers see: records of committed transactions, in commit order) must be a
// prefix of the source transactions, WHOLE, each row once (as its record or its dead letter), each
// Kafka transaction ending with the position record of its last source transaction.

var (
	errPoison    = errors.New("message too large")
	errTransient = errors.New("not enough replicas")
	errBadRow    = errors.New("column is NULL")
)

type mtx struct {
	pos    source.Position
	rows   []string // row ids
	poison map[string]bool
	bad    map[string]bool // the transform refuses it
	cuts   []int           // chunk boundaries (row counts)
}

type mrec struct {
	topic, key string
}

type pend struct {
	id  ID
	rec mrec
}

type eosModel struct {
	t    *testing.T
	rng  *rand.Rand
	txs  []mtx
	rows map[string]*mtx

	// source session
	next, chunk int
	hold        *source.Tx

	// Kafka
	visible   []mrec
	committed source.Position
	open      []mrec
	pending   []pend
	stale     []pend // sends of replaced producers
	txnErr    error
	begun     bool
	now       time.Time

	commitFails bool // random commit failures
	quiet       bool
	guardFired  int
	spillRedos  int
	deadLetters int

	// kafka.on_permanent_error: stop (eos_stop_test.go)
	stop       bool
	halted     *PermanentError // the last run's halt
	halts      int
	exactHalts int
}

func newModel(t *testing.T, seed uint64) *eosModel {
	m := &eosModel{t: t, rng: rand.New(rand.NewPCG(seed, 42)), rows: map[string]*mtx{}, now: time.Unix(1e6, 0)}
	n := 1 + m.rng.IntN(8)
	for i := range n {
		tx := mtx{pos: source.Position(fmt.Sprintf("%04d", i+1)), poison: map[string]bool{}, bad: map[string]bool{}}
		rows := m.rng.IntN(4)
		if m.rng.IntN(3) == 0 {
			rows = 5 + m.rng.IntN(40) // a big one
		}
		for j := range rows {
			id := fmt.Sprintf("t%dr%d", i+1, j)
			tx.rows = append(tx.rows, id)
			switch m.rng.IntN(40) {
			case 0:
				tx.poison[id] = true
			case 1:
				tx.bad[id] = true
			}
		}
		if rows > 1 && m.rng.IntN(2) == 0 { // chunk it
			for k := 1 + m.rng.IntN(3); k < rows; k += 1 + m.rng.IntN(6) {
				tx.cuts = append(tx.cuts, k)
			}
		}
		m.txs = append(m.txs, tx)
	}
	for i := range m.txs {
		for _, id := range m.txs[i].rows {
			m.rows[id] = &m.txs[i]
		}
	}
	return m
}

func (m *eosModel) config(c *Config) {
	c.Mode = ExactlyOnce
	c.Route = func(r *source.Row, _ time.Time) (sink.Record, error) {
		id := string(r.Values[0].Bytes)
		if m.rows[id].bad[id] {
			return sink.Record{}, errBadRow
		}
		return sink.Record{Topic: "t", Key: []byte(id), Value: r.Values[1].Bytes}, nil
	}
	c.Classify = func(err error) (bool, string) { return errors.Is(err, errPoison), "record_too_large" }
	c.PositionRecord = func(p source.Position) sink.Record { return sink.Record{Topic: "offsets", Value: []byte(p)} }
	c.DeadLetter = func(rec sink.Record, row *source.Row, stage, reason, msg string, at Where, now time.Time) sink.Record {
		return sink.Record{Topic: "dlq", Key: row.Values[0].Bytes}
	}
}

// chunkAt returns the next chunk of the source (nil: none left).
func (m *eosModel) chunkAt() *source.Tx {
	if m.next >= len(m.txs) {
		return nil
	}
	tx := &m.txs[m.next]
	bounds := append(append([]int{0}, tx.cuts...), len(tx.rows))
	lo, hi := bounds[m.chunk], bounds[m.chunk+1]
	ch := &source.Tx{More: m.chunk+2 < len(bounds), CommitTime: m.now}
	for _, id := range tx.rows[lo:hi] {
		ch.Rows = append(ch.Rows, source.Row{Table: "outbox", Columns: []string{"id", "payload"},
			Values: []source.Value{{Bytes: []byte(id)}, {Bytes: make([]byte, 10+m.rng.IntN(100))}}})
	}
	if ch.More {
		m.chunk++
	} else {
		ch.Position = tx.pos
		m.next, m.chunk = m.next+1, 0
	}
	return ch
}

// reopen: the source opens again at from.
func (m *eosModel) reopen(from source.Position) {
	m.next, m.chunk, m.hold = 0, 0, nil
	for m.next < len(m.txs) && from != "" && m.txs[m.next].pos <= from {
		m.next++
	}
}

// newProducer: initialising the transactional id aborts what the old producer left open.
func (m *eosModel) newProducer() {
	m.stale = append(m.stale, m.pending...)
	m.pending, m.open, m.txnErr, m.begun = nil, nil, nil, false
}

// resolve answers the first n pending sends as one request.
func (m *eosModel) resolve(c *Core, n int) {
	req := m.pending[:n]
	m.pending = m.pending[n:]
	err := m.txnErr
	if err == nil {
		for _, p := range req {
			if p.rec.topic == "t" && m.rows[p.rec.key].poison[p.rec.key] {
				err = fmt.Errorf("broker refused the request: %w", errPoison)
			}
		}
		if err == nil && m.rng.IntN(300) == 0 {
			err = errTransient
		}
		m.txnErr = err
	}
	for _, p := range req {
		if err == nil {
			m.open = append(m.open, p.rec)
		}
		c.Outcome(m.now, p.id, err)
	}
}

// checkVisible: the invariant, after every step.
func (m *eosModel) checkVisible(final bool) {
	m.t.Helper()
	ti, ri := 0, 0 // next expected tx, row
	var lastPos source.Position
	for i, r := range m.visible {
		if r.topic == "offsets" {
			for ti < len(m.txs) && ri == len(m.txs[ti].rows) && m.txs[ti].pos != source.Position(r.key) {
				ti, ri = ti+1, 0 // transactions without rows
			}
			if ti >= len(m.txs) || ri != len(m.txs[ti].rows) || m.txs[ti].pos != source.Position(r.key) {
				m.t.Fatalf("visible[%d]: position %s does not end a whole source transaction (at tx %d row %d): %v", i, r.key, ti, ri, m.visible)
			}
			lastPos = source.Position(r.key)
			ti, ri = ti+1, 0
			continue
		}
		for ti < len(m.txs) && ri == len(m.txs[ti].rows) {
			ti, ri = ti+1, 0
		}
		if ti >= len(m.txs) || m.txs[ti].rows[ri] != r.key {
			m.t.Fatalf("visible[%d] = %v: not the next row of the source (tx %d row %d): %v", i, r, ti, ri, m.visible)
		}
		id := r.key
		wantDLQ := m.rows[id].poison[id] || m.rows[id].bad[id]
		if m.stop && (wantDLQ || r.topic == "dlq") {
			m.t.Fatalf("visible[%d] = %v: a refused row (or a dead letter) is visible under on_permanent_error: stop", i, r)
		}
		if (r.topic == "dlq") != wantDLQ {
			m.t.Fatalf("visible[%d] = %v: dead-lettered %v, poison %v", i, r, r.topic == "dlq", wantDLQ)
		}
		ri++
	}
	if len(m.visible) > 0 && m.visible[len(m.visible)-1].topic != "offsets" {
		m.t.Fatalf("the visible log does not end with a position record: %v", m.visible)
	}
	if lastPos != m.committed {
		m.t.Fatalf("last visible position %s, committed %s", lastPos, m.committed)
	}
	if final && lastPos != m.txs[len(m.txs)-1].pos {
		m.t.Fatalf("finished at %s, want %s", lastPos, m.txs[len(m.txs)-1].pos)
	}
}

func recOf(s Send) mrec {
	r := mrec{topic: s.Rec.Topic, key: string(s.Rec.Key)}
	if r.topic == "offsets" {
		r.key = string(s.Rec.Value)
	}
	return r
}

// runSeed drives cores (restarted after a crash, a stop or a fatal error) until every
// transaction is visible.
func runSeed(t *testing.T, seed uint64) *eosModel { return runSeedMode(t, seed, false) }

func runSeedMode(t *testing.T, seed uint64, stop bool) *eosModel {
	m := newModel(t, seed)
	var cfg Config
	m.config(&cfg)
	m.stop, cfg.StopOnPermanent, cfg.StopTimeout = stop, stop, time.Duration(50+m.rng.IntN(2000))*time.Millisecond
	cfg.BatchRecords = 1 + m.rng.IntN(10)
	cfg.BatchBytes = 200 + m.rng.IntN(2000)
	cfg.RetainBytes = cfg.BatchBytes
	if m.rng.IntN(2) == 0 {
		cfg.RetainBytes = 50 + m.rng.IntN(300) // spill
	}
	cfg.MaxInflight = 1 + m.rng.IntN(20)
	cfg.MaxInflightBytes = 100 + m.rng.IntN(3000)
	cfg.Linger, cfg.IdleInterval = 20*time.Millisecond, 100*time.Millisecond
	cfg.RetryMin, cfg.RetryMax = time.Millisecond, 10*time.Millisecond
	guardSeed := m.rng.IntN(4) == 0
	if guardSeed {
		cfg.TxnTimeout = 400 * time.Millisecond // guard at 200ms
	}
	m.commitFails = m.rng.IntN(2) == 0
	restarts := 0
	for run := 0; ; run++ {
		if run > 60 {
			t.Fatalf("seed %d: no progress after %d runs (committed %s)", seed, run, m.committed)
		}
		c := New(cfg, m.committed)
		m.newProducer()
		m.stale = nil // the old process is gone, and its producer's callbacks with it
		m.reopen(m.committed)
		c.Open()
		m.quiet = run >= 8 // then no more crashes, stops or source ends: a quiet period lets it finish
		res := m.drive(c, seed)
		if testing.Verbose() && seed == debugSeed {
			t.Logf("run %d: %s committed %s", run, res, m.committed)
		}
		m.checkVisible(false)
		switch res {
		case "done":
			m.checkVisible(true)
			return m
		case "guard":
			cfg.TxnTimeout = time.Hour
		case "halt":
			m.checkHalt(seed)
		}
		restarts++
	}
}

// drive runs one core until the source is delivered ("done"), a crash or stop ("restart"), or
// the transaction-timeout guard ("guard").
func (m *eosModel) drive(c *Core, seed uint64) string {
	t := m.t
	stopped := false
	crashAt := -1
	if m.rng.IntN(3) == 0 && !m.quiet {
		crashAt = m.rng.IntN(400)
	}
	for step := 0; step < 20000; step++ {
		if step == crashAt {
			return "restart" // the process dies: nothing more of this core
		}
		rd := c.Ready()
		if rd.Err != nil {
			if strings.Contains(rd.Err.Error(), "kafka.transaction_timeout") {
				if !strings.Contains(rd.Err.Error(), "at_least_once") {
					t.Fatalf("seed %d: guard error without the fix: %v", seed, rd.Err)
				}
				m.guardFired++
				return "guard"
			}
			if errors.Is(rd.Err, ErrShutdownTimeout) {
				return "restart"
			}
			if pe := (*PermanentError)(nil); m.stop && errors.As(rd.Err, &pe) {
				m.halted = pe
				return "halt"
			}
			t.Fatalf("seed %d step %d: %v", seed, step, rd.Err)
		}
		if trace {
			t.Logf("step %d: %+v ph=%d b=%v", step, rd, c.eos.phase, c.eos.b != nil)
		}
		if err := c.Check(); err != nil {
			t.Fatalf("seed %d step %d: Check: %v", seed, step, err)
		}
		var report func()
		switch {
		case rd.NewProducer:
			var err error
			if m.rng.IntN(10) == 0 {
				err = errors.New("coordinator not available")
			} else {
				m.newProducer()
			}
			report = func() { c.ProducerReady(m.now, err) }
		case rd.ReadBack:
			var err error
			if m.rng.IntN(10) == 0 {
				err = errors.New("offsets topic unavailable")
			}
			p := m.committed
			report = func() { c.Loaded(m.now, p, err) }
		case rd.Abort:
			if len(m.pending) > 0 {
				t.Fatalf("seed %d: Abort with %d sends unresolved: %v (core: %d)", seed, len(m.pending), m.pending, len(c.eos.sends))
			}
			m.open, m.txnErr, m.begun = nil, nil, false
			report = func() { c.Aborted(m.now, nil) }
		case rd.Begin:
			var err error
			if m.rng.IntN(30) == 0 {
				err = errors.New("transition not allowed")
				rd.Sends = nil
			} else {
				m.begun = true
			}
			report = func() { c.Began(m.now, err) }
		}
		for _, s := range rd.Sends {
			if !m.begun {
				t.Fatalf("seed %d: a send outside a transaction", seed)
			}
			r := recOf(s)
			if m.rng.IntN(60) == 0 {
				c.Refused(m.now, s.ID, errTransient)
				break
			}
			if s.Alone && len(m.pending) > 0 {
				t.Fatalf("seed %d: a send alone with %d in flight", seed, len(m.pending))
			}
			m.pending = append(m.pending, pend{s.ID, r})
		}
		if rd.Flush {
			report = func() {
				for len(m.pending) > 0 {
					m.resolve(c, 1+m.rng.IntN(len(m.pending)))
				}
				c.Flushed(m.now, nil)
			}
		}
		if rd.Commit {
			if len(m.pending) > 0 || m.txnErr != nil {
				t.Fatalf("seed %d: Commit with %d unresolved, txn error %v", seed, len(m.pending), m.txnErr)
			}
			mode := 0
			if m.commitFails {
				mode = m.rng.IntN(6) // 1: fails, not committed; 2: fails, committed
			}
			var err error
			if mode != 1 {
				m.visible = append(m.visible, m.open...)
				if len(m.open) == 0 || m.open[len(m.open)-1].topic != "offsets" {
					t.Fatalf("seed %d: a Kafka transaction without its position record: %v", seed, m.open)
				}
				m.committed = source.Position(m.open[len(m.open)-1].key)
			}
			if mode == 1 || mode == 2 {
				err = errors.New("coordinator connection lost")
			}
			m.open, m.begun = nil, false
			report = func() { c.CommitResult(m.now, err) }
		}
		if rd.Confirm != "" && rd.Confirm != m.committed {
			t.Fatalf("seed %d: Confirm %s, committed %s", seed, rd.Confirm, m.committed)
		}
		for _, e := range rd.Events {
			if e.Kind == EventDeadLetter {
				m.deadLetters++
			}
		}
		c.Advance()
		m.checkVisible(false)
		if report != nil {
			report()
			continue
		}
		if rd.Reopen {
			m.spillRedos++
			m.reopen(c.Stored())
			c.Open()
			continue
		}
		if rd.Done {
			if stopped {
				return "restart"
			}
			m.reopen(c.Stored()) // after a source end: reopen
			c.Open()
			continue
		}
		// An event.
		if m.hold == nil {
			m.hold = m.chunkAt()
		}
		switch k := m.rng.IntN(1000); {
		case k < 450 && m.hold != nil && c.CanAccept(len(m.hold.Rows), source.ChunkBytes(m.hold)):
			h := m.hold
			m.hold = nil
			if err := c.Accept(m.now, h); err != nil {
				t.Fatalf("seed %d: Accept: %v", seed, err)
			}
		case k >= 450 && k < 650 && len(m.pending) > 0:
			m.resolve(c, 1+m.rng.IntN(len(m.pending)))
		case k >= 650 && k < 680 && len(m.stale) > 0:
			p := m.stale[0]
			m.stale = m.stale[1:]
			c.Outcome(m.now, p.id, errors.New("producer closed"))
		case k >= 680 && k < 682 && !stopped && !m.quiet:
			stopped = true
			m.hold = nil
			c.Stop(m.now, m.now.Add(time.Duration(m.rng.IntN(500))*time.Millisecond))
		case k >= 682 && k < 684 && !stopped && !m.quiet:
			m.hold = nil
			c.SourceEnded(m.now, m.now.Add(time.Hour))
		default:
			m.now = m.now.Add(time.Duration(m.rng.IntN(15)) * time.Millisecond)
			c.Tick(m.now)
		}
		if m.hold == nil && m.next >= len(m.txs) && len(m.pending) == 0 && m.committed == m.txs[len(m.txs)-1].pos && !stopped {
			return "done"
		}
	}
	t.Fatalf("seed %d: no end after 20000 steps (committed %s, next tx %d)", seed, m.committed, m.next)
	return ""
}

var debugSeed uint64 = 1 << 62
var trace = false

func TestEOSCoreProperty(t *testing.T) {
	seeds := 2500
	if testing.Short() {
		seeds = 300
	}
	var guards, redos, dls int
	for seed := range uint64(seeds) {
		if debugSeed != 1<<62 && seed != debugSeed {
			continue
		}
		m := runSeed(t, seed)
		guards += m.guardFired
		redos += m.spillRedos
		dls += m.deadLetters
	}
	t.Logf("%d seeds: %d transaction-timeout guards, %d spilled redos (re-read), %d dead letters", seeds, guards, redos, dls)
	if guards == 0 || redos == 0 || dls == 0 {
		t.Fatalf("the seeds did not exercise the guard (%d), spilled redos (%d) and dead letters (%d)", guards, redos, dls)
	}
}
