package offsets

import (
	"errors"
	"fmt"
	"testing"

	"github.com/outboxd/outboxd/source"
)

// trackerModel is the Tracker as a model that knows nothing of the ring (the model of
// TestTrackerChunksRandom, indexed by Seq): every transaction ever added, the oldest
// uncommitted one, and the last committed position.
type trackerModel struct {
	maxRecords, maxTxs int
	all                []*modelTx // by Seq
	first              int        // Seq of the oldest uncommitted transaction
	committed          int        // Seq of the last transaction whose position Commit yielded, -1 before
}

type modelTx struct {
	pos             source.Position
	total, resolved int
	closed, dropped bool
}

func (m *trackerModel) open() bool {
	return len(m.all) > m.first && !m.all[len(m.all)-1].closed
}

func (m *trackerModel) outstanding() int {
	n := 0
	for _, x := range m.all[m.first:] {
		n += x.total - x.resolved
	}
	return n
}

// trackerOps runs the operations encoded in ops (see FuzzTracker) on a Tracker and on the model,
// and fails at the first disagreement.
func trackerOps(t *testing.T, ops []byte) {
	if len(ops) < 2 {
		return
	}
	m := &trackerModel{maxRecords: 1 + int(ops[0]%16), maxTxs: 1 + int(ops[1]%8), committed: -1}
	tr := NewTracker(m.maxRecords, m.maxTxs)
	for step := 2; step+1 < len(ops); step += 2 {
		op, arg := ops[step]%10, ops[step+1]
		where := fmt.Sprintf("step %d (op %d arg %d, caps %d/%d)", step/2, op, arg, m.maxRecords, m.maxTxs)
		switch op {
		case 0, 1, 2, 3: // a chunk (op 3: a whole transaction through Track)
			n, more := int(arg%5), arg&0x80 != 0
			whole := op == 3
			if whole {
				more = false
			}
			pos := source.Position("")
			if !more {
				pos = source.Position(fmt.Sprint("p", len(m.all)))
			}
			open := m.open()
			room := (open || len(m.all)-m.first < m.maxTxs) && (n == 0 || m.outstanding() == 0 || m.outstanding()+n <= m.maxRecords)
			if got := tr.CanAdd(n); got != room {
				t.Fatalf("%s: CanAdd(%d) = %v, model %v", where, n, got, room)
			}
			if got := tr.CanTrack(n); whole && got != (room && !open) {
				t.Fatalf("%s: CanTrack(%d) = %v, model %v", where, n, got, room && !open)
			}
			var s Seq
			var err error
			if whole {
				s, err = tr.Track(pos, n)
			} else {
				s, err = tr.Add(n, more, pos)
			}
			switch {
			case whole && open:
				if err == nil {
					t.Fatalf("%s: Track while a chunked transaction is open: no error", where)
				}
				continue
			case !room:
				if !errors.Is(err, ErrFull) {
					t.Fatalf("%s: no room, Add = %d, %v; want ErrFull", where, s, err)
				}
				continue
			case err != nil:
				t.Fatalf("%s: Add(%d, %v): %v", where, n, more, err)
			}
			x := &modelTx{}
			if open {
				x = m.all[len(m.all)-1]
			} else {
				m.all = append(m.all, x)
			}
			if want := Seq(len(m.all) - 1); s != want {
				t.Fatalf("%s: Add gave seq %d, model %d", where, s, want)
			}
			x.total += n
			x.closed, x.pos = !more, pos
		case 4, 5: // resolve an outstanding record
			var pending []int
			for s := m.first; s < len(m.all); s++ {
				if m.all[s].resolved < m.all[s].total {
					pending = append(pending, s)
				}
			}
			if len(pending) == 0 {
				continue
			}
			s := pending[int(arg)%len(pending)]
			if err := tr.Done(Seq(s)); err != nil {
				t.Fatalf("%s: Done(%d) of an outstanding record: %v", where, s, err)
			}
			m.all[s].resolved++
		case 6: // an outcome for any sequence number: known, committed or never given out
			s := int(arg) % (len(m.all) + 2)
			ok := s >= m.first && s < len(m.all) && !m.all[s].dropped && m.all[s].resolved < m.all[s].total
			if err := tr.Done(Seq(s)); (err == nil) != ok {
				t.Fatalf("%s: Done(%d) = %v, model says ok=%v", where, s, err, ok)
			}
			if ok {
				m.all[s].resolved++
			}
		case 7: // abandon
			open := m.open()
			err := tr.Abandon()
			switch {
			case !open && err != nil:
				t.Fatalf("%s: Abandon without an open transaction: %v", where, err)
			case open && m.all[len(m.all)-1].resolved < m.all[len(m.all)-1].total:
				if err == nil {
					t.Fatalf("%s: Abandon with records unresolved succeeded", where)
				}
			case open:
				if err != nil {
					t.Fatalf("%s: Abandon: %v", where, err)
				}
				x := m.all[len(m.all)-1]
				x.closed, x.dropped, x.pos = true, true, ""
			}
		default: // commit
			p, ok := tr.Commit()
			want := -1
			for m.first < len(m.all) && m.all[m.first].closed && m.all[m.first].resolved == m.all[m.first].total {
				if !m.all[m.first].dropped {
					want = m.first
				}
				m.first++
			}
			if (want >= 0) != ok || ok && p != m.all[want].pos {
				t.Fatalf("%s: Commit = %q %v, model wants seq %d", where, p, ok, want)
			}
			if ok {
				if want <= m.committed {
					t.Fatalf("%s: commit went back from seq %d to %d", where, m.committed, want)
				}
				m.committed = want
			}
		}
		// The committed position is never beyond a record not done or a transaction not closed.
		for s := 0; s <= m.committed; s++ {
			if x := m.all[s]; x.resolved != x.total || !x.closed {
				t.Fatalf("%s: committed seq %d past seq %d (%d/%d resolved, closed %v)", where, m.committed, s, x.resolved, x.total, x.closed)
			}
		}
		if tr.Records() != m.outstanding() || tr.Transactions() != len(m.all)-m.first || tr.Open() != m.open() ||
			int(tr.First()) != m.first || int(tr.Next()) != len(m.all) {
			t.Fatalf("%s: records %d, transactions %d, open %v, first %d, next %d; model %d, %d, %v, %d, %d", where,
				tr.Records(), tr.Transactions(), tr.Open(), tr.First(), tr.Next(),
				m.outstanding(), len(m.all)-m.first, m.open(), m.first, len(m.all))
		}
		if tr.Transactions() > m.maxTxs {
			t.Fatalf("%s: %d transactions tracked, over the cap %d", where, tr.Transactions(), m.maxTxs)
		}
	}
}

// FuzzTracker runs random Add/Track/Done/Abandon/Commit sequences on a Tracker against
// trackerModel: every Commit yields exactly the model's position (the end of the longest
// closed, fully resolved prefix, abandoned transactions passed without a position), never one
// beyond a record not done, never going back; CanAdd/CanTrack, ErrFull, the sequence numbers,
// Done's refusal of unknown, committed, abandoned or over-resolved transactions and Abandon's
// refusal with records outstanding all agree with the model. The input's first two bytes pick
// the caps, then each byte pair is an operation (first byte mod 10) and its argument.
func FuzzTracker(f *testing.F) {
	f.Add([]byte{3, 2, 0, 0x83, 4, 0, 1, 2, 4, 0, 4, 0, 9, 0, 4, 0, 9, 0})
	f.Add([]byte{0, 0, 0, 0x85, 7, 0, 4, 0, 7, 0, 9, 0, 3, 1, 6, 9, 4, 0, 9, 0})
	f.Add([]byte{15, 7, 3, 4, 3, 0, 3, 2, 6, 0, 6, 1, 6, 2, 5, 1, 5, 1, 9, 0, 6, 0, 9, 0})
	f.Add([]byte{1, 1, 0, 0x84, 1, 0x84, 3, 1, 4, 0, 4, 0, 4, 0, 7, 0, 0, 2, 9, 0, 4, 1, 4, 1, 9, 0})
	f.Fuzz(func(t *testing.T, ops []byte) {
		if len(ops) > 1024 {
			return // long sequences add nothing the model does not see in short ones
		}
		trackerOps(t, ops)
	})
}
