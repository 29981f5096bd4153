package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outboxd/outboxd/internal/testenv/harness"

	"github.com/jackc/pgx/v5"
)

// Postgres is a private PostgreSQL cluster.
type Postgres struct {
	Dir    string // data directory
	Port   int
	BinDir string
	Extra  []string // extra "-c name=value" settings given at every start

	cmd  *exec.Cmd
	cred *syscall.Credential
	log  *os.File
	done chan struct{}
}

// PostgresBinDir finds the installed server binaries (initdb, postgres), newest version first.
func PostgresBinDir() (string, error) {
	if d := os.Getenv("OUTBOXD_PG_BINDIR"); d != "" {
		return d, nil
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p), nil
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool {
		vi, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[i])))
		vj, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[j])))
		return vi > vj
	})
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	return "", errors.New("no PostgreSQL server binaries found (looked for initdb on PATH and in /usr/lib/postgresql/*/bin): install postgresql")
}

// StartPostgres initialises and starts a private cluster with wal_level=logical in a new temp
// dir. extra are additional server settings ("name=value"). Call Stop (or Destroy) when done.
func StartPostgres(extra ...string) (*Postgres, error) {
	bin, err := PostgresBinDir()
	if err != nil {
		return nil, err
	}
	base, err := os.MkdirTemp("", "outboxd-pg-")
	if err != nil {
		return nil, err
	}
	p := &Postgres{Dir: filepath.Join(base, "data"), BinDir: bin, Extra: extra}
	if os.Geteuid() == 0 {
		// initdb refuses to run as root: run the server as the postgres user.
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("running as root needs the postgres OS user (from the postgresql package): %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		p.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(base, uid, gid); err != nil {
			return nil, err
		}
	}
	init := exec.Command(filepath.Join(bin, "initdb"), "-D", p.Dir, "-U", "postgres", "--auth=trust",
		"--encoding=UTF8", "--locale=C", "--no-sync")
	init.SysProcAttr = &syscall.SysProcAttr{Credential: p.cred}
	if out, err := init.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("initdb: %w\n%s", err, out)
	}
	if p.Port, err = FreePort(); err != nil {
		return nil, err
	}
	if err := p.Start(); err != nil {
		return nil, err
	}
	return p, nil
}

// Start starts the server (again) on its port and waits until it accepts connections.
func (p *Postgres) Start() error {
	args := []string{"-D", p.Dir, "-p", strconv.Itoa(p.Port), "-k", filepath.Dir(p.Dir),
		"-c", "listen_addresses=127.0.0.1", "-c", "wal_level=logical",
		"-c", "max_replication_slots=20", "-c", "max_wal_senders=20",
		"-c", "fsync=off", "-c", "full_page_writes=off", "-c", "synchronous_commit=on",
		"-c", "max_connections=100", "-c", "shared_buffers=128MB"}
	for _, e := range p.Extra {
		args = append(args, "-c", e)
	}
	logf, err := os.OpenFile(filepath.Join(filepath.Dir(p.Dir), "server.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(filepath.Join(p.BinDir, "postgres"), args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: p.cred, Setpgid: true}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start postgres: %w", err)
	}
	p.cmd, p.log, p.done = cmd, logf, make(chan struct{})
	go func(done chan struct{}) { cmd.Wait(); close(done) }(p.done)
	err = harness.Until(60*time.Second, 100*time.Millisecond, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		c, err := pgx.Connect(ctx, p.DSN("postgres"))
		cancel()
		if err == nil {
			c.Close(context.Background())
			return nil
		}
		select {
		case <-p.done:
			return harness.Final(errors.New("postgres exited during start"))
		default:
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("postgres did not accept connections: %w; log:\n%s", err, p.Log())
	}
	return nil
}

// Log returns the server log so far.
func (p *Postgres) Log() string {
	b, _ := os.ReadFile(filepath.Join(filepath.Dir(p.Dir), "server.log"))
	return string(b)
}

// DSN returns a connection string for database db as superuser postgres.
func (p *Postgres) DSN(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", p.Port, db)
}

// Kill sends SIGKILL to the postmaster and waits for it to exit (crash simulation).
func (p *Postgres) Kill() {
	if p.cmd == nil {
		return
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
	p.log.Close()
	p.cmd = nil
}

// Stop shuts the server down with a fast shutdown and waits.
func (p *Postgres) Stop() {
	if p.cmd == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
	p.log.Close()
	p.cmd = nil
}

// Destroy stops the server and removes its directory.
func (p *Postgres) Destroy() {
	p.Stop()
	os.RemoveAll(filepath.Dir(p.Dir))
}

// Exec runs SQL statements on database db.
func (p *Postgres) Exec(ctx context.Context, db string, sql ...string) error {
	c, err := pgx.Connect(ctx, p.DSN(db))
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	for _, s := range sql {
		if _, err := c.Exec(ctx, s); err != nil {
			return fmt.Errorf("%s: %w", strings.SplitN(s, "\n", 2)[0], err)
		}
	}
	return nil
}

// NewPostgres starts a private cluster for a test, creates database "app", and removes it all at
// the end of the test. It fails (CI) or skips (elsewhere) when the server cannot start.
func NewPostgres(t testing.TB, extra ...string) *Postgres {
	t.Helper()
	p, err := StartPostgres(extra...)
	if err != nil {
		Unavailable(t, "private PostgreSQL", err)
	}
	t.Cleanup(p.Destroy)
	if err := p.Exec(context.Background(), "postgres", "CREATE DATABASE app"); err != nil {
		t.Fatalf("create database app: %v", err)
	}
	return p
}

// OutboxDDL is the outbox table used by tests and the demo (Debezium's column names).
const OutboxDDL = `CREATE TABLE public.outbox (
	id uuid PRIMARY KEY,
	aggregatetype text,
	aggregateid text,
	type text,
	payload jsonb,
	created_at timestamptz NOT NULL DEFAULT now()
)`
