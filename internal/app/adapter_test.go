package app

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/outboxd/outboxd/internal/config"
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

// TestOutboxColumns: the columns the sources check and the publication must carry follow the
// router's options; with outbox.missing_field: ignore the optional ones are left to the router.
func TestOutboxColumns(t *testing.T) {
	tracing := "trace"
	c := &config.Config{Outbox: config.Outbox{
		Columns: config.Columns{ID: "id", AggregateType: "aggregatetype", AggregateID: "aggregateid", Payload: "payload"},
		Topic:   "fixed", TopicRegex: "(?<routedByValue>.*)", Timestamp: "column:occurred",
		Headers:       config.Headers{{Column: "type", Name: "eventType"}},
		Fields:        []config.Field{{Column: "part", Placement: "partition"}, {Column: "type", Placement: "envelope", Alias: "t"}},
		TracingColumn: &tracing, MissingField: "error",
	}}
	want := "id,aggregateid,payload,aggregatetype,occurred,type,part,trace"
	if got := strings.Join(outboxColumns(c), ","); got != want {
		t.Errorf("missing_field error: %s, want %s", got, want)
	}
	c.Outbox.MissingField = "ignore"
	want = "id,aggregateid,payload,aggregatetype,occurred"
	if got := strings.Join(outboxColumns(c), ","); got != want {
		t.Errorf("missing_field ignore: %s, want %s", got, want)
	}
}
