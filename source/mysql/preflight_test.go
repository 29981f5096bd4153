package mysql

import (
	"strings"
	"testing"
)

func TestFilterExcludes(t *testing.T) {
	for _, tc := range []struct {
		db           string
		do, ignore   []string
		fold         bool
		wantExcluded bool
	}{
		{"app", nil, nil, false, false},
		{"app", nil, []string{"app"}, false, true},
		{"app", nil, []string{"other"}, false, false},
		{"app", []string{"other"}, nil, false, true},
		{"app", []string{"other", "app"}, nil, false, false},
		{"app", []string{"App"}, nil, false, true}, // case-sensitive server
		{"app", []string{"App"}, nil, true, false},
		{"app", nil, []string{"APP"}, true, true},
	} {
		why := filterExcludes(tc.db, tc.do, tc.ignore, tc.fold)
		if (why != "") != tc.wantExcluded {
			t.Errorf("filterExcludes(%s, do=%v, ignore=%v, fold=%v) = %q", tc.db, tc.do, tc.ignore, tc.fold, why)
		}
	}
	if got := splitList(" app, other ,"); len(got) != 2 || got[0] != "app" || got[1] != "other" {
		t.Errorf("splitList: %q", got)
	}
}

func problemChecks(ps []Problem) string {
	var s []string
	for _, p := range ps {
		s = append(s, p.Check)
	}
	return strings.Join(s, "; ")
}

func TestPreflightProblems(t *testing.T) {
	full := serverInfo{rowMetadata: "FULL"}
	captured := map[tableKey]string{{"App", "Outbox"}: "App.Outbox"}
	found := func(db, table string, charsets map[string]string) map[tableKey][]foundTable {
		f := foundTable{DB: db, Table: table, Charsets: charsets, Columns: []string{"id", "aggregateid", "payload"}}
		return map[tableKey][]foundTable{{"App", "Outbox"}: {f}}
	}
	utf8 := map[string]string{"aggregateid": "utf8mb4", "payload": "utf8mb4"}
	for _, tc := range []struct {
		name string
		p    preflight
		info serverInfo
		cfg  Config
		want string // the Checks of the problems, in order
	}{
		{"lctn=1 folds names", preflight{LowerCaseNames: 1, Found: found("app", "outbox", utf8)}, full, Config{}, ""},
		{"lctn=0 exact spelling", preflight{Found: found("App", "Outbox", utf8)}, full, Config{}, ""},
		{"lctn=0 other spelling", preflight{Found: found("app", "outbox", utf8)}, full, Config{}, "table App.Outbox"},
		{"missing table is not a preflight refusal", preflight{}, full, Config{}, ""},
		{"ignore-db", preflight{LowerCaseNames: 1, IgnoreDB: []string{"app"}, Found: found("app", "outbox", utf8)}, full, Config{}, "binlog filters"},
		{"do-db lacks it", preflight{DoDB: []string{"other"}, Found: found("App", "Outbox", utf8)}, full, Config{}, "binlog filters"},
		{"do-db has it", preflight{DoDB: []string{"App"}, Found: found("App", "Outbox", utf8)}, full, Config{}, ""},
		{"minimal metadata", preflight{Found: found("App", "Outbox", utf8)}, serverInfo{rowMetadata: "MINIMAL"}, Config{}, "binlog_row_metadata"},
		{"minimal metadata allowed", preflight{Found: found("App", "Outbox", utf8)}, serverInfo{rowMetadata: "MINIMAL"}, Config{AllowMinimalRowMetadata: true}, ""},
		{"no row metadata variable", preflight{Found: found("App", "Outbox", utf8)}, serverInfo{}, Config{}, "binlog_row_metadata"},
		{"utf16 is converted", preflight{Found: found("App", "Outbox", map[string]string{"aggregateid": "utf16"})}, full, Config{}, ""},
		{"sjis is refused", preflight{Found: found("App", "Outbox", map[string]string{"aggregateid": "sjis"})}, full, Config{}, "table App.Outbox column aggregateid"},
	} {
		got := problemChecks(tc.p.problems(tc.info, tc.cfg, captured))
		if got != tc.want {
			t.Errorf("%s: problems %q, want %q", tc.name, got, tc.want)
		}
	}
	// Each problem names its fix.
	p := preflight{IgnoreDB: []string{"App"}, Found: found("app", "outbox", map[string]string{"aggregateid": "big5"})}
	for _, pr := range p.problems(serverInfo{rowMetadata: "MINIMAL"}, Config{}, captured) {
		if pr.Fix == "" || pr.Reason == "" {
			t.Errorf("problem without reason or fix: %+v", pr)
		}
	}
	err := preflightError(p.problems(serverInfo{rowMetadata: "MINIMAL"}, Config{}, captured))
	for _, want := range []string{"allow_minimal_row_metadata", "write source.tables as app.outbox", "binlog-ignore-db"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q lacks %q", err, want)
		}
	}
}
