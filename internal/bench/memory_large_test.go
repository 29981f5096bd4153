package bench

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/outboxd/outboxd/internal/config"
	"github.com/outboxd/outboxd/internal/testenv"
)

func TestParseGCTrace(t *testing.T) {
	log := strings.Join([]string{
		`time=2026-12-01T14:00:00Z level=WARN msg="something"`,
		`gc 1 @0.017s 4%: 0.26+3.9+1.5 ms clock, 0.53+0/0.68/0.18+3.0 ms cpu, 3->4->1 MB, 4 MB goal, 0 MB stacks, 0 MB globals, 2 P`,
		`gc 2 @0.532s 7%: 1.8+3.0+0.033 ms clock, 3.7+0.12/1.1/0+0.066 ms cpu, 40->52->21 MB, 44 MB goal, 0 MB stacks, 0 MB globals, 2 P`,
		`gc 3 @0.939s 2%: 0.24+3.8+0.003 ms clock, 0.49+0/3.6/0.91+0.006 ms cpu, 36->37->30 MB, 60 MB goal, 0 MB stacks, 0 MB globals, 2 P (forced)`,
		`gc 4 @1.0s 2%: garbled, x->y->z MB, 9999 MB`,
	}, "\n")
	got := parseGCTrace(log)
	// 0.53+0/0.68/(0.18)+3.0 + 3.7+0.12/1.1/(0)+0.066 + 0.49+0/3.6/(0.91)+0.006, idle marking left out
	if d := got.CPUms - 13.292; d > 1e-9 || d < -1e-9 {
		t.Fatalf("CPUms = %v, want 13.292", got.CPUms)
	}
	got.CPUms = 0
	want := gcTrace{Cycles: 3, PeakMiB: 52, LiveMiB: 30, GoalMiB: 60}
	if got != want {
		t.Fatalf("parseGCTrace = %+v, want %+v", got, want)
	}
	if z := parseGCTrace("no gc lines\n"); z != (gcTrace{}) {
		t.Fatalf("no lines: %+v", z)
	}
}

func TestLargeSelected(t *testing.T) {
	ids := []string{}
	for _, db := range []string{"pg", "mariadb"} {
		for _, sh := range []string{"rows", "big"} {
			for _, m := range largeModes {
				ids = append(ids, largeCaseID(db, sh, m))
			}
		}
	}
	count := func(patterns ...string) (n int) {
		for _, id := range ids {
			if largeSelected(patterns, id) {
				n++
			}
		}
		return n
	}
	if len(ids) != 8 || ids[0] != "pg-rows-alo" || ids[7] != "mariadb-big-eos" {
		t.Fatalf("case ids: %v", ids)
	}
	for _, c := range []struct {
		patterns []string
		want     int
	}{
		{nil, 8}, {[]string{"pg-rows-alo"}, 1}, {[]string{"mariadb-*"}, 4}, {[]string{"*-eos"}, 4},
		{[]string{"pg-*-alo", " mariadb-big-eos"}, 3}, {[]string{"nothing"}, 0},
	} {
		if n := count(c.patterns...); n != c.want {
			t.Errorf("%q selects %d cases, want %d", c.patterns, n, c.want)
		}
	}
}

// withDelivery's configs parse, with the mode and the store each needs.
func TestWithDelivery(t *testing.T) {
	e := &env{o: &Options{OffsetsDir: t.TempDir()}, brokers: []string{"127.0.0.1:9092"}}
	base := outboxdYAML(e, pgSourceYAML("postgres://u@h/db", "slot_x"), "p.", "")
	for _, c := range []struct{ mode, store string }{{"at_least_once", "file"}, {"exactly_once", "kafka"}} {
		text, err := withDelivery(base, c.mode)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := config.Parse([]byte(text), os.LookupEnv)
		if err != nil {
			t.Fatalf("%s: %v\n%s", c.mode, err, text)
		}
		if cfg.Kafka.Delivery != c.mode || cfg.Offsets.Store != c.store {
			t.Errorf("%s: delivery %q store %q, want %q %q", c.mode, cfg.Kafka.Delivery, cfg.Offsets.Store, c.mode, c.store)
		}
	}
	if _, err := withDelivery(base, "at_most_once"); err == nil {
		t.Error("an unknown mode is accepted")
	}
	if _, err := withDelivery("source:\n", "exactly_once"); err == nil {
		t.Error("a config without kafka/offsets sections is accepted")
	}
}

func TestLargeShortSkip(t *testing.T) {
	for _, c := range []struct {
		short bool
		only  []string
		skip  bool
	}{
		{true, nil, true}, {true, []string{"drain-pg-1"}, true}, {true, []string{largeScenario}, false}, {false, nil, false},
	} {
		r := largeShortSkip(&Options{Short: c.short, Only: c.only})
		if (r != nil) != c.skip || (r != nil && !strings.HasPrefix(r[0].Error, "skipped")) {
			t.Errorf("short=%v only=%v: %+v, want skipped=%v", c.short, c.only, r, c.skip)
		}
	}
}

// bigBlocks: the JSON payload stays under the byte count asked for (Kafka's default record
// limit is 1 MiB) and close to it.
func TestBigBlocks(t *testing.T) {
	for _, p := range []int{999000, 100000, 5000} {
		n := len(`{"ts": 1764600000000000, "blob": "1000-"}`) + 32*bigBlocks(p)
		if n > p || n < p-100 {
			t.Errorf("payload %d: JSON of %d bytes", p, n)
		}
	}
}

// A tiny memory-large-tx end to end: every one of the 8 cases reports a figure in MiB and the
// distinct ids read back with read_committed are every row (PostgreSQL: plus the marker).
func TestMemoryLargeTxTiny(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL and MariaDB and builds outboxd")
	}
	if _, _, err := testenv.MariaDBBinaries(); err != nil {
		testenv.Unavailable(t, "MariaDB", err)
	}
	var out bytes.Buffer
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const rows, big = 300, 2
	rep, err := Run(ctx, Options{Only: []string{largeScenario}, LargeTxRows: rows, LargeTxBig: big, LargeTxPayload: 200000,
		OffsetsDir: t.TempDir(), Out: &out, Log: quiet, OutboxdLog: quiet})
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if len(rep.Results) != 8 {
		t.Fatalf("%d results, want 8:\n%s", len(rep.Results), out.String())
	}
	for _, r := range rep.Results {
		want := float64(rows)
		if strings.Contains(r.Name, "× 200000 B payloads") {
			want = big
		}
		if strings.Contains(r.Name, "PostgreSQL") {
			want++ // the marker row
		}
		if r.Error != "" || r.Unit != "MiB" || r.Value <= 0 || r.Extra["distinct_ids"] != want || r.Extra["records"] < want ||
			!strings.Contains(r.Detail, "target ≤") {
			t.Errorf("%s: %+v (want %v distinct ids)", r.Name, r, want)
		}
	}
	if !strings.Contains(out.String(), "exactly_once") || rep.Options.LargeTxRows != rows {
		t.Fatalf("report:\n%s", out.String())
	}
}

// txSpans: one transaction, or perTx-row transactions covering 1..rows without gaps.
func TestTxSpans(t *testing.T) {
	one := largeShape{rows: 10}.txSpans()
	if len(one) != 1 || one[0] != [2]int{1, 10} {
		t.Fatalf("one transaction: %v", one)
	}
	sp := largeShape{rows: 10, perTx: 4}.txSpans()
	if len(sp) != 3 || sp[0] != [2]int{1, 4} || sp[1] != [2]int{5, 8} || sp[2] != [2]int{9, 10} {
		t.Fatalf("perTx 4: %v", sp)
	}
	o := &Options{LargeTxRows: 1000, LargeTxBig: 10, LargeTxPayload: 999000, LargeTxPerTx: 1024}
	shapes := largeShapes(o)
	if shapes[0].perTx != 1024 || shapes[1].perTx != 1 || !strings.Contains(shapes[1].label(), "in 1-row transactions") {
		t.Fatalf("shapes with LargeTxPerTx: %+v", shapes)
	}
}
