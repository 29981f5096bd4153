package mysql

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Config configures a MySQL/MariaDB binlog source.
type Config struct {
	// DSN locates the server. Both forms are accepted:
	//
	//	mysql://user:pass@host:3306/app?tls=true        (URL form; mariadb:// too)
	//	user:pass@tcp(host:3306)/app?tls=skip-verify    (go-sql-driver form; unix(/path) too)
	//
	// Parameters: tls=true|false|skip-verify, timeout=10s (dial timeout), socket=/path (URL
	// form). Any other parameter is an error. The password never appears in logs or errors.
	DSN string
	// Tables are the outbox tables, "db.table" (a bare "table" means the DSN's database).
	// Row.Table carries the name as configured.
	Tables []string
	// ServerID is the replica id this reader registers with (source.mysql.server_id). It must be
	// non-zero and unique among the server's replicas: two readers with one id evict each other.
	ServerID uint32
	// Start (source.mysql.start) is where a first run without a stored position begins:
	// "current" (the binlog end now), "earliest" (the oldest binlog the server still has) or an
	// explicit position. Empty with no stored position is refused (a lost offsets file must not
	// skip rows silently), unless Snapshot is "initial": the snapshot's position is then the
	// start, and Start is ignored.
	Start string
	// OffsetsStore describes where the pipeline stores positions ("offsets file
	// /var/lib/outboxd/offsets.json (offsets.path)"), for the refusal without Start.
	OffsetsStore string
	// AllowMinimalRowMetadata (source.mysql.allow_minimal_row_metadata) accepts a server with
	// binlog_row_metadata=MINIMAL; otherwise Open and check refuse it.
	AllowMinimalRowMetadata bool
	// UseGTID selects the position form when there is no stored position. nil (the default):
	// GTID positions when the server has GTIDs (always on MariaDB; gtid_mode=ON on MySQL),
	// otherwise binlog file:pos. A pointer to false forces file:pos; a pointer to true requires
	// GTIDs (Open fails on a MySQL server with gtid_mode OFF). A stored position keeps its own
	// form whatever this says, so a running deployment never changes form under its offsets.
	UseGTID *bool
	// HeartbeatPeriod asks the server for a heartbeat when the binlog is idle; heartbeats keep
	// the connection alive and let an idle source report progress. A connection silent for
	// 3 × HeartbeatPeriod + 2s while Next waits is considered dead and re-established. Default 10s.
	HeartbeatPeriod time.Duration
	// IdleProgressInterval is the least time between two idle-progress transactions (Tx
	// without rows) for transactions that touched no outbox table. Default 1s.
	IdleProgressInterval time.Duration
	// ReconnectTimeout bounds how long Next retries a lost connection (from the last
	// transaction boundary) before it returns the error. Default 1m.
	ReconnectTimeout time.Duration
	// ChunkRows and ChunkBytes cap one chunk of a transaction (source.Tx): at most ChunkRows rows
	// and ChunkBytes bytes (source.RowBytes per row), cut between rows events, so one rows event
	// bigger than a cap is a chunk alone. A transaction of any size is then held in bounded
	// memory. 0: the default (DefaultChunkRows, DefaultChunkBytes); negative: no cap. Without any cap every
	// transaction is one chunk.
	ChunkRows  int
	ChunkBytes int
	// Snapshot (source.mysql.snapshot): "initial" publishes the rows already in the tables at a
	// first start (no stored position) from a consistent read, then streams from the binlog
	// position of that read (snapshot.go); "" or "never": no snapshot. Other values are refused
	// by Open (and Adapter.Validate).
	Snapshot string
	// OrderColumn orders the snapshot's rows (outbox.order_column); "": the table's order.
	OrderColumn string
}

// DefaultChunkRows and DefaultChunkBytes are the chunk caps a zero Config.ChunkRows and
// Config.ChunkBytes stand for.
const (
	DefaultChunkRows  = 1024
	DefaultChunkBytes = 1 << 20
)

func (c Config) withDefaults() Config {
	if c.HeartbeatPeriod <= 0 {
		c.HeartbeatPeriod = 10 * time.Second
	}
	if c.IdleProgressInterval <= 0 {
		c.IdleProgressInterval = time.Second
	}
	if c.ReconnectTimeout <= 0 {
		c.ReconnectTimeout = time.Minute
	}
	if c.ChunkRows == 0 {
		c.ChunkRows = DefaultChunkRows
	}
	if c.ChunkBytes == 0 {
		c.ChunkBytes = DefaultChunkBytes
	}
	return c
}

// dsn is a parsed Config.DSN.
type dsn struct {
	User, Password string
	Net            string // "tcp" or "unix"
	Addr           string // host:port, or the socket path
	DB             string
	TLS            string // "", "true", "skip-verify"
	Timeout        time.Duration
}

// Redacted renders the DSN in URL form without its password, for logs and errors.
func (d dsn) Redacted() string {
	u := url.URL{Scheme: "mysql", Path: "/" + d.DB}
	if d.User != "" {
		u.User = url.User(d.User)
		if d.Password != "" {
			u.User = url.UserPassword(d.User, "xxxxx")
		}
	}
	q := url.Values{}
	if d.Net == "unix" {
		q.Set("socket", d.Addr)
	} else {
		u.Host = d.Addr
	}
	if d.TLS != "" {
		q.Set("tls", d.TLS)
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// RedactDSN renders a source.dsn for logs and errors through the parser the source connects
// with (parseDSN): URL form, with the password replaced by xxxxx. An error (never containing the
// password) means the DSN does not parse: print nothing of it.
func RedactDSN(s string) (string, error) {
	d, err := parseDSN(s)
	if err != nil {
		return "", err
	}
	return d.Redacted(), nil
}

// DSNPassword returns the password of a source.dsn as the source uses it (URL form: decoded)
// and as it is written in s (URL form: %XX escapes as given), for scrubbing error texts. ok is
// false when s does not parse or has no password.
func DSNPassword(s string) (decoded, written string, ok bool) {
	d, err := parseDSN(s)
	if err != nil || d.Password == "" {
		return "", "", false
	}
	written = d.Password
	s = strings.TrimSpace(s)
	if i := strings.Index(s, "://"); i > 0 && strings.Trim(strings.ToLower(s[:i]), "abcdefghijklmnopqrstuvwxyz+") == "" {
		// url.Parse accepted it, so the authority holds no raw '/', '?' or '#'.
		auth := s[i+3:]
		if j := strings.IndexAny(auth, "/?#"); j >= 0 {
			auth = auth[:j]
		}
		if at := strings.LastIndexByte(auth, '@'); at >= 0 {
			if _, pw, found := strings.Cut(auth[:at], ":"); found {
				written = pw
			}
		}
	}
	return d.Password, written, true
}

// Host returns the host part of a TCP address (for TLS server name checks).
func (d dsn) Host() string {
	h, _, err := net.SplitHostPort(d.Addr)
	if err != nil {
		return d.Addr
	}
	return h
}

// TLSConfig returns the TLS configuration the DSN asks for, or nil.
func (d dsn) TLSConfig() *tls.Config {
	switch d.TLS {
	case "true":
		return &tls.Config{ServerName: d.Host(), MinVersion: tls.VersionTLS12}
	case "skip-verify":
		return &tls.Config{InsecureSkipVerify: true} //nolint:gosec // asked for by tls=skip-verify
	}
	return nil
}

// parseDSN parses a DSN in URL form (mysql://, mariadb://) or go-sql-driver form. Its errors
// never contain the password.
func parseDSN(s string) (dsn, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return dsn{}, fmt.Errorf("source.dsn is empty: give mysql://user:pass@host:3306/db")
	}
	var (
		d      dsn
		params url.Values
		err    error
	)
	if i := strings.Index(s, "://"); i > 0 && strings.Trim(strings.ToLower(s[:i]), "abcdefghijklmnopqrstuvwxyz+") == "" {
		d, params, err = parseURLDSN(s)
	} else {
		d, params, err = parseDriverDSN(s)
	}
	if err != nil {
		return dsn{}, err
	}
	d.Timeout = 10 * time.Second
	for k, vs := range params {
		v := vs[len(vs)-1]
		switch k {
		case "tls":
			switch strings.ToLower(v) {
			case "true", "1", "required":
				d.TLS = "true"
			case "skip-verify":
				d.TLS = "skip-verify"
			case "false", "0", "disabled", "":
				d.TLS = ""
			default:
				return dsn{}, fmt.Errorf("source.dsn: tls=%q: use true, false or skip-verify", v)
			}
		case "timeout":
			if d.Timeout, err = time.ParseDuration(v); err != nil || d.Timeout <= 0 {
				return dsn{}, fmt.Errorf("source.dsn: timeout=%q is not a positive duration such as 10s", v)
			}
		case "socket":
			d.Net, d.Addr = "unix", v
		default:
			return dsn{}, fmt.Errorf("source.dsn: unsupported parameter %q (supported: tls, timeout, socket)", k)
		}
	}
	if d.Addr == "" {
		d.Net, d.Addr = "tcp", "127.0.0.1:3306"
	}
	if d.Net == "tcp" {
		if _, _, err := net.SplitHostPort(d.Addr); err != nil {
			d.Addr = net.JoinHostPort(strings.Trim(d.Addr, "[]"), "3306")
		}
	}
	return d, nil
}

func parseURLDSN(s string) (dsn, url.Values, error) {
	var d dsn
	scheme := strings.ToLower(s[:strings.Index(s, "://")])
	if scheme != "mysql" && scheme != "mariadb" {
		return d, nil, fmt.Errorf("source.dsn: scheme %q: use mysql:// (or mariadb://)", scheme)
	}
	u, err := url.Parse(s)
	if err != nil {
		// url errors quote the whole input, password included: report without it.
		return d, nil, fmt.Errorf("source.dsn is not a valid URL (mysql://user:pass@host:3306/db); check for unescaped characters in the password (use %%XX escapes)")
	}
	if u.User != nil {
		d.User = u.User.Username()
		d.Password, _ = u.User.Password()
	}
	d.Net, d.Addr = "tcp", u.Host
	d.DB = strings.TrimPrefix(u.Path, "/")
	if strings.Contains(d.DB, "/") {
		return d, nil, fmt.Errorf("source.dsn: database name %q contains '/'", d.DB)
	}
	return d, u.Query(), nil
}

// parseDriverDSN parses [user[:password]@][net[(addr)]]/dbname[?params] like go-sql-driver:
// the password may contain '@' and ':' (the last '@' before the last '/' ends it).
func parseDriverDSN(s string) (dsn, url.Values, error) {
	var d dsn
	slash := strings.LastIndexByte(s, '/')
	if slash < 0 {
		return d, nil, fmt.Errorf("source.dsn: missing '/dbname' (give user:pass@tcp(host:3306)/db or mysql://user:pass@host:3306/db)")
	}
	head, tail := s[:slash], s[slash+1:]
	if at := strings.LastIndexByte(head, '@'); at >= 0 {
		cred := head[:at]
		head = head[at+1:]
		if c := strings.IndexByte(cred, ':'); c >= 0 {
			d.User, d.Password = cred[:c], cred[c+1:]
		} else {
			d.User = cred
		}
	}
	if head != "" {
		open := strings.IndexByte(head, '(')
		if open < 0 {
			d.Net = head
		} else {
			if !strings.HasSuffix(head, ")") {
				return d, nil, fmt.Errorf("source.dsn: unbalanced '(' in the address part")
			}
			d.Net, d.Addr = head[:open], head[open+1:len(head)-1]
		}
		if d.Net != "tcp" && d.Net != "unix" {
			return d, nil, fmt.Errorf("source.dsn: network %q: use tcp(host:port) or unix(/path/to/socket)", d.Net)
		}
		if d.Net == "unix" && d.Addr == "" {
			return d, nil, fmt.Errorf("source.dsn: unix() needs the socket path")
		}
	}
	db, rawq, _ := strings.Cut(tail, "?")
	var err error
	if d.DB, err = url.PathUnescape(db); err != nil {
		return d, nil, fmt.Errorf("source.dsn: database name: %v", err)
	}
	params, err := url.ParseQuery(rawq)
	if err != nil {
		return d, nil, fmt.Errorf("source.dsn: parameters: %v", err)
	}
	return d, params, nil
}

// parseTables splits "db.table" names; a bare name takes defaultDB.
func parseTables(tables []string, defaultDB string) (map[tableKey]string, error) {
	if len(tables) == 0 {
		return nil, fmt.Errorf("source.tables is empty: list the outbox tables as db.table")
	}
	out := make(map[tableKey]string, len(tables))
	for _, t := range tables {
		name := strings.ReplaceAll(strings.TrimSpace(t), "`", "")
		db, tbl, ok := strings.Cut(name, ".")
		if !ok {
			db, tbl = defaultDB, name
			if db == "" {
				return nil, fmt.Errorf("source.tables: %q has no database and the DSN names none: write db.table", t)
			}
		}
		if db == "" || tbl == "" || strings.Contains(tbl, ".") {
			return nil, fmt.Errorf("source.tables: %q is not db.table", t)
		}
		out[tableKey{db, tbl}] = t
	}
	return out, nil
}

// tableKey identifies a table by database and name, as the binlog spells them.
type tableKey struct{ DB, Table string }

func (k tableKey) String() string { return k.DB + "." + k.Table }

// port returns the TCP port of a DSN address (0 for sockets).
func (d dsn) port() uint16 {
	if d.Net != "tcp" {
		return 0
	}
	_, p, _ := net.SplitHostPort(d.Addr)
	n, _ := strconv.ParseUint(p, 10, 16)
	return uint16(n)
}
