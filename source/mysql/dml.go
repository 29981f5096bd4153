package mysql

// dmlVerbs are the statements that change (or, through stored functions, may change) rows. In
// a binlog that should carry row events only, any of these that names an outbox table means
// rows of that table were logged as a statement.
var dmlVerbs = []string{"INSERT", "REPLACE", "UPDATE", "DELETE", "LOAD", "WITH", "SELECT", "DO", "CALL", "VALUES", "TABLE"}

// dmlTarget reports whether the statement q (run with defaultDB as its current database) is a
// data change that names a table for which captured(db, table) holds, and which. It is
// deliberately conservative: every identifier of the statement is tried as a table name
// (qualified "db.table" pairs, and bare names in defaultDB), so a column or alias spelled like
// an outbox table also matches; a false match is a loud stop, a missed one a silent loss.
func dmlTarget(defaultDB, q string, captured func(db, table string) bool) (tableKey, bool) {
	ts := tokenize(q)
	i := 0
	for i < len(ts) && ts[i].punct('(') {
		i++
	}
	if i == len(ts) || !anyIs(ts[i], dmlVerbs...) {
		return tableKey{}, false
	}
	for j := i; j < len(ts); j++ {
		t := ts[j]
		if !t.ident() {
			continue
		}
		if j+2 < len(ts) && ts[j+1].punct('.') && ts[j+2].ident() {
			if captured(t.s, ts[j+2].s) {
				return tableKey{t.s, ts[j+2].s}, true
			}
			// "t.col": t may be an outbox table qualifying a column.
			if defaultDB != "" && captured(defaultDB, t.s) {
				return tableKey{defaultDB, t.s}, true
			}
			j += 2
			continue
		}
		if defaultDB != "" && captured(defaultDB, t.s) {
			return tableKey{defaultDB, t.s}, true
		}
	}
	return tableKey{}, false
}
