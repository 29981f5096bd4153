// Package harness runs outboxd the way the end-to-end suite (test/e2e) and the chaos suite
// (internal/chaos) do: it builds the binary once per test process, starts `outboxd` processes
// and signals them, captures their output, and waits on conditions. It is the one wait helper
// of the tests and of internal/testenv's own start-up waits.
//
// It lives under internal/testenv (not test/) because internal/testenv itself uses its waits, and
// an internal package keeps test plumbing out of the module's importable API. It imports no
// outboxd package (internal/testenv imports it, not the other way round).
//
// Waiting: a test waits for a condition (WaitFor, Until), never for a fixed time. A negative
// assertion ("nothing was confirmed") first waits for an event that proves the system had the
// chance to act (a later keepalive, a log line, a counter), then checks. A fixed sleep is left only
// where it paces a load generator or is the length of a fault a scenario injects (Hold), and it
// says so.
package harness
