package sink

import (
	"time"

	"github.com/outboxd/outboxd/source"
)

// Dead-letter header names (README.md, "What goes to the DLQ"; every dead letter carries the first seven).
const (
	HeaderReason         = "outboxd.error.reason"
	HeaderMessage        = "outboxd.error.message"
	HeaderStage          = "outboxd.error.stage"
	HeaderOriginalTopic  = "outboxd.original.topic"
	HeaderSourceTable    = "outboxd.source.table"
	HeaderSourcePosition = "outboxd.source.position"
	HeaderErrorTime      = "outboxd.error.time"
	// HeaderValueDropped is set (to the dead letter's size in bytes) when the value had to be
	// left out because the dead letter would exceed the record size limit itself.
	HeaderValueDropped = "outboxd.error.value_dropped"
	// HeaderSourceAfter is set on the dead letter of a row whose source transaction had not
	// ended when the row was dead-lettered (a chunk of a large transaction: its end, the usual
	// HeaderSourcePosition, is then empty). It holds the end of the transaction before the
	// row's one: the row lies after it. Whole transactions never carry it.
	HeaderSourceAfter = "outboxd.source.after"
)

// DeadLetter builds the dead-letter record for a record that can never be delivered. rec is the
// record as far as it could be built; when it has no key and no value (the transform failed),
// the value is the row as a JSON object (RowJSON) — or, for a message row (row.Message: an
// event carried by a logical decoding message, which has no columns of its own), the message's
// raw content, byte for byte, so that it can be read, corrected and emitted again (`dlq replay`
// parses it as a message again). The topic is left to the caller (kafka.dlq_topic).
func DeadLetter(rec Record, row *source.Row, stage, reason, msg string, pos source.Position, now time.Time) Record {
	out := Record{Key: rec.Key, Value: rec.Value}
	if stage == "transform" && row != nil {
		if row.Message {
			out.Value = messageContent(row)
		} else {
			out.Value = RowJSON(row)
		}
	}
	out.Headers = make([]Header, 0, len(rec.Headers)+7)
	out.Headers = append(out.Headers, rec.Headers...)
	table := ""
	if row != nil {
		table = row.Table
	}
	out.Headers = append(out.Headers,
		Header{Key: HeaderReason, Value: []byte(reason)},
		Header{Key: HeaderMessage, Value: []byte(msg)},
		Header{Key: HeaderStage, Value: []byte(stage)},
		Header{Key: HeaderOriginalTopic, Value: []byte(rec.Topic)},
		Header{Key: HeaderSourceTable, Value: []byte(table)},
		Header{Key: HeaderSourcePosition, Value: []byte(pos)},
		Header{Key: HeaderErrorTime, Value: []byte(now.UTC().Format(time.RFC3339))},
	)
	return out
}

// messageContent is a message row's content (source.MessageColumn), never nil: an empty
// content is an empty value, not a null one.
func messageContent(row *source.Row) []byte {
	if v, ok := row.Get(source.MessageColumn); ok && v.Bytes != nil {
		return v.Bytes
	}
	return []byte{}
}
