package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outboxd/source"
)

// outboxColumnsQuery lists a table's columns as pgoutput's Relation message carries them (in
// table order, without dropped and generated columns, which logical replication does not send),
// with the facts types.go maps: type OID, type modifier and NOT NULL, and defaults.go's DEFAULT.
const outboxColumnsQuery = `SELECT a.attname, a.atttypid, a.atttypmod, a.attnotnull, pg_get_expr(d.adbin, d.adrelid)
	FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace
	LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
	WHERE n.nspname = $1 AND c.relname = $2 AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = ''
	ORDER BY a.attnum`

// OutboxTableColumns returns the columns of table (a name of source.tables) and the
// source.Types the source's rows will carry for them (types.go, from the catalog as the Relation
// message and loadRelations would give them); ok false when the table does not exist. For
// `outboxd check`; it opens its own connection, bounded by ctx.
func (a *Adapter) OutboxTableColumns(ctx context.Context, table string) (cols []string, types []source.Type, ok bool, err error) {
	conn, err := pgx.Connect(ctx, a.cfg.DSN)
	if err != nil {
		return nil, nil, false, fmt.Errorf("connect (source.dsn): %w", err)
	}
	defer conn.Close(context.Background())
	schema, name := splitTable(table)
	var exists bool
	err = conn.QueryRow(ctx, `SELECT true FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relname = $2`, schema, name).Scan(&exists)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil, false, nil
	}
	if err != nil {
		return nil, nil, false, fmt.Errorf("look up table %s: %w", table, err)
	}
	rows, err := conn.Query(ctx, outboxColumnsQuery, schema, name)
	if err != nil {
		return nil, nil, false, fmt.Errorf("list the columns of %s: %w", table, err)
	}
	var col string
	var oid uint32
	var typmod int32
	var notNull bool
	var def *string
	_, err = pgx.ForEachRow(rows, []any{&col, &oid, &typmod, &notNull, &def}, func() error {
		cols = append(cols, col)
		t := columnType(oid, typmod, notNull)
		if def != nil {
			t.Default, t.HasDefault = columnDefault(oid, t, *def)
		}
		types = append(types, t)
		return nil
	})
	if err != nil {
		return nil, nil, false, fmt.Errorf("list the columns of %s: %w", table, err)
	}
	if types == nil {
		types = []source.Type{}
	}
	return cols, types, true, nil
}
