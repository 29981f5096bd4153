package postgres

import (
	"strings"
	"testing"
)

// TestChangesNoTables: with no configured table only a dropped or re-created publication is a
// coverage change; an ALTER (new xmin) is not, and no insert-less publication is a problem.
func TestChangesNoTables(t *testing.T) {
	base := &PubShape{Name: "p", Exists: true, OID: 10, Xmin: 100, Insert: true}
	altered := *base
	altered.Xmin, altered.Insert = 200, false
	if c := Changes(base, &altered); len(c) != 0 {
		t.Errorf("altered, no table: changes %q, want none", c)
	}
	if p := altered.Problems(nil); len(p) != 0 {
		t.Errorf("publish without insert, no table: problems %v, want none", p)
	}
	recreated := *base
	recreated.OID = 11
	if c := Changes(base, &recreated); len(c) != 1 || !strings.Contains(c[0], "dropped and created again") {
		t.Errorf("re-created: changes %q", c)
	}
	if c := Changes(base, &PubShape{Name: "p"}); len(c) != 1 || !strings.Contains(c[0], "was dropped") {
		t.Errorf("dropped: changes %q", c)
	}
	// With a table, the same ALTER is a change (and no inserts a problem).
	withTable := *base
	withTable.Tables = []TableShape{{Name: "public.outbox", OID: 5, Relkind: "r", Member: Membership{RelOID: 7}}}
	alteredT := withTable
	alteredT.Xmin, alteredT.Insert = 200, false
	if c := Changes(&withTable, &alteredT); len(c) != 1 || !strings.Contains(c[0], "was altered") {
		t.Errorf("altered, one table: changes %q", c)
	}
	if p := alteredT.Problems(nil); len(p) != 1 || !strings.Contains(p[0].What, "does not publish inserts") {
		t.Errorf("publish without insert, one table: problems %v", p)
	}
	if got := createPublicationSQL(&PubShape{Name: "p"}); got != `CREATE PUBLICATION "p" WITH (publish = 'insert')` {
		t.Errorf("no table: %s", got)
	}
}
