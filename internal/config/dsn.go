package config

import (
	"errors"
	"io/fs"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxd/outboxd/source/mysql"
)

// checkDSN parses source.dsn with the parser the source connects with, so that a DSN the driver
// would refuse is a config error (exit 2) up front. The DSN is never quoted: pgconn's own
// errors echo it with only a best-effort redaction, which leaves fragments of a password holding
// '@', ':' or '?' in the text.
func checkDSN(c *Config) error {
	if c.Source.Type == "mysql" {
		if _, err := mysql.RedactDSN(c.Source.DSN); err != nil {
			return &Error{Key: "source.dsn", Msg: err.Error()} // parseDSN's errors never contain the password
		}
		return nil
	}
	if _, err := pgconn.ParseConfig(c.Source.DSN); err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			return &Error{Key: "source.dsn", Msg: "a file it names cannot be read (" + pe.Error() + "): fix the path or the file's permissions"}
		}
		return &Error{Key: "source.dsn", Msg: "PostgreSQL's driver cannot parse it (the DSN is not shown: it may hold the password). " +
			"In URL form postgres://user:password@host:5432/db, percent-encode the password's special characters " +
			"(@ %40, : %3A, / %2F, ? %3F, # %23, % %25, space %20); or use key=value form: host=... user=... password='...' dbname=..."}
	}
	return nil
}
