package delivery

import (
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/outboxd/outboxd/sink"
	"github.com/outboxd/outboxd/source"
)

// The at_least_once core against an independent model, over random chunk cuts, outcome orders
// (ack, permanent → dead letter, dead letter ack / failure, transient), saves that succeed,
// fail, are cancelled or stall, and a Stop or SourceEnded at every step index. After every
// step: Check(), and the model's own invariants (nothing stored covers an unresolved record;
// confirmed ≤ stored; one save at a time, in order; caps hold).

var (
	errPerm  = errors.New("message too large")
	errTrans = errors.New("not enough replicas")
	errStore = errors.New("disk full")
	errRoute = errors.New("no such column")
)

func testClassify(err error) (bool, string) {
	if errors.Is(err, errPerm) {
		return true, "record_too_large"
	}
	return false, "unknown"
}

// testRoute: a row whose second value is "bad" fails the transform.
func testRoute(r *source.Row, _ time.Time) (sink.Record, error) {
	rec := sink.Record{Topic: "t", Key: r.Values[0].Bytes, Value: r.Values[1].Bytes}
	if string(r.Values[1].Bytes) == "bad" {
		return sink.Record{Topic: "t"}, errRoute
	}
	return rec, nil
}

func testDeadLetter(rec sink.Record, row *source.Row, stage, reason, msg string, at Where, now time.Time) sink.Record {
	return sink.Record{Topic: "dlq", Key: row.Values[0].Bytes, Headers: []sink.Header{
		{Key: "stage", Value: []byte(stage)}, {Key: "position", Value: []byte(at.Position)}, {Key: "after", Value: []byte(at.After)}}}
}

// ptx is one source transaction of the model: its rows, cut into chunks.
type ptx struct {
	pos    source.Position
	rows   []source.Row
	chunks [][2]int // [from, to) row ranges; the last is the closing chunk (maybe empty)
}

func genTxs(rng *rand.Rand, n int) []ptx {
	txs := make([]ptx, n)
	for i := range txs {
		t := &txs[i]
		t.pos = source.Position(fmt.Sprintf("p%03d", i))
		k := rng.IntN(7)
		for j := 0; j < k; j++ {
			val := "v" + string(make([]byte, rng.IntN(200)))
			if rng.IntN(15) == 0 {
				val = "bad"
			}
			t.rows = append(t.rows, source.Row{Table: "db.outbox", Columns: []string{"id", "payload"},
				Values: []source.Value{{Bytes: []byte(fmt.Sprintf("%d.%d", i, j))}, {Bytes: []byte(val)}}})
		}
		// Cut into chunks: each non-last chunk has ≥1 row; sometimes an empty closing chunk.
		for from := 0; ; {
			rest := k - from
			if rest == 0 {
				t.chunks = append(t.chunks, [2]int{from, from})
				break
			}
			size := 1 + rng.IntN(rest)
			if rng.IntN(2) == 0 {
				size = rest
			}
			if from+size == k && rng.IntN(4) != 0 {
				t.chunks = append(t.chunks, [2]int{from, k})
				break
			}
			t.chunks = append(t.chunks, [2]int{from, from + size})
			from += size
		}
	}
	return txs
}

// instance is one accepted row (a re-read after a reopen is a new instance).
type instance struct {
	tx, row  int
	resolved int  // acks of its record or of its dead letter
	dlq      bool // its dead letter is in flight
	bytes    int
}

type propRun struct {
	t    *testing.T
	seed uint64
	rng  *rand.Rand
	c    *Core
	txs  []ptx
	cfg  Config

	now        time.Time
	nextTx     int // next transaction to read
	nextChunk  int
	sends      map[ID]*instance
	pending    []ID // executed sends without an outcome
	insts      []*instance
	saving     source.Position // the model's save in flight
	savingIdx  int
	stallLeft  int
	storedIdx  int // index of the stored transaction (-1: none)
	confirmIdx int
	faulty     bool // fatal outcomes and store failures happen
	stopping   bool
	ended      bool // SourceEnded called in this session
	done       bool
	fatal      error
	resolvedTx map[int]int // tx → rows resolved in the current instance set

	// kafka.on_permanent_error: stop (alo_stop_prop_test.go)
	stop      bool
	halted    bool            // the core logged its halt
	permFails map[[2]int]bool // records the core knows are refused for good (tx, row): Kafka's, the transform's
}

func posIndex(p source.Position) int {
	if p == "" {
		return -1
	}
	i, _ := strconv.Atoi(string(p[1:]))
	return i
}

// step executes the core's Ready like a loop would and checks everything.
func (r *propRun) step(what string) {
	r.t.Helper()
	rd := r.c.Ready()
	if rd.Err != nil {
		r.fatal = rd.Err
		var pe *PermanentError
		if errors.As(rd.Err, &pe) {
			r.halted = true // a halt with nothing in flight fails at once: its log line is not handed out
		}
		return
	}
	if r.stop && r.halted && len(rd.Sends) > 0 {
		r.fail("%s: %d sends after the halt (nothing new may go out)", what, len(rd.Sends))
	}
	for _, ev := range rd.Events {
		if ev.Kind == EventDeadLetter && r.stop {
			r.fail("%s: a dead-letter event under on_permanent_error: stop", what)
		}
		if ev.Kind == EventLog && ev.Level == slog.LevelError {
			r.halted = true
		}
	}
	for _, s := range rd.Sends {
		in := r.sends[s.ID]
		if in == nil {
			in = r.instFor(s)
		}
		if s.Rec.Topic == "dlq" {
			if r.stop {
				r.fail("%s: a dead letter under on_permanent_error: stop", what)
			}
			if in.dlq {
				r.fail("%s: a second dead letter for one record", what)
			}
			in.dlq = true
			r.sends[s.ID] = in
		}
		r.pending = append(r.pending, s.ID)
	}
	if rd.Save != "" {
		if r.saving != "" {
			r.fail("%s: Save(%s) while %s is being saved", what, rd.Save, r.saving)
		}
		i := posIndex(rd.Save)
		if i < r.storedIdx {
			r.fail("%s: Save(%s) goes back from stored %d", what, rd.Save, r.storedIdx)
		}
		// Nothing stored may cover an unresolved record: every transaction ≤ i is resolved.
		for tx := r.storedIdx + 1; tx <= i; tx++ {
			if r.resolvedTx[tx] < len(r.txs[tx].rows) {
				r.fail("%s: Save(%s) covers transaction %d with %d/%d records resolved", what, rd.Save, tx, r.resolvedTx[tx], len(r.txs[tx].rows))
			}
		}
		r.saving, r.savingIdx, r.stallLeft = rd.Save, i, r.rng.IntN(4)
	}
	if rd.Confirm != "" {
		i := posIndex(rd.Confirm)
		if i > r.storedIdx || i < r.confirmIdx {
			r.fail("%s: Confirm(%s) with stored %d, confirmed %d", what, rd.Confirm, r.storedIdx, r.confirmIdx)
		}
		r.confirmIdx = i
	}
	r.c.Advance()
	if len(r.pending) > r.cfg.MaxInflight {
		r.fail("%s: %d sends without an outcome, MaxInflight %d", what, len(r.pending), r.cfg.MaxInflight)
	}
	if err := r.c.Check(); err != nil {
		r.fail("%s: Check: %v", what, err)
	}
	if rd.Done {
		if r.saving != "" {
			r.fail("%s: Done with a save in flight", what)
		}
		if len(r.pending) > 0 && r.fatal == nil {
			r.fail("%s: Done with %d sends in flight", what, len(r.pending))
		}
		if got := posIndex(r.c.Stored()); got != r.storedIdx {
			r.fail("%s: Stored() %d, model %d", what, got, r.storedIdx)
		}
		if r.stopping {
			r.done = true
			return
		}
		r.reopen()
	}
}

func (r *propRun) instFor(s Send) *instance {
	key := string(s.Rec.Key)
	var tx, row int
	fmt.Sscanf(key, "%d.%d", &tx, &row)
	in := &instance{tx: tx, row: row}
	r.insts = append(r.insts, in)
	r.sends[s.ID] = in
	return in
}

func (r *propRun) fail(format string, args ...any) {
	r.t.Helper()
	r.t.Fatalf("seed %d: "+format, append([]any{r.seed}, args...)...)
}

// reopen: the session ended after a SourceEnded drain; the source re-reads from Stored().
func (r *propRun) reopen() {
	r.nextTx, r.nextChunk = r.storedIdx+1, 0
	r.ended = false
	// Re-read transactions are new instances; only resolutions of the new ones count.
	for tx := r.storedIdx + 1; tx < len(r.txs); tx++ {
		delete(r.resolvedTx, tx)
	}
	r.c.Open()
	r.step("open")
}

func (r *propRun) acceptNext() bool {
	if r.nextTx >= len(r.txs) || r.stopping || r.ended {
		return false
	}
	t := &r.txs[r.nextTx]
	cut := t.chunks[r.nextChunk]
	ch := source.Tx{Rows: t.rows[cut[0]:cut[1]:cut[1]], CommitTime: r.now}
	if r.nextChunk == len(t.chunks)-1 {
		ch.Position = t.pos
	} else {
		ch.More = true
	}
	bytes := source.ChunkBytes(&ch)
	if !r.c.CanAccept(len(ch.Rows), bytes) {
		return false
	}
	before := r.c.Inflight()
	if r.permFails != nil && !r.halted { // stop: the chunk's first refused row is routed (and halts)
		for i := cut[0]; i < cut[1]; i++ {
			if string(t.rows[i].Values[1].Bytes) == "bad" {
				r.permFails[[2]int{r.nextTx, i}] = true
				break
			}
		}
	}
	if err := r.c.Accept(r.now, &ch); err != nil {
		r.fail("Accept: %v", err)
	}
	if ab := r.c.alo.bytes; before > 0 && len(ch.Rows) > 0 && ab > r.cfg.MaxInflightBytes {
		r.fail("%d bytes in flight past the cap %d with records already in flight", ab, r.cfg.MaxInflightBytes)
	}
	if before > 0 && len(ch.Rows) > 0 && r.c.Inflight() > r.cfg.MaxInflight {
		r.fail("%d records in flight past the cap %d", r.c.Inflight(), r.cfg.MaxInflight)
	}
	if r.nextChunk++; r.nextChunk == len(t.chunks) {
		r.nextTx, r.nextChunk = r.nextTx+1, 0
	}
	r.step("accept")
	return true
}

// outcome reports a random pending send's outcome.
func (r *propRun) outcome() bool {
	if len(r.pending) == 0 {
		return false
	}
	i := r.rng.IntN(len(r.pending))
	id := r.pending[i]
	r.pending = append(r.pending[:i], r.pending[i+1:]...)
	in := r.sends[id]
	var err error
	switch x := r.rng.IntN(100); {
	case in.dlq && r.faulty && x < 10:
		err = errPerm // the dead letter fails: fatal
	case !in.dlq && x < 12:
		err = errPerm // → dead letter
	case r.faulty && x < 16:
		err = errTrans // fatal
	}
	if err == errPerm && !in.dlq && r.permFails != nil {
		r.permFails[[2]int{in.tx, in.row}] = true
	}
	if err == nil {
		in.resolved++
		if in.resolved > 1 {
			r.fail("record %d.%d resolved twice", in.tx, in.row)
		}
		r.resolvedTx[in.tx]++
	}
	r.c.Outcome(r.now, id, err)
	r.step("outcome")
	return true
}

func (r *propRun) saveDone() bool {
	if r.saving == "" {
		return false
	}
	if r.stallLeft > 0 {
		r.stallLeft--
		return false
	}
	p := r.saving
	r.saving = ""
	switch x := r.rng.IntN(100); {
	case r.faulty && x < 10:
		r.c.SaveResult(p, errStore, false)
	case x < 8 && r.stopping:
		r.c.SaveResult(p, errors.New("context canceled"), true)
	default:
		r.storedIdx = r.savingIdx
		r.c.SaveResult(p, nil, false)
	}
	r.step("save")
	return true
}

func runProp(t *testing.T, seed uint64) (stored int, err error) {
	r := newPropRun(t, seed, false)
	return r.run()
}

func newPropRun(t *testing.T, seed uint64, stop bool) *propRun {
	rng := rand.New(rand.NewPCG(seed, 13))
	cfg := Config{Mode: AtLeastOnce, MaxInflight: 1 + rng.IntN(10), MaxInflightBytes: 64 + rng.IntN(900), MaxTxs: 1 + rng.IntN(6),
		Route: testRoute, Classify: testClassify, DeadLetter: testDeadLetter, DLQTopic: "dlq"}
	if rng.IntN(4) == 0 {
		cfg.Breaker = Breaker{Max: 2, Window: 5}
	}
	if stop {
		cfg.StopOnPermanent, cfg.StopTimeout = true, time.Duration(1+rng.IntN(20))*time.Second
	}
	r := &propRun{t: t, seed: seed, rng: rng, txs: genTxs(rng, 3+rng.IntN(12)), cfg: cfg, now: time.Unix(1e9, 0),
		sends: map[ID]*instance{}, storedIdx: -1, confirmIdx: -1, resolvedTx: map[int]int{}, stop: stop}
	if stop {
		r.permFails = map[[2]int]bool{}
	}
	return r
}

func (r *propRun) run() (stored int, err error) {
	seed, rng := r.seed, r.rng
	r.faulty = rng.IntN(3) == 0
	r.c = New(r.cfg, "")
	r.c.Open()
	r.step("open")
	// The stop / source end lands at every step index across seeds.
	endAt, kind := int(seed%97), seed/97%3
	for steps := 0; r.fatal == nil && !r.done; steps++ {
		if steps > 20000 {
			r.fail("no progress after %d steps", steps)
		}
		if steps == endAt || (steps > endAt && r.nextTx >= len(r.txs) && !r.stopping && !r.ended) {
			switch {
			case kind == 1 && steps == endAt && !r.ended:
				r.ended = true
				r.c.SourceEnded(r.now, r.now.Add(time.Duration(1+rng.IntN(50))*time.Second))
				r.step("source ended")
			case kind == 2 && steps == endAt && !r.ended:
				r.stopping = true
				r.c.Stop(r.now, r.now.Add(time.Duration(rng.IntN(3000))*time.Millisecond))
				r.step("stop")
			case steps > endAt:
				r.stopping = true
				r.c.Stop(r.now, r.now.Add(time.Hour))
				r.step("final stop")
			}
			continue
		}
		progressed := false
		switch x := rng.IntN(10); {
		case x < 4:
			progressed = r.acceptNext()
		case x < 8:
			progressed = r.outcome()
		case x < 9:
			progressed = r.saveDone()
		}
		if !progressed {
			r.now = r.now.Add(100 * time.Millisecond)
			r.c.Tick(r.now)
			r.step("tick")
			if r.saving != "" && r.stallLeft > 0 {
				r.stallLeft--
			}
		}
	}
	if r.fatal != nil {
		return r.storedIdx, r.fatal
	}
	// A clean stop: everything accepted resolved exactly once, and the last transaction read
	// whole is stored.
	for _, in := range r.insts {
		if in.resolved != 1 {
			r.fail("record %d.%d resolved %d times", in.tx, in.row, in.resolved)
		}
	}
	if len(r.pending) != 0 {
		r.fail("%d sends without an outcome at the end", len(r.pending))
	}
	last := -1
	if r.nextTx > 0 {
		last = r.nextTx - 1
	}
	if r.storedIdx != last || r.confirmIdx != last {
		r.fail("clean stop stored %d confirmed %d, want %d (the last transaction read whole)", r.storedIdx, r.confirmIdx, last)
	}
	return r.storedIdx, nil
}

func TestALOCoreProperties(t *testing.T) {
	seeds := uint64(3000)
	if testing.Short() {
		seeds = 500
	}
	outcomes := map[string]int{}
	for seed := uint64(0); seed < seeds; seed++ {
		_, err := runProp(t, seed)
		switch {
		case err == nil:
			outcomes["clean"]++
		case errors.Is(err, ErrShutdownTimeout):
			outcomes["timeout"]++
		case errors.Is(err, errStore):
			outcomes["store"]++
		case errors.Is(err, errTrans):
			outcomes["transient"]++
		default:
			outcomes["other fatal"]++ // breaker, dead letter unwritable
		}
	}
	t.Logf("outcomes over %d seeds: %v", seeds, outcomes)
	if outcomes["clean"] < int(seeds)/4 {
		t.Fatalf("too few clean runs to mean anything: %v", outcomes)
	}
}
