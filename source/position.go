package source

// Position is a source position in its textual form: a PostgreSQL LSN ("0/16B3748"), a GTID set
// ("0-1-42", "uuid:1-42") or "binlog-file:pos". The empty Position means "from the beginning of
// what the source retains" (a new slot, or the server's current binlog position).
//
// Positions are opaque to the pipeline: only the source that produced one interprets it. It
// lives here, in the leaf every other package imports, so that offsets (which stores positions)
// and the adapters (which produce them) meet without importing each other.
type Position string
