package mysql

import (
	"context"
	"fmt"
	"os"
	"runtime/pprof"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	gomysql "github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/outboxd/outboxd/internal/testenv"
	"github.com/outboxd/outboxd/source"
)

// TestDrainRate measures how fast the source drains a backlog of OUTBOXD_DRAIN_BENCH single-row
// outbox transactions (e.g. 100000), next to a bare go-mysql BinlogSyncer reading the same
// backlog (default decoding, counting WRITE_ROWS events). Opt-in: it takes a while.
func TestDrainRate(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("OUTBOXD_DRAIN_BENCH"))
	if n <= 0 {
		t.Skip("set OUTBOXD_DRAIN_BENCH=100000 to measure the drain rate")
	}
	m := testenv.NewMariaDB(t, testenv.MariaDBOptions{RowMetadata: true})
	c := db(t, m)
	mustExec(t, c, testenv.MariaDBOutboxDDL("outbox", "BINARY(16)"))
	rows, err := m.Query("", "SELECT @@gtid_binlog_pos")
	if err != nil {
		t.Fatal(err)
	}
	from := rows[0][0]

	began := time.Now()
	const writers = 8
	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			wc, err := client.Connect(fmt.Sprintf("127.0.0.1:%d", m.Port), "root", "", "app")
			if err != nil {
				t.Error(err)
				return
			}
			defer wc.Close()
			st, err := wc.Prepare("INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES (UNHEX(?), 'order', ?, 'created', ?)")
			if err != nil {
				t.Error(err)
				return
			}
			for i := w; i < n; i += writers {
				id := fmt.Sprintf("%032x", i+1)
				if _, err := st.Execute(id, "agg-"+strconv.Itoa(i%1000), fmt.Sprintf(`{"n": %d, "items": [1, 2, 3], "note": "some payload text"}`, i)); err != nil {
					t.Error(err)
					return
				}
			}
		}(w)
	}
	wg.Wait()
	t.Logf("wrote %d single-row transactions in %s", n, time.Since(began).Round(time.Millisecond))

	// Bare go-mysql reader and this source, twice each, alternating; each timed in wall and
	// process CPU (getrusage: the writers are done, the server is another process).
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	bareRead := func() {
		syncer := replication.NewBinlogSyncer(replication.BinlogSyncerConfig{ServerID: serverIDs.Add(1), Flavor: "mariadb",
			Host: "127.0.0.1", Port: uint16(m.Port), User: "root", Logger: testLogger()})
		defer syncer.Close()
		set, _ := gomysql.ParseMariadbGTIDSet(from)
		stream, err := syncer.StartSyncGTID(set)
		if err != nil {
			t.Fatal(err)
		}
		for got := 0; got < n; {
			ev, err := stream.GetEvent(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if re, ok := ev.Event.(*replication.RowsEvent); ok {
				got += len(re.Rows)
			}
		}
	}
	ourRead := func() {
		s := open(t, m, source.Position(from), nil, "app.outbox")
		defer s.Close()
		for got := 0; got < n; {
			tx, err := s.Next(ctx)
			if err != nil {
				t.Fatal(err)
			}
			got += len(tx.Rows)
		}
	}
	if p := os.Getenv("OUTBOXD_DRAIN_PROFILE"); p != "" {
		f, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			t.Fatal(err)
		}
		defer pprof.StopCPUProfile()
	}
	var bare, ours, bareCPU, oursCPU time.Duration
	for range 2 {
		w, c := measureDrain(bareRead)
		bare, bareCPU = bare+w, bareCPU+c
		w, c = measureDrain(ourRead)
		ours, oursCPU = ours+w, oursCPU+c
	}
	t.Logf("CPU per event: bare go-mysql %.2f µs, outboxd source %.2f µs (ratio %.2f)",
		float64(bareCPU.Microseconds())/float64(2*n), float64(oursCPU.Microseconds())/float64(2*n), float64(oursCPU)/float64(bareCPU))
	bare, ours = bare/2, ours/2
	t.Logf("drain of %d single-row transactions: bare go-mysql %s (%.0f tx/s), outboxd source %s (%.0f tx/s)",
		n, bare.Round(time.Millisecond), float64(n)/bare.Seconds(), ours.Round(time.Millisecond), float64(n)/ours.Seconds())
}

// measureDrain runs f and returns its wall time and the process's CPU time meanwhile.
func measureDrain(f func()) (wall, cpu time.Duration) {
	var r0, r1 syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &r0)
	began := time.Now()
	f()
	wall = time.Since(began)
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &r1)
	tv := func(t syscall.Timeval) time.Duration { return time.Duration(t.Nano()) }
	cpu = tv(r1.Utime) - tv(r0.Utime) + tv(r1.Stime) - tv(r0.Stime)
	return wall, cpu
}
