package delivery

import (
	"errors"
	"fmt"
	"testing"
)

// kafka.on_permanent_error: stop, at_least_once: the property run of alo_prop_test.go with
// StopOnPermanent. Besides the invariants checked there after every step (nothing stored covers
// an unresolved record, ...): no dead letter is ever produced, nothing is sent after the halt,
// the run ends with a *PermanentError naming a record that really was refused (the transform's
// "bad" row, or one Kafka refused for good), the stored position is before that record's
// transaction, and the contiguous resolved prefix before it is stored (the first transaction
// after the stored position is not one read whole and fully acked).
func TestALOStopOnPermanentProperties(t *testing.T) {
	seeds := uint64(3000)
	if testing.Short() {
		seeds = 500
	}
	outcomes := map[string]int{}
	for seed := uint64(0); seed < seeds; seed++ {
		r := newPropRun(t, seed, true)
		stored, err := r.run()
		var pe *PermanentError
		switch {
		case err == nil:
			if len(r.permFails) > 0 {
				r.fail("clean end after %d records were refused for good", len(r.permFails))
			}
			outcomes["clean"]++
		case errors.As(err, &pe):
			r.checkHalt(pe, stored)
			outcomes["halt "+pe.Stage]++
		case errors.Is(err, ErrShutdownTimeout):
			outcomes["timeout"]++
		case errors.Is(err, errStore):
			outcomes["store"]++
		case errors.Is(err, errTrans):
			outcomes["transient"]++
		default:
			r.fail("unexpected error under stop (the DLQ breaker must not apply): %v", err)
		}
	}
	t.Logf("outcomes over %d seeds: %v", seeds, outcomes)
	if outcomes["halt transform"] < int(seeds)/20 || outcomes["halt produce"] < int(seeds)/20 || outcomes["clean"] < int(seeds)/50 {
		t.Fatalf("too few halts or clean runs to mean anything: %v", outcomes)
	}
}

func (r *propRun) checkHalt(pe *PermanentError, stored int) {
	r.t.Helper()
	var tx, row int
	if _, err := fmt.Sscanf(pe.RowID, "%d.%d", &tx, &row); err != nil {
		r.fail("PermanentError names no row id: %v", pe)
	}
	val := string(r.txs[tx].rows[row].Values[1].Bytes)
	switch pe.Stage {
	case "transform":
		if val != "bad" || pe.Reason != "invalid_value" || !errors.Is(pe, errRoute) {
			r.fail("transform halt on row %d.%d (%q, reason %s): not a refused row", tx, row, val, pe.Reason)
		}
	case "produce":
		if !r.permFails[[2]int{tx, row}] || pe.Reason != "record_too_large" || !errors.Is(pe, errPerm) {
			r.fail("produce halt on row %d.%d that Kafka never refused for good (reason %s)", tx, row, pe.Reason)
		}
	default:
		r.fail("halt stage %q", pe.Stage)
	}
	for k := range r.permFails {
		if k[0] < tx || k[0] == tx && k[1] < row {
			r.fail("halt reported row %d.%d, but row %d.%d before it was refused too (the earliest must be named)", tx, row, k[0], k[1])
		}
	}
	if stored >= tx {
		r.fail("stored transaction %d at or past the bad record's transaction %d", stored, tx)
	}
	if got := posIndex(pe.Stored); got != stored || posIndex(r.c.Stored()) != stored {
		r.fail("PermanentError.Stored %s, core %s, model %d", pe.Stored, r.c.Stored(), stored)
	}
	if pe.Where.Position != "" && posIndex(pe.Where.Position) != tx {
		r.fail("PermanentError position %s, row of transaction %d", pe.Where.Position, tx)
	}
	if r.saving != "" {
		r.fail("halted with the save of %s in flight", r.saving)
	}
	if j := stored + 1; j < tx && j < r.nextTx && r.resolvedTx[j] == len(r.txs[j].rows) {
		r.fail("transaction %d (before the bad one, %d) was read whole and acked but the stored position is %d", j, tx, stored)
	}
}
