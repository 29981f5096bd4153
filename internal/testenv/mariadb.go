package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outboxd/outboxd/internal/testenv/harness"

	"github.com/go-mysql-org/go-mysql/client"
)

// MariaDBOptions configures a private MariaDB instance.
type MariaDBOptions struct {
	// RowMetadata selects binlog_row_metadata=FULL (column names in every TableMapEvent). When
	// false the server logs MINIMAL metadata and a binlog reader must take column names from
	// information_schema.
	RowMetadata bool
	// ServerID is the server's server_id (and so the server part of its GTIDs); 0 means 1.
	ServerID uint32
	// Extra are additional mariadbd options ("--name=value"), given at every start.
	Extra []string
}

// MariaDB is a private MariaDB server: its own data directory, port, socket and pid file, with
// the binary log on (ROW format, FULL row image, GTID strict mode). The root account has no
// password and may connect over TCP from 127.0.0.1.
type MariaDB struct {
	Dir  string // base directory: data/, server.log, socket, pid file
	Port int

	opts MariaDBOptions
	cmd  *exec.Cmd
	log  *os.File
	done chan struct{}
}

// MariaDBBinaries finds mariadbd and mariadb-install-db (OUTBOXD_MARIADB_BINDIR overrides).
func MariaDBBinaries() (server, installDB string, err error) {
	if d := os.Getenv("OUTBOXD_MARIADB_BINDIR"); d != "" {
		return filepath.Join(d, "mariadbd"), filepath.Join(d, "mariadb-install-db"), nil
	}
	for _, c := range []string{"mariadbd", "/usr/sbin/mariadbd", "/usr/local/sbin/mariadbd"} {
		if p, e := exec.LookPath(c); e == nil {
			server = p
			break
		}
	}
	for _, c := range []string{"mariadb-install-db", "mysql_install_db"} {
		if p, e := exec.LookPath(c); e == nil {
			installDB = p
			break
		}
	}
	if server == "" || installDB == "" {
		return "", "", errors.New("no MariaDB server binaries found (looked for mariadbd and mariadb-install-db): install mariadb-server")
	}
	return server, installDB, nil
}

// StartMariaDB initialises a data directory in a new temp dir (mariadb-install-db), starts
// mariadbd on a free port and creates database "app". Call Destroy when done.
func StartMariaDB(opts MariaDBOptions) (*MariaDB, error) {
	_, installDB, err := MariaDBBinaries()
	if err != nil {
		return nil, err
	}
	if opts.ServerID == 0 {
		opts.ServerID = 1
	}
	base, err := os.MkdirTemp("", "outboxd-mariadb-")
	if err != nil {
		return nil, err
	}
	m := &MariaDB{Dir: base, opts: opts}
	// A private tmpdir: the server names internal temp tables after its pid, and /tmp may be
	// shared with servers in other pid namespaces (parallel CI jobs, containers).
	if err := os.MkdirAll(filepath.Join(base, "tmp"), 0o750); err != nil {
		os.RemoveAll(base)
		return nil, err
	}
	args := []string{"--no-defaults", "--datadir=" + m.dataDir(), "--tmpdir=" + filepath.Join(base, "tmp"),
		"--auth-root-authentication-method=normal", "--skip-test-db", "--skip-name-resolve",
		"--innodb-log-file-size=8M", "--innodb-buffer-pool-size=16M"}
	if os.Geteuid() == 0 {
		// mariadbd refuses to run as root unless told to; the data dir stays root-owned so the
		// test process can remove it.
		args = append(args, "--user=root")
	}
	install := exec.Command(installDB, args...)
	if out, err := install.CombinedOutput(); err != nil {
		os.RemoveAll(base)
		return nil, fmt.Errorf("mariadb-install-db: %w\n%s", err, out)
	}
	if m.Port, err = FreePort(); err != nil {
		os.RemoveAll(base)
		return nil, err
	}
	if err := m.Start(); err != nil {
		m.Destroy()
		return nil, err
	}
	if err := m.Exec(context.Background(), "", "CREATE DATABASE IF NOT EXISTS app"); err != nil {
		m.Destroy()
		return nil, fmt.Errorf("create database app: %w", err)
	}
	return m, nil
}

func (m *MariaDB) dataDir() string { return filepath.Join(m.Dir, "data") }

// Socket is the server's unix socket path.
func (m *MariaDB) Socket() string { return filepath.Join(m.Dir, "mariadb.sock") }

// Start starts the server (again) on its data directory and port and waits until it accepts
// connections.
func (m *MariaDB) Start() error {
	server, _, err := MariaDBBinaries()
	if err != nil {
		return err
	}
	meta := "MINIMAL"
	if m.opts.RowMetadata {
		meta = "FULL"
	}
	args := []string{"--no-defaults",
		"--datadir=" + m.dataDir(),
		"--port=" + strconv.Itoa(m.Port), "--bind-address=127.0.0.1", "--skip-networking=0",
		"--socket=" + m.Socket(), "--pid-file=" + filepath.Join(m.Dir, "mariadb.pid"),
		"--tmpdir=" + filepath.Join(m.Dir, "tmp"), // private: never share internal temp tables via /tmp
		"--log-error=" + filepath.Join(m.Dir, "server.log"),
		"--server-id=" + strconv.FormatUint(uint64(m.opts.ServerID), 10),
		"--log-bin=mysql-bin", "--binlog-format=ROW", "--binlog-row-image=FULL",
		"--binlog-row-metadata=" + meta, "--gtid-strict-mode=1",
		"--character-set-server=utf8mb4", "--collation-server=utf8mb4_general_ci",
		"--skip-name-resolve", "--max-connections=200", "--performance-schema=OFF",
		"--innodb-buffer-pool-size=32M", "--innodb-log-file-size=8M",
		"--innodb-flush-log-at-trx-commit=2", "--sync-binlog=0", "--innodb-doublewrite=0",
		"--innodb-use-native-aio=0",
	}
	if os.Geteuid() == 0 {
		args = append(args, "--user=root")
	}
	args = append(args, m.opts.Extra...)
	if err := os.MkdirAll(filepath.Join(m.Dir, "tmp"), 0o750); err != nil {
		return err
	}
	logf, err := os.OpenFile(filepath.Join(m.Dir, "stdout.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(server, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start mariadbd: %w", err)
	}
	m.cmd, m.log, m.done = cmd, logf, make(chan struct{})
	go func(done chan struct{}) { cmd.Wait(); close(done) }(m.done)
	err = harness.Until(60*time.Second, 50*time.Millisecond, func() error {
		c, err := m.connect("")
		if err == nil {
			c.Close()
			return nil
		}
		select {
		case <-m.done:
			m.log.Close()
			m.cmd = nil
			return harness.Final(errors.New("mariadbd exited during start"))
		default:
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("mariadbd did not accept connections: %w; log:\n%s", err, m.Log())
	}
	return nil
}

func (m *MariaDB) connect(db string) (*client.Conn, error) {
	return client.ConnectWithTimeout(fmt.Sprintf("127.0.0.1:%d", m.Port), "root", "", db, 5*time.Second)
}

// Log returns the server's error log so far.
func (m *MariaDB) Log() string {
	b, _ := os.ReadFile(filepath.Join(m.Dir, "server.log"))
	o, _ := os.ReadFile(filepath.Join(m.Dir, "stdout.log"))
	return string(b) + string(o)
}

// DSN returns a URL-form DSN for database db as root (no password) over TCP.
func (m *MariaDB) DSN(db string) string {
	return fmt.Sprintf("mysql://root@127.0.0.1:%d/%s", m.Port, db)
}

// Exec runs SQL statements, in order, on one connection to database db ("" for none).
func (m *MariaDB) Exec(ctx context.Context, db string, sql ...string) error {
	c, err := m.connect(db)
	if err != nil {
		return err
	}
	defer c.Close()
	for _, s := range sql {
		if err := ctx.Err(); err != nil {
			return err
		}
		if _, err := c.Execute(s); err != nil {
			return fmt.Errorf("%s: %w", strings.SplitN(s, "\n", 2)[0], err)
		}
	}
	return nil
}

// Query runs one query on database db and returns its rows as text (NULL as "NULL").
func (m *MariaDB) Query(db, query string, args ...any) ([][]string, error) {
	c, err := m.connect(db)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	r, err := c.Execute(query, args...)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	var out [][]string
	for i := 0; i < r.RowNumber(); i++ {
		row := make([]string, r.ColumnNumber())
		for j := range row {
			if null, _ := r.IsNull(i, j); null {
				row[j] = "NULL"
				continue
			}
			v, _ := r.GetString(i, j)
			row[j] = strings.Clone(v) // go-mysql's strings alias memory that Close recycles
		}
		out = append(out, row)
	}
	return out, nil
}

// Kill sends SIGKILL to the server and waits for it to exit (crash simulation).
func (m *MariaDB) Kill() {
	if m.cmd == nil {
		return
	}
	_ = syscall.Kill(-m.cmd.Process.Pid, syscall.SIGKILL)
	<-m.done
	m.log.Close()
	m.cmd = nil
}

// Stop shuts the server down cleanly (SIGTERM) and waits; SIGKILL after 30s.
func (m *MariaDB) Stop() {
	if m.cmd == nil {
		return
	}
	_ = m.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-m.done:
	case <-time.After(30 * time.Second):
		_ = syscall.Kill(-m.cmd.Process.Pid, syscall.SIGKILL)
		<-m.done
	}
	m.log.Close()
	m.cmd = nil
}

// Destroy kills the server and removes its directory.
func (m *MariaDB) Destroy() {
	m.Kill()
	os.RemoveAll(m.Dir)
}

// NewMariaDB starts a private MariaDB for a test (database "app" created) and destroys it at
// the end of the test. It fails (CI) or skips (elsewhere) when the server cannot start.
func NewMariaDB(t testing.TB, opts MariaDBOptions) *MariaDB {
	t.Helper()
	m, err := StartMariaDB(opts)
	if err != nil {
		Unavailable(t, "private MariaDB", err)
	}
	t.Cleanup(m.Destroy)
	return m
}

// MariaDBOutboxDDL is the outbox table for MariaDB tests and the demo (Debezium's column names;
// JSON is LONGTEXT with a json_valid check in MariaDB). idType is "BINARY(16)" or "CHAR(36)".
func MariaDBOutboxDDL(table, idType string) string {
	return fmt.Sprintf(`CREATE TABLE %s (
	id %s NOT NULL PRIMARY KEY,
	aggregatetype VARCHAR(255) NOT NULL,
	aggregateid VARCHAR(255) NOT NULL,
	type VARCHAR(255) NOT NULL,
	payload JSON,
	created_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)
) ENGINE=InnoDB`, table, idType)
}
