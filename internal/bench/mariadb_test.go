package bench

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outboxd/outboxd/internal/app"
	"github.com/outboxd/outboxd/internal/config"
	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/source"
)

func TestParseMySQLDSN(t *testing.T) {
	s, err := parseMySQLDSN("mysql://u:p%40ss@db.example:3307/app")
	if err != nil {
		t.Fatal(err)
	}
	if s.addr != "db.example:3307" || s.user != "u" || s.pass != "p@ss" || s.dsn != "mysql://u:p%40ss@db.example:3307/app" {
		t.Fatalf("got %+v", s)
	}
	if s, err = parseMySQLDSN("mariadb://root@127.0.0.1/app"); err != nil || s.addr != "127.0.0.1:3306" {
		t.Fatalf("default port: %+v %v", s, err)
	}
	for _, bad := range []string{"root@tcp(127.0.0.1:3306)/app", "postgres://x@h/db", "mysql://h/db?tls=true"} {
		if _, err := parseMySQLDSN(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestGTIDCovers(t *testing.T) {
	for _, c := range []struct {
		pos, end source.Position
		want     bool
	}{
		{"", "0-1-10", false},
		{"0-1-9", "0-1-10", false},
		{"0-1-10", "0-1-10", true},
		{"0-1-11", "0-1-10", true},
		{"0-1-10,1-2-3", "0-1-10,1-2-4", false},
		{"0-1-10,1-2-4", "0-1-10,1-2-4", true},
	} {
		if got := gtidCovers(c.pos, c.end); got != c.want {
			t.Errorf("gtidCovers(%q, %q) = %v", c.pos, c.end, got)
		}
	}
}

// The outboxd config of a MariaDB reader parses, and its offsets file is seeded with the start
// GTID under the reader's source name.
func TestMariaDBConfigAndSeed(t *testing.T) {
	e := &env{o: &Options{OffsetsDir: t.TempDir()}, brokers: []string{"127.0.0.1:9092"}}
	be := newMyBackend(e, &myServer{dsn: "mysql://root:$ecret@127.0.0.1:3306/app"})
	b := &Backlog{serverIDs: []uint32{4711, 4712}, start: "0-1-7", end: "0-1-107"}
	text := outboxdYAML(e, be.SourceYAML(b, 1), "outboxd-bench.t.0.", "")
	cfg, err := config.Parse([]byte(text), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatalf("%v\n%s", err, text)
	}
	if cfg.Source.Type != "mysql" || cfg.Source.MySQL.ServerID != 4712 || cfg.Source.DSN != "mysql://root:$ecret@127.0.0.1:3306/app" ||
		len(cfg.Source.Tables) != 1 || cfg.Source.Tables[0] != myFull {
		t.Fatalf("source: %+v", cfg.Source)
	}
	if err := seedOffsets(context.Background(), text, be.StartPosition(b, 1)); err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(cfg.Offsets.Path)
	if !bytes.Contains(raw, []byte(`"position":"0-1-7"`)) || !bytes.Contains(raw, []byte(`"source":"mysql:4712"`)) {
		t.Fatalf("offsets file: %s", raw)
	}
	store, _ := app.Store(cfg)
	if p, err := store.Load(context.Background()); err != nil || p != "0-1-7" {
		t.Fatalf("load: %q %v", p, err)
	}
	os.RemoveAll(filepath.Dir(cfg.Offsets.Path))
}

// A tiny drain-mariadb run end to end (private MariaDB, embedded broker, outboxd built).
func TestDrainMariaDBTiny(t *testing.T) {
	if testing.Short() {
		t.Skip("starts MariaDB and builds outboxd")
	}
	if _, _, err := testenv.MariaDBBinaries(); err != nil {
		testenv.Unavailable(t, "MariaDB", err)
	}
	var out bytes.Buffer
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rep, err := Run(ctx, Options{N: 300, Rounds: 1, Short: true, Only: []string{"drain-mariadb"}, Out: &out,
		Log: quiet, OutboxdLog: quiet})
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	ratios, cpuRatios, dumpLines := 0, 0, 0
	for _, r := range rep.Results {
		// 300 rows may take the dump thread under one clock tick of CPU: that ratio says so.
		if r.Error != "" && !(strings.Contains(r.Name, "/ binlog dump thread") && strings.Contains(r.Error, "clock tick")) {
			t.Errorf("%s / %s: %s", r.Scenario, r.Name, r.Error)
		}
		switch {
		case strings.HasPrefix(r.Name, "ratio outboxd ("):
			ratios++
			if r.Value <= 0 {
				t.Errorf("%s / %s: ratio %v", r.Scenario, r.Name, r.Value)
			}
		case strings.HasSuffix(r.Name, "/ go-mysql reader"):
			cpuRatios++
			if r.Value <= 0 || r.Extra["outboxd_cpu_us_per_event"] <= 0 {
				t.Errorf("%s / %s: %+v", r.Scenario, r.Name, r)
			}
		case strings.HasPrefix(r.Name, "binlog dump thread busy, "):
			dumpLines++
			if r.Extra["threads_run1"] != 1 {
				t.Errorf("%s / %s: %+v", r.Scenario, r.Name, r)
			}
		}
	}
	if ratios != 4 || cpuRatios != 4 || dumpLines != 6 || !strings.Contains(out.String(), "drain-mariadb-1000") || rep.Machine.MariaDB == "" {
		t.Fatalf("ratios %d, CPU ratios %d, dump thread lines %d; report:\n%s", ratios, cpuRatios, dumpLines, out.String())
	}
}
