package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// emitMessageSignature is the function writers call to emit an outbox event (and outboxd its
// heartbeats).
const emitMessageSignature = "pg_logical_emit_message(boolean,text,text)"

// messagesCheck is the `outboxd check` line of the tableless outbox (Config.MessagePrefix set):
// the server decodes messages (PostgreSQL 14+, pgoutput's messages option) and the role of
// source.dsn may call pg_logical_emit_message(boolean, text, text) — has_function_privilege, so
// a REVOKE from PUBLIC or a missing grant FAILs here rather than at the first write. The writers'
// roles need the same EXECUTE; outboxd can only check its own.
func messagesCheck(ctx context.Context, conn *pgx.Conn, serverVersionNum int, prefix string) CheckResult {
	name := "messages " + prefix
	if serverVersionNum < 140000 {
		return CheckResult{Name: name, Reason: fmt.Sprintf("source.postgres.messages needs PostgreSQL 14 or later (pgoutput's messages option); server_version_num is %d", serverVersionNum),
			Fix: "upgrade PostgreSQL, or remove source.postgres.messages and write events to an outbox table"}
	}
	var exists, may bool
	err := conn.QueryRow(ctx, `SELECT to_regprocedure($1) IS NOT NULL,
		coalesce(has_function_privilege(current_user, to_regprocedure($1), 'EXECUTE'), false)`, emitMessageSignature).Scan(&exists, &may)
	switch {
	case err != nil:
		return CheckResult{Name: name, Reason: "cannot check the privilege on " + emitMessageSignature + ": " + err.Error(),
			Fix: "check the role may read pg_proc"}
	case !exists:
		return CheckResult{Name: name, Reason: emitMessageSignature + " does not exist on this server",
			Fix: "use PostgreSQL 14 or later"}
	case !may:
		return CheckResult{Name: name, Reason: "the role may not call " + emitMessageSignature + " (no EXECUTE privilege)",
			Fix: "GRANT EXECUTE ON FUNCTION pg_logical_emit_message(boolean, text, text) TO <role of source.dsn>; the roles of the writers that emit events need it too"}
	}
	return CheckResult{Name: name, OK: true, Reason: fmt.Sprintf("the role may call %s; transactional messages with prefix %q are outbox events (the writers' roles need EXECUTE on it too)", emitMessageSignature, prefix)}
}
