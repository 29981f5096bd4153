package testenv

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// mavenLib is a lib dir that Maven builds from an embedded pom (maven-dependency-plugin into
// ${kroot}), cached per machine and pom content under the user cache dir
// (~/.cache/outboxd/<name>-<pomhash>); Maven's own ~/.m2 caches the downloads.
type mavenLib struct {
	name    string             // "kafka-lib": cache dir and lock file prefix
	pom     []byte             // the embedded pom.xml
	pomPath string             // its path in the repo, for messages
	what    string             // "Apache Kafka 4.4.0", for messages
	ready   func(string) error // whether a dir holds a complete build
}

// dir returns the built lib dir, building it when this machine has none for the current pom.
// Safe for concurrent test processes: the build runs under a lock file and lands by an atomic
// rename.
func (m mavenLib) dir() (string, error) {
	if _, err := exec.LookPath("java"); err != nil {
		return "", fmt.Errorf("java not found on PATH: install Java 17 (bash .ci/deps installs openjdk-17-jre-headless): %w", err)
	}
	cache, err := os.UserCacheDir()
	if err != nil { // no HOME nor XDG_CACHE_HOME: a per-machine dir all the same
		cache = filepath.Join(os.TempDir(), "outboxd-cache")
	}
	base := filepath.Join(cache, "outboxd")
	if err := os.MkdirAll(base, 0o755); err != nil {
		return "", fmt.Errorf("create the %s cache dir: %w", m.name, err)
	}
	sum := sha256.Sum256(m.pom)
	final := filepath.Join(base, m.name+"-"+hex.EncodeToString(sum[:])[:16])
	if m.ready(final) == nil {
		return final, nil
	}
	lock, err := os.OpenFile(filepath.Join(base, m.name+".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", fmt.Errorf("open the %s lock file: %w", m.name, err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", fmt.Errorf("lock the %s cache: %w", m.name, err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	if m.ready(final) == nil { // another process built it while we waited
		return final, nil
	}
	if _, err := exec.LookPath("mvn"); err != nil {
		return "", fmt.Errorf("mvn not found on PATH, needed once to fetch %s from Maven Central: install maven (bash .ci/deps does): %w", m.what, err)
	}
	tmp, err := os.MkdirTemp(base, m.name+"-build-")
	if err != nil {
		return "", fmt.Errorf("create a %s build dir: %w", m.name, err)
	}
	defer os.RemoveAll(tmp)
	if err := os.WriteFile(filepath.Join(tmp, "pom.xml"), m.pom, 0o644); err != nil {
		return "", err
	}
	root := filepath.Join(tmp, "root")
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "mvn", "-q", "-B", "-f", filepath.Join(tmp, "pom.xml"), "package", "-Dkroot="+root)
	cmd.Dir = tmp
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("mvn package of the %s (%s) failed: check that Maven Central is reachable (~/.m2/settings.xml): %w\n%s", m.name, m.pomPath, err, tail(string(out), 60))
	}
	if err := m.ready(root); err != nil {
		return "", fmt.Errorf("the %s build left an incomplete dir (%s changed?): %w", m.name, m.pomPath, err)
	}
	if err := os.Rename(root, final); err != nil {
		return "", fmt.Errorf("move the built %s into place: %w", m.name, err)
	}
	return final, nil
}

// endGroup signals the process group led by pid (SIGCONT first: a paused JVM cannot handle
// SIGTERM) and waits for done; after grace (0 = no limit) it sends SIGKILL.
func endGroup(pid int, done <-chan struct{}, sig syscall.Signal, grace time.Duration) {
	_ = syscall.Kill(-pid, syscall.SIGCONT)
	_ = syscall.Kill(-pid, sig)
	if grace <= 0 {
		<-done
		return
	}
	select {
	case <-done:
	case <-time.After(grace):
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		<-done
	}
}
