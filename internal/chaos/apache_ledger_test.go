package chaos

import (
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// The ledger's order and zombie checks on hand-made records: each must catch what it is for.

func rec(topic string, part int32, off int64, key, id string, seq, i int, pid int64, epoch int16) *kgo.Record {
	return &kgo.Record{Topic: topic, Partition: part, Offset: off, Key: []byte(key), ProducerID: pid, ProducerEpoch: epoch,
		Value:   []byte(fmt.Sprintf(`{"seq": %d, "i": %d, "key": "%s"}`, seq, i, key)),
		Headers: []kgo.RecordHeader{{Key: "id", Value: []byte(id)}}}
}

func TestOutOfOrder(t *testing.T) {
	inOrder := []*kgo.Record{
		rec("t", 0, 0, "k1", "a", 1, 0, 1, 0), rec("t", 0, 1, "k2", "b", 1, 1, 1, 0),
		rec("t", 0, 2, "k1", "c", 2, 0, 1, 0), rec("t", 0, 3, "k1", "d", 2, 1, 1, 0),
	}
	if bad, ex := outOfOrder(inOrder, true); bad != 0 {
		t.Fatalf("in order: %d bad (%s)", bad, ex)
	}
	// at_least_once replay: a suffix again (a, c, d, then c, d) is in order by first delivery,
	// but not record by record.
	replay := append(append([]*kgo.Record(nil), inOrder...), rec("t", 0, 4, "k1", "c", 2, 0, 1, 0), rec("t", 0, 5, "k1", "d", 2, 1, 1, 0))
	if bad, _ := outOfOrder(replay, false); bad != 0 {
		t.Fatalf("replayed suffix counted out of order by first delivery")
	}
	if bad, _ := outOfOrder(replay, true); bad != 1 {
		t.Fatalf("replayed suffix: %d bad keys record by record, want 1", bad)
	}
	// A later row of k1 before an earlier one, as read in partition order (the input is not
	// sorted: the check sorts by offset).
	swapped := []*kgo.Record{
		rec("t", 0, 2, "k1", "c", 2, 0, 1, 0), rec("t", 0, 0, "k1", "a", 2, 1, 1, 0), rec("t", 0, 1, "k2", "b", 1, 0, 1, 0),
	}
	if bad, ex := outOfOrder(swapped, false); bad != 1 {
		t.Fatalf("swapped: %d bad, want 1", bad)
	} else {
		t.Logf("caught: %s", ex)
	}
	// The same key in two topics is two orders.
	two := []*kgo.Record{rec("t1", 0, 0, "k", "a", 5, 0, 1, 0), rec("t2", 0, 0, "k", "b", 1, 0, 1, 0)}
	if bad, _ := outOfOrder(two, true); bad != 0 {
		t.Fatalf("keys of different topics compared")
	}
	if bad, _ := outOfOrder([]*kgo.Record{{Topic: "t", Key: []byte("k"), Value: []byte("x")}}, true); bad != 1 {
		t.Fatalf("a value without seq passed")
	}
}

func TestZombieWrites(t *testing.T) {
	z := producerOf{7, 0}
	ok := []*kgo.Record{rec("t", 0, 0, "k", "a", 1, 0, 7, 0), rec("t", 0, 1, "k", "b", 2, 0, 7, 1), rec("t", 1, 0, "k", "c", 3, 0, 7, 0)}
	if n := zombieWrites(ok, z); n != 0 {
		t.Fatalf("zombie writes before the takeover counted: %d", n)
	}
	late := append(ok, rec("t", 0, 2, "k", "d", 4, 0, 7, 0))
	if n := zombieWrites(late, z); n != 1 {
		t.Fatalf("a zombie record after the takeover: %d counted, want 1", n)
	}
}
