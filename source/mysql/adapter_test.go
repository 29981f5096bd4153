package mysql

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/source"
)

// TestAdapterSettings: server_id's default, the name in stored offsets, the store description
// built from it, and Validate's keys and messages.
func TestAdapterSettings(t *testing.T) {
	var gotName string
	a := NewAdapter(Settings{DSN: "mysql://root@h:3306/app", Tables: []string{"app.outbox"},
		OffsetsStore: func(name string) string { gotName = name; return "offsets topic t, key " + name }}, nil)
	if c := a.Config(); c.ServerID != DefaultServerID || a.Name() != "mysql:4242" || gotName != "mysql:4242" ||
		c.OffsetsStore != "offsets topic t, key mysql:4242" || a.Validate() != nil {
		t.Errorf("defaults: %+v name %s validate %v", c, a.Name(), a.Validate())
	}
	if n := NewAdapter(Settings{ServerID: 7}, nil).Name(); n != "mysql:7" {
		t.Errorf("server_id 7: %s", n)
	}
	for _, c := range []struct {
		s        Settings
		key, msg string
	}{
		{Settings{DSN: "mysql://root@h:3306/app", Start: "latest"}, "source.mysql.start",
			`"latest" is not current, earliest or a position`},
		{Settings{DSN: "mysql://root:hunter2@h:3306/app?bogus=1"}, "source.dsn", `unsupported parameter "bogus"`},
		{Settings{DSN: "root:hunter2@tcp(h:3306"}, "source.dsn", ""},
	} {
		err := NewAdapter(c.s, nil).Validate()
		var se *SettingError
		if !errors.As(err, &se) || se.Key != c.key || !strings.Contains(se.Msg, c.msg) || strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%+v: %v, want %s: %s", c.s, err, c.key, c.msg)
		}
	}
	if err := NewAdapter(Settings{DSN: "mysql://root@h:3306/app", Start: "latest"}, nil).Validate(); !strings.HasSuffix(err.(*SettingError).Msg,
		" (use current, earliest, or a position such as 0-1-42 or mysql-bin.000003:1234)") || strings.HasPrefix(err.(*SettingError).Msg, "source.mysql.start") {
		t.Errorf("start message: %q", err.(*SettingError).Msg)
	}
	if s := NewAdapter(Settings{DSN: "mysql://root:p%40ss@h:3306/app"}, nil).Secrets(); len(s) != 2 || s[0] != "p@ss" || s[1] != "p%40ss" {
		t.Errorf("Secrets: %q", s)
	}
}

// TestAdapterOnMariaDB: the check lines of a ready server, of a missing table, of each start
// case (nothing stored with and without source.mysql.start, a stored position servable or
// not, an unreadable store, positions in a store check does not read); `offsets show`; the
// position check of `offsets set`; hot standby: one holder of the pipeline lock, a standby that
// waits (calling waiting) and takes over on release, and an unreachable server before the
// first term as an error.
func TestAdapterOnMariaDB(t *testing.T) {
	m := testenv.NewMariaDB(t, testenv.MariaDBOptions{RowMetadata: true})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := m.Exec(ctx, "app", testenv.MariaDBOutboxDDL("outbox", "CHAR(36)")); err != nil {
		t.Fatal(err)
	}
	settings := Settings{DSN: m.DSN("app"), Tables: []string{"app.outbox"}, Columns: []string{"id", "aggregateid", "payload"},
		OffsetsStore: func(string) string { return "offsets file /x (offsets.path)" }}
	type line struct {
		ok          bool
		reason, fix string
	}
	preflight := func(s Settings, stored func(context.Context) (source.Position, error)) map[string]line {
		t.Helper()
		out := map[string]line{}
		NewAdapter(s, nil).Preflight(ctx, stored, func(name string, ok bool, reason, fix string) { out[name] = line{ok, reason, fix} })
		return out
	}
	storedIs := func(p source.Position, err error) func(context.Context) (source.Position, error) {
		return func(context.Context) (source.Position, error) { return p, err }
	}

	lines := preflight(settings, nil)
	for _, name := range []string{"mysql reachable", "log_bin", "binlog_format", "binlog_row_image", "column names", "lower_case_table_names",
		"binlog filters", "replication privileges", "table app.outbox"} {
		if l, ok := lines[name]; !ok || !l.ok {
			t.Errorf("line %q: %+v (present %v)", name, l, ok)
		}
	}
	if l := lines["start position"]; !l.ok || l.reason != "stored in offsets file /x (offsets.path); checked when the pipeline starts" {
		t.Errorf("start position, store not read by check: %+v", l)
	}
	missing := settings
	missing.Tables = []string{"app.nope"}
	if l := preflight(missing, nil)["table app.nope"]; l.ok || l.reason != "does not exist (or is not visible to this user)" {
		t.Errorf("missing table: %+v", l)
	}
	if l := preflight(settings, storedIs("", nil))["start position"]; l.ok || !strings.Contains(l.reason, "no stored position in offsets file /x (offsets.path), and source.mysql.start is not set") ||
		!strings.Contains(l.fix, "source.mysql.start: current") {
		t.Errorf("nothing stored, no start: %+v", l)
	}
	current := settings
	current.Start = "current"
	if l := preflight(current, storedIs("", nil))["start position"]; !l.ok || l.reason != "none stored; the run starts at source.mysql.start: current" {
		t.Errorf("nothing stored, start current: %+v", l)
	}
	if l := preflight(settings, storedIs("", errors.New("offsets file damaged")))["start position"]; l.ok || l.reason != "offsets file damaged" ||
		!strings.Contains(l.fix, "restore the offsets file") {
		t.Errorf("unreadable store: %+v", l)
	}

	a := NewAdapter(settings, nil)
	var b strings.Builder
	if err := a.ShowOffsets(ctx, "", &b); err != nil {
		t.Fatal(err)
	}
	var now string
	for _, l := range strings.Split(b.String(), "\n") {
		if v, ok := strings.CutPrefix(l, "server position now:  "); ok {
			now = v
		}
	}
	if !strings.HasPrefix(b.String(), "server:               mariadb ") || now == "" || strings.Contains(b.String(), "next run starts at") {
		t.Fatalf("show, nothing stored:\n%s", b.String())
	}
	if l := preflight(settings, storedIs(source.Position(now), nil))["start position"]; !l.ok || l.reason != "stored position "+now+" is servable" {
		t.Errorf("servable stored position: %+v", l)
	}
	gone := "0-1-999999999"
	if l := preflight(settings, storedIs(source.Position(gone), nil))["start position"]; l.ok || !strings.HasPrefix(l.reason, "stored position "+gone+" cannot be served: ") {
		t.Errorf("stored position beyond the server's: %+v", l)
	}
	b.Reset()
	NewAdapter(current, nil).ShowOffsets(ctx, "", &b)
	if !strings.Contains(b.String(), "next run starts at:   source.mysql.start: current\n") {
		t.Errorf("show with start current:\n%s", b.String())
	}
	b.Reset()
	a.ShowOffsets(ctx, source.Position(now), &b)
	if !strings.Contains(b.String(), "stored position servable: yes\n") {
		t.Errorf("show a servable position:\n%s", b.String())
	}
	b.Reset()
	a.ShowOffsets(ctx, source.Position(gone), &b)
	if !strings.Contains(b.String(), "stored position servable: NO — ") {
		t.Errorf("show a position the server cannot serve:\n%s", b.String())
	}
	if r, err := a.CheckPosition(ctx, source.Position(now), &b); r != nil || err != nil {
		t.Errorf("CheckPosition(now): %v %v", r, err)
	}
	for _, p := range []source.Position{source.Position(gone), "garbage"} {
		if r, err := a.CheckPosition(ctx, p, &b); r == nil || err != nil {
			t.Errorf("CheckPosition(%s): refused %v err %v, want a refusal", p, r, err)
		}
	}
	if a.NoStoredPosition() != "the next run refuses to start until source.mysql.start is set (current | earliest | a position), or a position is stored with `outboxd offsets set`" ||
		NewAdapter(current, nil).NoStoredPosition() != "the next run starts at source.mysql.start: current" {
		t.Errorf("NoStoredPosition: %q", a.NoStoredPosition())
	}

	// Hot standby.
	active, standby := NewAdapter(settings, nil), NewAdapter(settings, nil)
	defer active.CloseStandby()
	defer standby.CloseStandby()
	waited := make(chan struct{}, 100)
	waiting := func() { waited <- struct{}{} }
	release, lost, err := active.WaitActive(ctx, true, waiting)
	if err != nil || lost == nil || len(waited) != 0 {
		t.Fatalf("first instance: lost %v err %v waited %d", lost, err, len(waited))
	}
	if s := active.Active(active.NewSource(), nil, nil); fmt.Sprintf("%T", s) != "*mysql.Source" {
		t.Errorf("Active wraps the source: %T", s)
	}
	done := make(chan error, 1)
	go func() {
		r, _, err := standby.WaitActive(ctx, true, waiting)
		if r != nil {
			defer r()
		}
		done <- err
	}()
	select {
	case <-waited:
	case err := <-done:
		t.Fatalf("the standby took a held lock: %v", err)
	case <-ctx.Done():
		t.Fatal("the standby never saw the lock held")
	}
	release()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("takeover: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("the standby did not take over a released lock")
	}
	down := NewAdapter(Settings{DSN: "mysql://root@127.0.0.1:1/app?timeout=2s", Tables: []string{"app.outbox"}}, nil)
	defer down.CloseStandby()
	if _, _, err := down.WaitActive(ctx, true, waiting); err == nil || !strings.Contains(err.Error(), "take the pipeline lock outboxd:4242:app.outbox (hot standby)") {
		t.Errorf("unreachable before the first term: %v", err)
	}
}
