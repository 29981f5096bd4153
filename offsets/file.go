package offsets

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/outboxd/outboxd/source"
)

// Store keeps the last fully delivered position durably.
//
// Contract: Load returns the stored position, or "" when none was ever stored. Save returns only
// once p is durable (survives a crash of this process and of the machine). Callers call Save with
// non-decreasing positions from one goroutine; Load and Save are not called concurrently.
type Store interface {
	Load(ctx context.Context) (source.Position, error)
	Save(ctx context.Context, p source.Position) error
}

// FileStore stores the position in a small JSON file, replaced atomically: write a temp file in
// the same directory, fsync it, rename it over the old one, fsync the directory.
type FileStore struct {
	Path string
	// Source names the source the position belongs to ("postgres:slot", "mysql:4242"); a stored
	// file of another source is refused so that a copied config cannot replay the wrong log.
	Source string
}

type fileDoc struct {
	Position source.Position `json:"position"`
	Source   string          `json:"source,omitempty"`
	Updated  time.Time       `json:"updated"`
}

// Load reads the stored position. It is "" (none stored) when the file does not exist or
// holds no position: empty, `{}`, `null` or a document without "position" (outboxd never
// writes such a file; the source decides what "none" means, and MySQL refuses it without an
// explicit source.mysql.start). Anything else that is not such a document is an error, never "".
func (f *FileStore) Load(ctx context.Context) (source.Position, error) {
	b, err := os.ReadFile(f.Path)
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read offsets file %s (offsets.path): %w", f.Path, err)
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return "", nil
	}
	var d fileDoc
	if err := json.Unmarshal(b, &d); err != nil {
		return "", fmt.Errorf("offsets file %s (offsets.path) is corrupt: %w — restore it, or set a position with `outboxd offsets set`", f.Path, err)
	}
	if f.Source != "" && d.Source != "" && d.Source != f.Source {
		return "", fmt.Errorf("offsets file %s (offsets.path) belongs to source %q, not %q: point offsets.path at this pipeline's own file", f.Path, d.Source, f.Source)
	}
	return d.Position, nil
}

// Save writes p durably.
func (f *FileStore) Save(ctx context.Context, p source.Position) error {
	b, _ := json.Marshal(fileDoc{Position: p, Source: f.Source, Updated: time.Now().UTC()})
	dir := filepath.Dir(f.Path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create offsets directory %s (offsets.path): %w", dir, err)
	}
	tmp, err := os.CreateTemp(dir, ".offsets-*.tmp")
	if err != nil {
		return fmt.Errorf("write offsets file in %s (offsets.path): %w", dir, err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", tmp.Name(), err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("fsync %s: %w", tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), f.Path); err != nil {
		return fmt.Errorf("replace offsets file %s: %w", f.Path, err)
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("fsync directory %s: %w", dir, err)
	}
	return nil
}
