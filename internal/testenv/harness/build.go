package harness

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// Package is the import path of the binary the suites run.
const Package = "github.com/outboxd/outboxd/cmd/outboxd"

// BinEnv names another outboxd build for the suites: with it set, Build builds nothing (run the
// tests against e.g. an older commit, to show a new test fails there). test/e2e then leaves out
// config keys an older build may not know (covOnDemandOnly): it is not a cache for this tree's
// build.
const BinEnv = "OUTBOXD_TEST_BIN"

// Build builds outboxd into a new temporary directory, for a TestMain; it returns the binary's
// path and a function that removes what Build made. With OUTBOXD_TEST_BIN set it returns that
// path and builds nothing.
func Build() (bin string, cleanup func(), err error) {
	if b := os.Getenv(BinEnv); b != "" {
		if _, err := os.Stat(b); err != nil {
			return "", nil, fmt.Errorf("%s=%s: %w (unset it to build %s)", BinEnv, b, err, Package)
		}
		return b, func() {}, nil
	}
	dir, err := os.MkdirTemp("", "outboxd-bin-")
	if err != nil {
		return "", nil, err
	}
	bin = filepath.Join(dir, "outboxd")
	if out, err := exec.Command("go", "build", "-o", bin, Package).CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return "", nil, fmt.Errorf("go build %s (run the tests inside the repository, or set %s): %w\n%s", Package, BinEnv, err, out)
	}
	return bin, func() { os.RemoveAll(dir) }, nil
}

// MustBuild is Build for a TestMain: it exits with status 1 when the build fails.
func MustBuild() (bin string, cleanup func()) {
	bin, cleanup, err := Build()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	return bin, cleanup
}
