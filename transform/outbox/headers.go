package outbox

import (
	"github.com/outboxd/outboxd/sink"
	"github.com/outboxd/outboxd/source"
)

// initHeaders checks and prepares the header options of r.cfg (called once by New).
func (r *Router) initHeaders() error { return nil }

// appendHeaders appends the configured header columns (outbox.headers, in order) to rec.Headers,
// after the id header.
func (r *Router) appendHeaders(rec *sink.Record, row *source.Row) error {
	for _, h := range r.cfg.Headers {
		v, _, ok, err := r.field(row, h.Column)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		// As Debezium (SimpleHeaderConverter): a NULL column is a header with a null value, an
		// empty one a header with an empty value.
		val := v.Bytes
		if !v.Null && val == nil {
			val = []byte{}
		} else if v.Null {
			val = nil
		}
		rec.Headers = append(rec.Headers, sink.Header{Key: h.Name, Value: val})
	}
	return nil
}
