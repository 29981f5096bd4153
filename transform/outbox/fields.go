package outbox

import (
	"fmt"
	"strconv"

	"github.com/outboxd/outboxd/sink"
	"github.com/outboxd/outboxd/source"
)

// setPartition applies the partition placement of outbox.fields: the record's partition is the
// column's int32 value (ERD: eventStruct.getInt32, so any other Connect type fails the row, as
// Debezium's DataException fails its task); NULL leaves the choice to the partitioner. A row
// the column is missing from follows outbox.missing_field. Without column types (a row whose
// source gave none, e.g. a hand-built one) the text must be an int32.
//
// A negative value is refused here (the Java producer's "Invalid partition"); one at or above
// the topic's partition count is refused by the producer (invalid_partition too).
func (r *Router) setPartition(rec *sink.Record, row *source.Row) error {
	v, t, ok, err := r.field(row, r.partitionCol)
	if err != nil || !ok || v.Null {
		return err
	}
	if row.Types != nil && t.Kind != source.KindInt32 {
		return &Error{Reason: "invalid_partition", Column: r.partitionCol,
			Msg: fmt.Sprintf("partition column %q is not an int32 column (Debezium reads it with getInt32): make it integer/INT, or drop its partition placement from outbox.fields", r.partitionCol)}
	}
	n, perr := strconv.ParseInt(string(v.Bytes), 10, 32)
	if perr != nil || n < 0 {
		return &Error{Reason: "invalid_partition", Column: r.partitionCol,
			Msg: fmt.Sprintf("partition column %q holds %q, which is not a partition number (0 to the topic's partition count - 1)", r.partitionCol, v.Bytes)}
	}
	rec.Partition, rec.PartitionSet = int32(n), true
	return nil
}
