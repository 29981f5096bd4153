// Package archtest holds the tests of the repository's shape: which package may import what.
package archtest

import (
	"bufio"
	"bytes"
	"os/exec"
	"strings"
	"testing"
)

const mod = "github.com/outboxd/outboxd"

// Third-party clients, by what they talk to.
var (
	sarama  = []string{"github.com/IBM/sarama"}
	pgWire  = []string{"github.com/jackc/pglogrepl", "github.com/jackc/pgx"}
	mysqlW  = []string{"github.com/go-mysql-org/go-mysql"}
	drivers = append(append([]string{}, pgWire...), mysqlW...)
)

// list returns the module's non-test packages with their direct imports and all their (non-test)
// dependencies, from `go list -deps`.
type pkg struct {
	imports, deps []string
}

func list(t *testing.T) map[string]pkg {
	t.Helper()
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}}|{{join .Imports \",\"}}|{{join .Deps \",\"}}", mod+"/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	m := map[string]pkg{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		f := strings.SplitN(sc.Text(), "|", 3)
		if len(f) != 3 {
			continue
		}
		m[strings.TrimPrefix(f[0], mod+"/")] = pkg{imports: split(f[1]), deps: split(f[2])}
	}
	if len(m) < 10 {
		t.Fatalf("go list found only %d packages: %s", len(m), out)
	}
	return m
}

func split(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

// hits returns the entries of have that are (or are under) one of the paths in bad.
func hits(have, bad []string) []string {
	var out []string
	for _, h := range have {
		for _, b := range bad {
			if h == b || strings.HasPrefix(h, b+"/") {
				out = append(out, h)
			}
		}
	}
	return out
}

func local(names ...string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = mod + "/" + n
	}
	return out
}

// TestImportRules enforces the layout README.md describes (source → transform → sink → offsets;
// domain packages are leaves; only sink/kafka knows sarama; each source adapter alone knows its
// database's client).
func TestImportRules(t *testing.T) {
	pk := list(t)
	// tools and tests may use any client (they build fixtures and judge from outside).
	tool := func(p string) bool {
		return strings.HasPrefix(p, "internal/testenv") || strings.HasPrefix(p, "internal/bench") ||
			strings.HasPrefix(p, "cmd/outboxd-bench") || strings.HasPrefix(p, "test/") || p == "test" ||
			strings.HasPrefix(p, "internal/chaos") || strings.HasPrefix(p, "internal/demo") ||
			strings.HasPrefix(p, "cmd/outboxd-demo") || strings.HasSuffix(p, "test") && strings.Contains(p, "/")
	}
	for p, d := range pk {
		if p == "sink/kafka" || tool(p) {
			continue
		}
		if h := hits(d.imports, sarama); len(h) > 0 {
			t.Errorf("%s imports %v: only sink/kafka may import sarama", p, h)
		}
	}
	rules := []struct {
		pkg    string
		banned []string
		why    string
	}{
		{"source", append(append([]string{}, sarama...), drivers...), "the source contract is a leaf"},
		{"source/sourcetest", append(append([]string{}, sarama...), drivers...), "the conformance suite knows only the contract"},
		{"source/postgres", append(append([]string{}, sarama...), mysqlW...), "an adapter knows only its own database"},
		{"source/mysql", append(append([]string{}, sarama...), pgWire...), "an adapter knows only its own database"},
		{"transform/outbox", append(append(append([]string{}, sarama...), drivers...), local("sink/kafka", "offsets", "internal")...), "transform is pure"},
		{"offsets", append(append(append([]string{}, sarama...), drivers...), local("sink", "internal")...), "offsets imports source, never sink"},
		{"sink", append(append(append([]string{}, sarama...), drivers...), local("sink/kafka", "offsets", "internal")...), "sink is the record contract"},
		{"internal/pipeline", append(append(append([]string{}, sarama...), drivers...), local("sink/kafka", "source/postgres", "source/mysql", "internal/app", "internal/config")...), "the pipeline drives contracts, not clients"},
		{"internal/pipeline/delivery", append(append(append([]string{}, sarama...), drivers...), local("sink/kafka", "source/postgres", "source/mysql", "internal/app", "internal/config", "internal/pipeline")...), "the delivery core is pure"},
		{"internal/config", append(append(append([]string{}, sarama...), drivers...), local("internal/pipeline", "internal/app", "sink/kafka", "source/postgres", "source/mysql", "offsets")...), "config parses its own values"},
	}
	for _, r := range rules {
		d, ok := pk[r.pkg]
		if !ok {
			t.Errorf("package %s not found", r.pkg)
			continue
		}
		if h := hits(d.deps, r.banned); len(h) > 0 {
			t.Errorf("%s depends on %v: %s", r.pkg, h, r.why)
		}
	}
	// internal/app wires adapters; it imports no client itself (each adapter owns its SQL).
	if h := hits(pk["internal/app"].imports, append(append([]string{}, sarama...), drivers...)); len(h) > 0 {
		t.Errorf("internal/app imports %v: the wiring imports no driver; move the code into the adapter (source/postgres, source/mysql, sink/kafka)", h)
	}
	// every package under source/ or transform/ other than the adapters themselves stays off the drivers.
	for p, d := range pk {
		if (strings.HasPrefix(p, "source/") || strings.HasPrefix(p, "transform/")) && !strings.HasPrefix(p, "source/postgres") && !strings.HasPrefix(p, "source/mysql") {
			if h := hits(d.deps, append(append([]string{}, sarama...), drivers...)); len(h) > 0 {
				t.Errorf("%s depends on %v", p, h)
			}
		}
	}
}
