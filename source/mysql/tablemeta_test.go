package mysql

import (
	"fmt"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/replication"
)

// metaParsers returns go-mysql parsers configured like the source: plain (go-mysql decodes the
// table maps' optional metadata itself) and with the metadata cache (the source's MariaDB
// path), with the cache to fill the table map events from.
func metaParsers() (plain, cached *replication.BinlogParser, c *metaCache) {
	s := &Source{captured: map[tableKey]string{{"app", "types"}: "app.types"}, byDB: map[string]map[string]bool{"app": {"types": true}}}
	mk := func() *replication.BinlogParser {
		p := replication.NewBinlogParser()
		p.SetFlavor("mariadb")
		p.SetTimestampStringLocation(time.UTC)
		p.SetRenderJSONAsMySQLText(true)
		p.SetRowsEventDecodeFunc(s.decodeRows)
		return p
	}
	plain, cached, c = mk(), mk(), &metaCache{}
	cached.SetTableMapOptionalMetaDecodeFunc(c.decode)
	return plain, cached, c
}

// parseCached parses raw with the cache parser and fills a table map event as the feed does;
// ok is false when either fails (or panics).
func parseCached(p *replication.BinlogParser, c *metaCache, raw []byte) (*replication.BinlogEvent, bool) {
	ev, ok := parseRecovered(p, raw)
	if !ok {
		c.opt, c.pending = nil, false
		return nil, false
	}
	if tm, isTM := ev.Event.(*replication.TableMapEvent); isTM {
		if err := c.fill(tm); err != nil {
			return nil, false
		}
	}
	return ev, true
}

// tableMapFields is the exported content of a table map event.
func tableMapFields(tm *replication.TableMapEvent) []any {
	return []any{tm.TableID, tm.Flags, tm.Schema, tm.Table, tm.ColumnCount, tm.ColumnType, tm.ColumnMeta, tm.NullBitmap,
		tm.SignednessBitmap, tm.DefaultCharset, tm.ColumnCharset, tm.SetStrValue, tm.EnumStrValue, tm.ColumnName,
		tm.GeometryType, tm.PrimaryKey, tm.PrimaryKeyPrefix, tm.EnumSetDefaultCharset, tm.EnumSetColumnCharset, tm.VisibilityBitmap}
}

// sameEvents parses raws with both parsers and reports the first difference: in the outcome
// (parsed or not), in a table map event's fields, or in a rows event's decoded rows.
func sameEvents(raws [][]byte) error {
	plain, cached, c := metaParsers()
	for i, raw := range raws {
		want, okWant := parseRecovered(plain, raw)
		got, okGot := parseCached(cached, c, raw)
		if okWant && !okGot && tableMapRaw(raw) {
			// go-mysql may read a field whose length runs past the metadata's end from the
			// bytes after it (the checksum); the cache fails on it instead. Stricter, never laxer.
			if _, err := decodeOptMeta(want.Event.(*replication.TableMapEvent).ColumnCount, optOf(raws[0], raw)); err != nil {
				return nil
			}
		}
		if okWant != okGot {
			return fmt.Errorf("event %d (type %d): parsed by go-mysql %v, with the metadata cache %v", i, raw[4], okWant, okGot)
		}
		if !okWant {
			return nil // the stream ends here for both
		}
		switch w := want.Event.(type) {
		case *replication.TableMapEvent:
			g := got.Event.(*replication.TableMapEvent)
			if wf, gf := tableMapFields(w), tableMapFields(g); !reflect.DeepEqual(wf, gf) {
				return fmt.Errorf("event %d: table map fields differ:\n go-mysql %v\n cached   %v", i, wf, gf)
			}
			wm, wp := unsignedMap(w)
			gm, gp := unsignedMap(g)
			if wp != gp || !reflect.DeepEqual(wm, gm) {
				return fmt.Errorf("event %d: unsigned maps differ (go-mysql %v, panicked %v; cached %v, panicked %v)", i, wm, wp, gm, gp)
			}
		case *replication.RowsEvent:
			g := got.Event.(*replication.RowsEvent)
			if !reflect.DeepEqual(w.Rows, g.Rows) {
				return fmt.Errorf("event %d: rows differ:\n go-mysql %#v\n cached   %#v", i, w.Rows, g.Rows)
			}
		}
	}
	return nil
}

// unsignedMap is tm.UnsignedMap(), which indexes ColumnType without bounds checks: a malformed
// event panics in it (readTableMapMeta recovers the same way), reported as panicked.
func unsignedMap(tm *replication.TableMapEvent) (m map[int]bool, panicked bool) {
	defer func() {
		if recover() != nil {
			m, panicked = nil, true
		}
	}()
	return tm.UnsignedMap(), false
}

func tableMapRaw(raw []byte) bool {
	return replication.EventType(raw[4]) == replication.TABLE_MAP_EVENT
}

// optOf returns the optional metadata of a table map event (header, checksum and the fields
// before it skipped as go-mysql's decoder does).
func optOf(fde, raw []byte) []byte {
	var c metaCache
	p := replication.NewBinlogParser()
	p.SetTableMapOptionalMetaDecodeFunc(c.decode)
	if _, err := p.Parse(fde); err != nil {
		return nil
	}
	if _, ok := parseRecovered(p, raw); !ok {
		return nil
	}
	return c.opt
}

// TestMetaCacheEquivalence: the captured MariaDB transactions (one row of every column type the
// package covers, FULL and MINIMAL row metadata), read three times in one stream (the first
// table map decodes, the later ones come from the cache), give the same table map fields and
// decoded rows with the cache as with go-mysql's own decoding.
func TestMetaCacheEquivalence(t *testing.T) {
	for _, name := range []string{"full", "minimal"} {
		t.Run(name, func(t *testing.T) {
			raws := fixtureEventsOf(loadFixture(t, filepath.Join("testdata", "mariadb_types_"+name+".json")))
			var stream [][]byte
			stream = append(stream, raws...)
			for range 2 {
				stream = append(stream, raws[1:]...) // the transaction again, without the FDE
			}
			if err := sameEvents(stream); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestMetaCacheLayouts: one cache across table maps of different metadata (FULL, then MINIMAL,
// then FULL again: same column types) gives each event its own fields.
func TestMetaCacheLayouts(t *testing.T) {
	full := fixtureEventsOf(loadFixture(t, filepath.Join("testdata", "mariadb_types_full.json")))
	minimal := fixtureEventsOf(loadFixture(t, filepath.Join("testdata", "mariadb_types_minimal.json")))
	stream := append(append(append([][]byte{}, full...), minimal[1:]...), full[1:]...)
	if err := sameEvents(stream); err != nil {
		t.Fatal(err)
	}
	_, cached, c := metaParsers()
	for _, raw := range stream {
		if _, ok := parseCached(cached, c, raw); !ok {
			t.Fatal("parse failed")
		}
	}
	if len(c.entries) != 2 {
		t.Fatalf("%d cache entries, want 2 (FULL and MINIMAL metadata)", len(c.entries))
	}
}

// TestMetaCacheMalformed: metadata go-mysql cannot decode (a column name list shorter than the
// columns, an even default charset list, a truncated field) fails with the cache too, as an
// error instead of a panic.
func TestMetaCacheMalformed(t *testing.T) {
	for _, opt := range [][]byte{
		{4, 2, 1, 'a'},     // COLUMN_NAME: one name for several columns
		{2, 2, 0x21, 0x2d}, // DEFAULT_CHARSET: two numbers
		{4, 9, 1},          // COLUMN_NAME: length past the end
	} {
		if _, err := decodeOptMeta(3, opt); err == nil {
			t.Errorf("metadata % x: no error", opt)
		}
	}
}

// FuzzTableMapMeta: for any table map event body (the fixtures' as seeds) followed by the
// fixture's rows event, the metadata cache gives what go-mysql's own decoding gives: both fail,
// or both give the same table map fields and rows; and the second reading (a cache hit) too.
func FuzzTableMapMeta(f *testing.F) {
	fixtures := map[bool]fixture{}
	for _, minimal := range []bool{false, true} {
		name := "full"
		if minimal {
			name = "minimal"
		}
		fx := loadFixture(f, filepath.Join("testdata", "mariadb_types_"+name+".json"))
		fixtures[minimal] = fx
		tm, _ := fixtureBodies(fx)
		f.Add(tm, minimal)
	}
	f.Fuzz(func(t *testing.T, tmBody []byte, minimal bool) {
		var evs [][]byte
		for _, raw := range fixtureEventsOf(fixtures[minimal]) {
			if typ := replication.EventType(raw[4]); typ == replication.TABLE_MAP_EVENT {
				raw = mysqlEvent(byte(typ), tmBody)
			}
			evs = append(evs, raw)
		}
		if err := sameEvents(append(evs, evs[1:]...)); err != nil {
			t.Fatal(err)
		}
	})
}

// BenchmarkTableMapMeta: one op parses the captured table map event (29 columns, FULL
// metadata) as a stream repeats it before every transaction: go-mysql decoding its optional
// metadata (plain) or the cache filling it (cached).
func BenchmarkTableMapMeta(b *testing.B) {
	raws := fixtureEventsOf(loadFixture(b, filepath.Join("testdata", "mariadb_types_full.json")))
	var tmRaw []byte
	for _, raw := range raws {
		if tableMapRaw(raw) {
			tmRaw = raw
		}
	}
	plain, cached, c := metaParsers()
	for _, r := range raws[:1] { // the FormatDescriptionEvent
		plain.Parse(r)
		cached.Parse(r)
	}
	for name, parse := range map[string]func() bool{
		"plain":  func() bool { _, err := plain.Parse(tmRaw); return err == nil },
		"cached": func() bool { _, ok := parseCached(cached, c, tmRaw); return ok },
	} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if !parse() {
					b.Fatal("parse failed")
				}
			}
		})
	}
}
