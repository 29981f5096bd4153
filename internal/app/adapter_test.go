package app

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestSourceTypePickedOnce: the only decision on source.type in the module's production code
// is adapterFor's lookup in sources (config only checks the name against the registered ones);
// a `switch c.Source.Type` or `c.Source.Type == "mysql"` anywhere else fails this test.
func TestSourceTypePickedOnce(t *testing.T) {
	decision := regexp.MustCompile(`switch\s+[\w.]*Source\.Type\b|Source\.Type\s*[!=]=|[!=]=\s*[\w.]*Source\.Type\b`)
	var found []string
	err := filepath.WalkDir("../..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && d.Name() != ".." || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, line := range strings.Split(string(b), "\n") {
			if decision.MatchString(line) {
				found = append(found, filepath.ToSlash(path)+": "+strings.TrimSpace(line))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(found) != 1 || !strings.HasPrefix(found[0], "../../internal/app/adapter.go: if s.name == c.Source.Type") {
		t.Errorf("decisions on source.type outside adapterFor's lookup (add an adapter concern instead):\n%s", strings.Join(found, "\n"))
	}
}
