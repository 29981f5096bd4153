package sourcetest

import (
	"testing"

	"github.com/outboxd/outboxd/source"
)

func TestTypesProblem(t *testing.T) {
	cols := []string{"id", "payload"}
	two := []source.Type{{Kind: source.KindUUID}, {Kind: source.KindJSON, Optional: true}}
	for _, c := range []struct {
		what  string
		h     Harness
		types []source.Type
		bad   bool
	}{
		{"parallel", Harness{Types: true}, two, false},
		{"unknown types, not promised", Harness{}, nil, false},
		{"missing though promised", Harness{Types: true}, nil, true},
		{"one short", Harness{}, two[:1], true},
		{"one too many", Harness{Types: true}, append(two, two[0]), true},
	} {
		p := typesProblem(c.h, source.Row{Columns: cols, Values: make([]source.Value, 2), Types: c.types})
		if (p != "") != c.bad {
			t.Errorf("%s: problem %q, want a problem: %v", c.what, p, c.bad)
		}
	}
}
