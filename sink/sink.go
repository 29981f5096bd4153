// Package sink defines the record a sink delivers.
package sink

// Header is a Kafka record header.
type Header struct {
	Key   string
	Value []byte
}

// Record is one Kafka record to deliver. A nil Value is a null value (tombstone form).
type Record struct {
	Topic   string
	Key     []byte
	Value   []byte
	Headers []Header
}

// Size is the approximate encoded size of the record in bytes, used for in-flight byte caps.
func (r *Record) Size() int {
	n := len(r.Topic) + len(r.Key) + len(r.Value) + 16
	for _, h := range r.Headers {
		n += len(h.Key) + len(h.Value) + 4
	}
	return n
}
