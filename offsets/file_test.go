package offsets

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/outboxd/outboxd/source"
)

func TestFileStore(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	f := &FileStore{Path: filepath.Join(dir, "sub", "offsets.json"), Source: "postgres:outboxd"}
	p, err := f.Load(ctx)
	if err != nil || p != "" {
		t.Fatalf("missing file: %q %v", p, err)
	}
	for _, want := range []source.Position{"0/16B3748", "0/16B3800", "1/0"} {
		if err := f.Save(ctx, want); err != nil {
			t.Fatal(err)
		}
		got, err := (&FileStore{Path: f.Path, Source: f.Source}).Load(ctx)
		if err != nil || got != want {
			t.Fatalf("load = %q %v, want %q", got, err, want)
		}
	}
	ents, _ := os.ReadDir(filepath.Dir(f.Path))
	if len(ents) != 1 {
		t.Fatalf("temp files left behind: %v", ents)
	}
	other := &FileStore{Path: f.Path, Source: "mysql:4242"}
	if _, err := other.Load(ctx); err == nil || !strings.Contains(err.Error(), "belongs to source") {
		t.Fatalf("another source's file accepted: %v", err)
	}
	os.WriteFile(f.Path, []byte("{not json"), 0o644)
	if _, err := f.Load(ctx); err == nil || !strings.Contains(err.Error(), "corrupt") {
		t.Fatalf("corrupt file accepted: %v", err)
	}
}

func TestFileStoreUnwritable(t *testing.T) {
	dir := t.TempDir()
	blocker := filepath.Join(dir, "file")
	os.WriteFile(blocker, nil, 0o644)
	f := &FileStore{Path: filepath.Join(blocker, "offsets.json")}
	if err := f.Save(context.Background(), "0/1"); err == nil || !strings.Contains(err.Error(), "offsets.path") {
		t.Fatalf("save under a file: %v", err)
	}
}

// TestFileStoreNoPosition: a file that holds no position loads as "" (the source then decides:
// MySQL refuses without source.mysql.start); a damaged one is an error, never "".
func TestFileStoreNoPosition(t *testing.T) {
	ctx := context.Background()
	f := &FileStore{Path: filepath.Join(t.TempDir(), "offsets.json"), Source: "mysql:4343"}
	for _, doc := range []string{"", "  \n", "{}", "null", "null\n", `{"source": "mysql:4343"}`, `{"position": ""}`, `{"position": null}`} {
		os.WriteFile(f.Path, []byte(doc), 0o644)
		if p, err := f.Load(ctx); err != nil || p != "" {
			t.Errorf("Load of %q = %q, %v; want no position", doc, p, err)
		}
	}
	for _, doc := range []string{`{"position": "0-1-`, "[]", `"0-1-5"`, "42", `{"position": 5}`, "\x00\x00\x00"} {
		os.WriteFile(f.Path, []byte(doc), 0o644)
		if p, err := f.Load(ctx); err == nil || !strings.Contains(err.Error(), "corrupt") {
			t.Errorf("Load of %q = %q, %v; want a corrupt-file error", doc, p, err)
		}
	}
	os.WriteFile(f.Path, []byte(`{"position": "0-1-5", "source": "mysql:4343"}`), 0o644)
	if p, err := f.Load(ctx); err != nil || p != "0-1-5" {
		t.Errorf("Load = %q, %v", p, err)
	}
}
