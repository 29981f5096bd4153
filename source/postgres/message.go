package postgres

// The tableless outbox (Config.MessagePrefix, source.postgres.messages.prefix, PostgreSQL 14+).
//
// A writer emits an event with
//
//	SELECT pg_logical_emit_message(true, 'outboxd.event', '{"id": …, "aggregateid": …, …}')
//
// inside its business transaction. The message is a WAL record of that transaction: the
// walsender's reorder buffer keeps it with the transaction's changes and sends it (pgoutput
// Message 'M', flags 1) between the transaction's Begin and Commit, in the order it was
// written among its inserts. A rolled-back transaction, or a rolled-back savepoint
// (subtransaction), is dropped by the reorder buffer with everything it wrote, so its messages
// never reach the stream, exactly like its inserts. Nothing is stored in a table: once the
// slot's confirmed position passes the record, the WAL segment holding it is recycled.
//
// The source stays a leaf that knows nothing of the outbox fields: the decoder turns a
// transactional message with exactly the configured prefix into a source.Row with Message set,
// Table MessageTable(prefix) and the one column source.MessageColumn holding the content bytes
// unchanged (Type KindJSON: the content is meant to be a JSON object, which the transform checks;
// a malformed one is the transform's dead letter, reason invalid_message, not a source error that
// would stop the stream). The row joins the open transaction's pending chunk like an insert
// (Decoder.add: chunk caps apply, source.RowBytes counts the content), so positions, skipping at
// or before the start position, restarts and chunking treat messages and rows alike.
//
// Other messages: a non-transactional message with the prefix (pg_logical_emit_message(false, …))
// is not part of any transaction — it would be published even when the writer rolls back — so
// it is ignored with a debug log; outboxd's heartbeats (HeartbeatPrefix, non-transactional) are
// idle progress as before (heartbeat.go), which is why Validate refuses the heartbeat prefix as
// the message prefix; every other prefix is another application's (relations.go foreignMessage).
// A transactional message with the prefix outside Begin/Commit is a protocol error (pgoutput
// never sends one): the stream stops rather than drop an event.

import (
	"fmt"

	"github.com/jackc/pglogrepl"

	"github.com/outboxd/outboxd/source"
)

// MessageTable is the Table of the rows the decoder makes of outbox messages with prefix
// (source.MessageTablePrefix + prefix), e.g. "pg_logical_emit_message:outboxd.event".
func MessageTable(prefix string) string { return source.MessageTablePrefix + prefix }

// Shared by every message row (read-only, as source.Row allows).
var (
	messageColumns = []string{source.MessageColumn}
	messageTypes   = []source.Type{{Kind: source.KindJSON}}
)

// SetMessagePrefix makes transactional messages with exactly prefix outbox rows (see the file
// comment); "" (the default): no message is outbox data.
func (d *Decoder) SetMessagePrefix(prefix string) {
	d.msgPrefix = prefix
	d.msgTable = MessageTable(prefix)
}

// outboxMessage reports whether m carries the outbox message prefix.
func (d *Decoder) outboxMessage(m pgMessage) bool {
	return d.msgPrefix != "" && m.prefix == d.msgPrefix
}

// decodeMessage handles a Message given to Decode: a transactional outbox message becomes a row
// of the open transaction (and may cut the pending rows off as a chunk first, see add); any other
// message goes where message sends it.
func (d *Decoder) decodeMessage(b []byte) (source.Tx, bool, error) {
	m, err := parseMessage(b)
	if err != nil {
		return source.Tx{}, false, err
	}
	if !m.transactional || !d.outboxMessage(m) {
		return source.Tx{}, false, d.otherMessage(m)
	}
	if !d.inTx {
		return source.Tx{}, false, outsideTxError(m)
	}
	content := make([]byte, len(m.content)) // m.content aliases the caller's buffer
	copy(content, m.content)
	row := source.Row{Table: d.msgTable, Columns: messageColumns, Types: messageTypes,
		Values: []source.Value{{Bytes: content}}, Message: true}
	tx, cut := d.add(row, len(content)+source.RowOverhead)
	return tx, cut, nil
}

// otherMessage handles a Message that is not an outbox event of a transaction: a
// non-transactional one with the outbox prefix is logged at debug and ignored; the rest is
// reported to onMessage unless it is an outboxd heartbeat (which the stream handles).
func (d *Decoder) otherMessage(m pgMessage) error {
	if d.outboxMessage(m) {
		if m.transactional {
			return outsideTxError(m)
		}
		if d.log != nil {
			d.log.Debug("a non-transactional logical decoding message with the outbox message prefix ignored: only pg_logical_emit_message(true, …) messages, which commit and roll back with their transaction, are outbox events",
				"prefix", m.prefix, "lsn", m.lsn, "bytes", len(m.content))
		}
		return nil
	}
	if (m.transactional || m.prefix != HeartbeatPrefix) && d.onMessage != nil {
		d.onMessage(m)
	}
	return nil
}

func outsideTxError(m pgMessage) error {
	return fmt.Errorf("pgoutput: a transactional outbox message (prefix %q) at LSN %s arrived outside a transaction (pgoutput sends those between Begin and Commit): outboxd stops rather than lose the event; restart to resume from the stored position",
		m.prefix, pglogrepl.LSN(m.lsn))
}

// MessagePrefix is source.postgres.messages.prefix ("" when the tableless outbox is off), for
// `outboxd check`'s line on what an event's content must hold.
func (a *Adapter) MessagePrefix() string { return a.cfg.MessagePrefix }
