package mysql

import "context"

// checkRetention reports the binlog retention WARN lines (issue 17: binlog_expire_logs_seconds
// / expire_logs_days, RDS `binlog retention hours`, against source.mysql.min_binlog_retention)
// and the replica filters that would keep outbox rows out of the binlog (FAIL). Placeholder of
// the skeleton, replaced by the MySQL retention helper.
func (a *Adapter) checkRetention(ctx context.Context, st ServerStatus, report func(name string, ok bool, reason, fix string)) {
}
