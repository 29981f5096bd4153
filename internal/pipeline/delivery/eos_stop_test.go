package delivery

import (
	"testing"

	"github.com/outboxd/outboxd/source"
)

// kafka.on_permanent_error: stop, exactly_once: the model of eos_test.go with StopOnPermanent.
// After every step the visible log (read_committed) is a prefix of the source, whole
// transactions, and holds no refused row and no dead letter. Each halt names the first refused
// row of the source after what is visible (or a later one of its transaction), and (unless the halt's
// drain timed out or a stop / source end came meanwhile: the error's Note says so) the committed position is exactly the end of the transaction before
// that row's one: the transactions before it in the same Kafka transaction were committed.
// Then the row is "fixed" (the model's config change) and the next run resumes there.
func TestEOSStopOnPermanentProperty(t *testing.T) {
	seeds := 2500
	if testing.Short() {
		seeds = 300
	}
	halts, exact := 0, 0
	for seed := range uint64(seeds) {
		m := runSeedMode(t, seed, true)
		halts += m.halts
		exact += m.exactHalts
		if m.deadLetters != 0 {
			t.Fatalf("seed %d: %d dead-letter events under stop", seed, m.deadLetters)
		}
	}
	t.Logf("%d seeds: %d halts, %d of them with the exact prefix committed", seeds, halts, exact)
	if halts < seeds/10 || exact < halts*9/10 {
		t.Fatalf("too few halts (%d) or exact ones (%d) to mean anything", halts, exact)
	}
}

// checkHalt checks the last run's halt and fixes the row it names.
func (m *eosModel) checkHalt(seed uint64) {
	m.t.Helper()
	pe := m.halted
	m.halts++
	// The first refused row after the committed position.
	first, prev := "", source.Position("")
	for i := range m.txs {
		tx := &m.txs[i]
		if m.committed != "" && tx.pos <= m.committed {
			continue
		}
		for _, id := range tx.rows {
			if tx.poison[id] || tx.bad[id] {
				first = id
				break
			}
		}
		if first != "" {
			if i > 0 {
				prev = m.txs[i-1].pos
			}
			break
		}
	}
	// The named row is a refused row of that row's transaction: a transform refusal is known at
	// once, a Kafka refusal only once its record is sent alone, and the transaction is not sent
	// again once the core halted on it (so it may name a later refused row of the same one).
	tx := m.rows[first]
	if first == "" || m.rows[pe.RowID] != tx || !tx.poison[pe.RowID] && !tx.bad[pe.RowID] {
		m.t.Fatalf("seed %d: halt names row %q, the first refused row after %s is %q: %v", seed, pe.RowID, m.committed, first, pe)
	}
	first = pe.RowID
	if m.committed != "" && m.committed >= tx.pos || pe.Stored != m.committed {
		m.t.Fatalf("seed %d: committed %s (error says %s) at or past the bad row's transaction %s", seed, m.committed, pe.Stored, tx.pos)
	}
	wantStage, wantReason := "produce", "record_too_large"
	if tx.bad[first] {
		wantStage, wantReason = "transform", "invalid_value"
	}
	if pe.Stage != wantStage || pe.Reason != wantReason {
		m.t.Fatalf("seed %d: halt stage %s reason %s, want %s %s", seed, pe.Stage, pe.Reason, wantStage, wantReason)
	}
	if pe.Note == "" {
		if m.committed != prev {
			m.t.Fatalf("seed %d: halt on %s committed %s, want the end of the transaction before it, %s", seed, first, m.committed, prev)
		}
		m.exactHalts++
	}
	delete(tx.poison, first) // fixed: the next run delivers it
	delete(tx.bad, first)
}
