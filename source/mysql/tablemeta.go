package mysql

import (
	"fmt"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
)

// metaCache spares go-mysql's decoding of a table map event's optional metadata (column names,
// signedness, charsets, ENUM/SET members: a few allocations per column) for every transaction:
// a stream repeats the same table map events, byte for byte, before each transaction's rows.
//
// It is the syncer's TableMapOptionalMetaDecodeFunc, which only notes the metadata bytes of the
// table map event being parsed; the feed's HandleEvent then fills that event (fill) with the
// fields decoded from the same bytes earlier, or decodes them once with go-mysql's own decoder
// (decodeOptMeta). The fill runs on the reading goroutine right after the event is parsed and
// before the next event is (the rows events that use the table map), so every table map event
// carries exactly the fields go-mysql's parser would have given it. The decoded fields are
// shared by the events of equal metadata: read-only (buildDesc clones what it keeps).
//
// Only for MariaDB: MySQL's compressed transactions (TransactionPayloadEvent) parse their inner
// table map and rows events in one go, with no hand-over in between.
type metaCache struct {
	opt     []byte // the optional metadata of the table map event just parsed
	pending bool   // decode ran for it and fill has not yet
	entries map[string]*optMeta
}

// metaCacheMax bounds the cache (distinct table layouts seen); past it, it starts over.
const metaCacheMax = 256

// optMeta is a table map event's optional metadata as go-mysql decodes it.
type optMeta struct {
	count uint64 // the event's column count (the column names are checked against it)
	tm    replication.TableMapEvent
}

// decode is the TableMapOptionalMetaDecodeFunc. data aliases the event's buffer, which go-mysql
// allocates per event and does not reuse.
func (c *metaCache) decode(data []byte) error {
	c.opt, c.pending = data, true
	return nil
}

// fill gives tm (the table map event decode was just called for) its optional metadata.
func (c *metaCache) fill(tm *replication.TableMapEvent) error {
	if !c.pending {
		return nil // parsed without this cache (not by this stream's syncer)
	}
	opt := c.opt
	c.opt, c.pending = nil, false
	m := c.entries[string(opt)]
	if m == nil || m.count != tm.ColumnCount {
		d, err := decodeOptMeta(tm.ColumnCount, opt)
		if err != nil {
			return fmt.Errorf("table map event of %s.%s: %w", tm.Schema, tm.Table, err)
		}
		if c.entries == nil || len(c.entries) >= metaCacheMax {
			c.entries = map[string]*optMeta{}
		}
		m = &optMeta{count: tm.ColumnCount, tm: *d}
		c.entries[string(opt)] = m
	}
	o := &m.tm
	tm.SignednessBitmap, tm.DefaultCharset, tm.ColumnCharset = o.SignednessBitmap, o.DefaultCharset, o.ColumnCharset
	tm.SetStrValue, tm.EnumStrValue, tm.ColumnName, tm.GeometryType = o.SetStrValue, o.EnumStrValue, o.ColumnName, o.GeometryType
	tm.PrimaryKey, tm.PrimaryKeyPrefix = o.PrimaryKey, o.PrimaryKeyPrefix
	tm.EnumSetDefaultCharset, tm.EnumSetColumnCharset, tm.VisibilityBitmap = o.EnumSetDefaultCharset, o.EnumSetColumnCharset, o.VisibilityBitmap
	return nil
}

// decodeOptMeta decodes optional metadata with go-mysql's table map decoder, on a table map
// event body of count columns that carries nothing else (no names, every column of a type
// without metadata). The fields it sets alias a buffer of their own, not opt.
func decodeOptMeta(count uint64, opt []byte) (tm *replication.TableMapEvent, err error) {
	n := int(count) // at most the event's size: its column types were read
	buf := make([]byte, 0, 16+n+(n+7)/8+len(opt))
	buf = append(buf, 0, 0, 0, 0, 0, 0) // flags; empty schema and table names, each with its 0x00
	buf = gomysql.AppendLengthEncodedInteger(buf, count)
	buf = append(buf, make([]byte, n)...)       // column types: MYSQL_TYPE_DECIMAL, no metadata
	buf = append(buf, 0)                        // metadata block: empty
	buf = append(buf, make([]byte, (n+7)/8)...) // null bitmap
	buf = append(buf, opt...)
	// No capacity past the metadata: go-mysql slices a field's value by its length within the
	// capacity, so a length past the end reads whatever follows (in a stream, the checksum);
	// here it fails instead.
	buf = buf[:len(buf):len(buf)]
	defer func() {
		if r := recover(); r != nil {
			tm, err = nil, fmt.Errorf("malformed optional metadata: %v", r)
		}
	}()
	tm = &replication.TableMapEvent{}
	if err := tm.Decode(buf); err != nil {
		return nil, fmt.Errorf("optional metadata: %w", err)
	}
	return tm, nil
}
