package source

import (
	"errors"
	"time"
)

// ScanQuery selects the rows of one configured outbox table for a table scan: `outboxd
// republish` (internal/app) and a source's `snapshot: initial`. Each source adapter turns it
// into its own SQL.
type ScanQuery struct {
	// Table is a configured table, as in Row.Table ("schema.table" / "db.table").
	Table string
	// OrderBy is the column rows come in ascending order of (outbox.order_column); "": the
	// order the table keeps, as the adapter defines it (its doc comment says which).
	OrderBy string
	// TimeColumn is the column Since and Until apply to; required when either is set.
	TimeColumn string
	// Since (inclusive) and Until (exclusive) bound TimeColumn; zero: unbounded.
	Since, Until time.Time
	// Where is an extra SQL condition ANDed to the scan's own (outboxd republish --where); "":
	// none. It is the operator's SQL, passed as is.
	Where string
	// Batch is the rows per batch handed to the scan's callback (default 1000).
	Batch int
}

// ScanBatch is the default ScanQuery.Batch.
const ScanBatch = 1000

// ErrEnd is what Next of a finite source returns (wrapped or as is) once it has handed out its
// last chunk, e.g. the table scan of `outboxd republish`: the pipeline then drains what is in
// flight, stores the acked prefix and returns nil instead of reopening the source. A streaming
// source never returns it.
var ErrEnd = errors.New("source: end of input")
