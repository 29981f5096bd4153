package postgres

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/outboxd/outboxd/source"
)

func TestSnapshotChunker(t *testing.T) {
	row := func(n int) source.Row {
		return source.Row{Table: "public.outbox", Columns: []string{"v"}, Values: []source.Value{{Bytes: make([]byte, n)}}}
	}
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, c := range []struct {
		name        string
		rows, bytes int
		sizes       []int // row value sizes
		want        []int // rows per chunk, the last one without More
	}{
		{"no rows", 3, 0, nil, []int{0}},
		{"within the caps", 3, 0, []int{1, 1}, []int{2}},
		{"row cap", 3, 0, []int{1, 1, 1, 1, 1, 1, 1}, []int{3, 3, 1}},
		{"row cap exactly", 3, 0, []int{1, 1, 1, 1, 1, 1}, []int{3, 3}},
		{"byte cap", 0, 2*source.RowOverhead + 20, []int{10, 10, 1, 30}, []int{2, 1, 1}},
		{"a row bigger than the byte cap is a chunk alone", 0, 100, []int{1, 500, 1}, []int{1, 1, 1}},
		{"no caps", -1, -1, []int{1, 1, 1, 1, 1}, []int{5}},
	} {
		ch := snapshotChunker{rows: c.rows, bytes: c.bytes, at: at}
		var chunks []source.Tx
		for _, n := range c.sizes {
			if tx, ok := ch.add(row(n)); ok {
				chunks = append(chunks, tx)
			}
		}
		chunks = append(chunks, ch.last("0/10"))
		var got []int
		for i, tx := range chunks {
			got = append(got, len(tx.Rows))
			last := i == len(chunks)-1
			if tx.More == last || (tx.Position != "") != last || !tx.CommitTime.Equal(at) || tx.Bytes != source.ChunkBytes(&source.Tx{Rows: tx.Rows}) {
				t.Errorf("%s: chunk %d: More %v, Position %q, CommitTime %v, Bytes %d", c.name, i, tx.More, tx.Position, tx.CommitTime, tx.Bytes)
			}
		}
		if !equalInts(got, c.want) {
			t.Errorf("%s: chunks of %v rows, want %v", c.name, got, c.want)
		}
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestSnapshotSetting(t *testing.T) {
	for _, v := range []string{"", "never", "initial"} {
		if err := NewAdapter(Settings{DSN: "postgres://u@h/db", Snapshot: v}, nil).Validate(); err != nil {
			t.Errorf("snapshot %q: %v", v, err)
		}
	}
	err := NewAdapter(Settings{DSN: "postgres://u@h/db", Snapshot: "always"}, nil).Validate()
	var se *SettingError
	if !errors.As(err, &se) || se.Key != "source.postgres.snapshot" || !strings.Contains(se.Msg, "never | initial") {
		t.Errorf("snapshot always: %v, want a SettingError for source.postgres.snapshot", err)
	}
	s := New(Config{DSN: "postgres://u@h/db", Tables: []string{"public.outbox"}, Snapshot: "always"}, nil)
	if err := s.validate(); err == nil || !strings.Contains(err.Error(), "source.postgres.snapshot") {
		t.Errorf("Source with snapshot always: %v", err)
	}
}
