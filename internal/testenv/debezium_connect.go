package testenv

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unicode/utf16"

	"github.com/outboxd/outboxd/internal/testenv/harness"
)

// ConnectOpts configures a Kafka Connect standalone worker running one connector.
type ConnectOpts struct {
	// Bootstrap is the Kafka bootstrap address (host:port[,host:port]).
	Bootstrap string
	// Connector is the connector config (it must have "name" and "connector.class"), e.g.
	// DebeziumPostgresOutbox(...). ConnectDirVar in a value is replaced by the Connect's Dir.
	Connector map[string]string
	// More are further connectors on the same worker (each with its own name; connector-level
	// key.converter / value.converter overrides give each its own encoding). StartConnect waits
	// for all of them to stream.
	More []map[string]string
	// Worker overrides (or adds) worker.properties entries, e.g. "producer.linger.ms".
	Worker map[string]string
	// JVM replaces the default heap and GC flags (-Xms256m -Xmx1g -XX:+UseG1GC).
	JVM []string
	// Dir is the work dir (worker.properties, offsets, connect.log); empty: a new temp dir,
	// removed by Destroy. A given Dir is kept (reuse it to restart from the stored offsets).
	Dir string
	// ReadyTimeout bounds the wait for the connector to stream; 0 means 3 minutes.
	ReadyTimeout time.Duration
}

// Connect is a running Kafka Connect standalone worker (one JVM) with its connectors.
type Connect struct {
	Dir      string        // worker.properties, connector*.properties, connect.offsets, connect.log
	RESTPort int           // REST listener on 127.0.0.1
	Name     string        // the (first) connector's name
	Names    []string      // every connector's name, Name first
	Started  time.Duration // from exec to the connector streaming

	ownDir bool
	mu     sync.Mutex
	cmd    *exec.Cmd
	done   chan struct{}
	logf   *os.File
}

// StartConnect writes worker.properties (StringConverter key and value, offsets in Dir flushed
// every second, plugin.path = DebeziumLibDir's plugins/, a free REST port) and the connector's
// properties, starts org.apache.kafka.connect.cli.ConnectStandalone, and waits until the
// connector and its task are RUNNING (REST GET /connectors/<name>/status) and Debezium has logged
// "Starting streaming" (the snapshot, none with no_data, is over: changes committed from now on
// are delivered). A FAILED connector or task, or a JVM that exits, is an error carrying the
// trace and the log tail. It needs no testing.T (the bench calls it); call Destroy when done.
func StartConnect(opts ConnectOpts) (*Connect, error) {
	return retryPortTaken(func() (*Connect, error) { return startConnect(opts) })
}

func startConnect(opts ConnectOpts) (*Connect, error) {
	name := opts.Connector["name"]
	names := []string{name}
	for _, cc := range append([]map[string]string{opts.Connector}, opts.More...) {
		if cc["name"] == "" || cc["connector.class"] == "" {
			return nil, errors.New("ConnectOpts.Connector and each of More need name and connector.class")
		}
	}
	for _, cc := range opts.More {
		names = append(names, cc["name"])
	}
	if opts.Bootstrap == "" {
		return nil, errors.New("ConnectOpts.Bootstrap is empty: give the Kafka bootstrap address")
	}
	lib, err := DebeziumLibDir()
	if err != nil {
		return nil, err
	}
	c := &Connect{Dir: opts.Dir, Name: name, Names: names}
	if c.Dir == "" {
		if c.Dir, err = os.MkdirTemp("", "outboxd-connect-"); err != nil {
			return nil, err
		}
		c.ownDir = true
	} else if err := os.MkdirAll(c.Dir, 0o755); err != nil {
		return nil, err
	}
	fail := func(err error) (*Connect, error) {
		if c.ownDir {
			os.RemoveAll(c.Dir)
		}
		return nil, err
	}
	if c.RESTPort, err = FreePort(); err != nil {
		return fail(err)
	}
	worker := map[string]string{
		"bootstrap.servers":            opts.Bootstrap,
		"key.converter":                StringConverter,
		"value.converter":              StringConverter,
		"offset.storage.file.filename": filepath.Join(c.Dir, "connect.offsets"),
		// Debezium confirms the PostgreSQL slot (and its MariaDB offsets) only after an offset
		// commit; the default is 60 s.
		"offset.flush.interval.ms": "1000",
		"plugin.path":              filepath.Join(lib, "plugins"),
		"plugin.discovery":         "service_load",
		"listeners":                fmt.Sprintf("http://127.0.0.1:%d", c.RESTPort),
	}
	merge(worker, opts.Worker)
	files := map[string]string{
		"worker.properties":    properties(worker, c.Dir),
		"connector.properties": properties(opts.Connector, c.Dir),
		"log4j2.properties":    connectLog4j,
	}
	connFiles := []string{filepath.Join(c.Dir, "connector.properties")}
	for i, cc := range opts.More {
		f := fmt.Sprintf("connector%d.properties", i+2)
		files[f] = properties(cc, c.Dir)
		connFiles = append(connFiles, filepath.Join(c.Dir, f))
	}
	for f, body := range files {
		if err := os.WriteFile(filepath.Join(c.Dir, f), []byte(body), 0o644); err != nil {
			return fail(err)
		}
	}
	jvm := opts.JVM
	if len(jvm) == 0 {
		jvm = []string{"-Xms256m", "-Xmx1g", "-XX:+UseG1GC"}
	}
	args := append([]string{"-Dlog4j2.configurationFile=" + filepath.Join(c.Dir, "log4j2.properties"),
		"-Dkafka.logs.dir=" + c.Dir}, jvm...)
	args = append(args, "-cp", filepath.Join(lib, "lib")+"/*", "org.apache.kafka.connect.cli.ConnectStandalone",
		filepath.Join(c.Dir, "worker.properties"))
	args = append(args, connFiles...)
	logf, err := os.OpenFile(filepath.Join(c.Dir, "connect.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fail(err)
	}
	cmd := exec.Command("java", args...)
	cmd.Dir = c.Dir
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fail(fmt.Errorf("start Kafka Connect (java org.apache.kafka.connect.cli.ConnectStandalone): %w", err))
	}
	c.cmd, c.logf, c.done = cmd, logf, make(chan struct{})
	go func() { cmd.Wait(); close(c.done) }()
	within := opts.ReadyTimeout
	if within == 0 {
		within = 3 * time.Minute
	}
	if err := c.waitStreaming(within); err != nil {
		c.Kill()
		return fail(err)
	}
	c.Started = time.Since(t0)
	return c, nil
}

// connectorStatus is the body of GET /connectors/<name>/status.
type connectorStatus struct {
	Connector struct {
		State string `json:"state"`
		Trace string `json:"trace"`
	} `json:"connector"`
	Tasks []struct {
		ID    int    `json:"id"`
		State string `json:"state"`
		Trace string `json:"trace"`
	} `json:"tasks"`
}

// Status asks the REST API for the (first) connector's and its first task's state ("" while
// unknown).
func (c *Connect) Status() (connector, task, trace string, err error) { return c.StatusOf(c.Name) }

// StatusOf is Status for the connector called name.
func (c *Connect) StatusOf(name string) (connector, task, trace string, err error) {
	cl := http.Client{Timeout: 5 * time.Second}
	resp, err := cl.Get(fmt.Sprintf("http://127.0.0.1:%d/connectors/%s/status", c.RESTPort, name))
	if err != nil {
		return "", "", "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", "", "", fmt.Errorf("GET /connectors/%s/status: %s", name, resp.Status)
	}
	var st connectorStatus
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return "", "", "", fmt.Errorf("decode the connector status: %w", err)
	}
	trace = st.Connector.Trace
	if len(st.Tasks) > 0 {
		task = st.Tasks[0].State
		if st.Tasks[0].Trace != "" {
			trace = st.Tasks[0].Trace
		}
	}
	return st.Connector.State, task, trace, nil
}

// streamingMark is what Debezium's ChangeEventSourceCoordinator logs when the snapshot phase is
// over and streaming begins.
const streamingMark = "Starting streaming"

func (c *Connect) waitStreaming(within time.Duration) error {
	err := harness.Until(within, 200*time.Millisecond, func() error {
		select {
		case <-c.done:
			return harness.Final(fmt.Errorf("kafka Connect exited during start; log:\n%s", c.Log()))
		default:
		}
		for _, name := range c.Names {
			conn, task, trace, err := c.StatusOf(name)
			switch {
			case err != nil:
				return err
			case conn == "FAILED" || task == "FAILED":
				return harness.Final(fmt.Errorf("connector %s failed to start (connector %s, task %s): %s\nlog:\n%s", name, conn, task, trace, c.Log()))
			case conn != "RUNNING" || task != "RUNNING":
				return fmt.Errorf("connector %s: %q, task %q", name, conn, task)
			}
		}
		// One "Starting streaming" line per connector (each has its own coordinator).
		if n := strings.Count(c.fullLog(), " INFO "+streamingMark+" ("); n < len(c.Names) {
			return fmt.Errorf("tasks RUNNING, %d of %d connectors streaming", n, len(c.Names))
		}
		return nil
	})
	var te *harness.TimeoutError
	if errors.As(err, &te) {
		return fmt.Errorf("connectors %v not streaming within %v (%v); log:\n%s", c.Names, within, te.Last, c.Log())
	}
	return err
}

// Pid is the JVM's process id (0 when not running), e.g. for CPU and RSS readings.
func (c *Connect) Pid() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cmd == nil {
		return 0
	}
	return c.cmd.Process.Pid
}

// Stop shuts the worker down with SIGTERM (Connect commits offsets) and waits; after 60 s it
// kills it.
func (c *Connect) Stop() { c.end(syscall.SIGTERM, 60*time.Second) }

// Kill sends SIGKILL and waits for the JVM to exit.
func (c *Connect) Kill() { c.end(syscall.SIGKILL, 0) }

func (c *Connect) end(sig syscall.Signal, grace time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cmd == nil {
		return
	}
	endGroup(c.cmd.Process.Pid, c.done, sig, grace)
	c.logf.Close()
	c.cmd = nil
}

// Destroy stops the worker and removes its Dir when StartConnect made it.
func (c *Connect) Destroy() {
	c.Stop()
	if c.ownDir {
		os.RemoveAll(c.Dir)
	}
}

func (c *Connect) fullLog() string {
	b, _ := os.ReadFile(filepath.Join(c.Dir, "connect.log"))
	return string(b)
}

// Log returns the last 200 lines of the worker's log.
func (c *Connect) Log() string { return tail(c.fullLog(), 200) }

// NewConnect starts a Connect worker for a test and destroys it at the end (logging its log when
// the test failed). With CI=true a worker that cannot start fails the test; elsewhere a missing
// java or mvn skips it, and a connector that fails to start fails it.
func NewConnect(t testing.TB, opts ConnectOpts) *Connect {
	t.Helper()
	c, err := StartConnect(opts)
	if err != nil {
		if _, lerr := DebeziumLibDir(); lerr != nil {
			Unavailable(t, "Kafka Connect "+ApacheKafkaVersion+" with Debezium "+DebeziumVersion, err)
		}
		t.Fatalf("start Kafka Connect with connector %s: %v", opts.Connector["name"], err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("Kafka Connect log (%s):\n%s", c.Dir, c.Log())
		}
		c.Destroy()
	})
	return c
}

// properties renders a Java properties file (keys sorted), ConnectDirVar replaced by dir.
// Java reads properties files as ISO-8859-1: everything else is written as \uXXXX escapes.
func properties(kv map[string]string, dir string) string {
	keys := make([]string, 0, len(kv))
	for k := range kv {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(propEscape(k, true))
		b.WriteByte('=')
		b.WriteString(propEscape(strings.ReplaceAll(kv[k], ConnectDirVar, dir), false))
		b.WriteByte('\n')
	}
	return b.String()
}

func propEscape(s string, key bool) string {
	var b strings.Builder
	for i, r := range s {
		switch {
		case r == '\\':
			b.WriteString(`\\`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case (key || i == 0) && (r == ' ' || r == '=' || r == ':' || r == '#' || r == '!'):
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20 || r > 0x7e:
			for _, u := range utf16.Encode([]rune{r}) {
				fmt.Fprintf(&b, `\u%04x`, u)
			}
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// connectLog4j logs INFO to stdout (connect.log), config dumps and plugin scanning at WARN.
const connectLog4j = `status = warn
appender.out.type = Console
appender.out.name = STDOUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = info
rootLogger.appenderRef.out.ref = STDOUT
logger.cfg.name = org.apache.kafka.common.config.AbstractConfig
logger.cfg.level = warn
logger.reflections.name = org.reflections
logger.reflections.level = error
logger.isolation.name = org.apache.kafka.connect.runtime.isolation
logger.isolation.level = warn
`
