package testutil

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// BinEnv names the variable that points the end-to-end tests at a
// directory of prebuilt commands (the SoftRoCE VM's, where nothing is
// compiled); Commands builds none then.
const BinEnv = "RDMAPIPE_BIN"

// Commands returns a directory holding every command of the module
// (./cmd/...), built with -race if race is set. It is BinEnv's directory
// if set; else a directory under os.TempDir named by a hash of the
// module's non-test sources, the toolchain and race, built by the first
// test process that asks for it while the others wait on a file lock, and
// kept for the next run. It is meant for TestMain: with race it sets
// GORACE so that the processes a test starts do not sleep a second as
// they exit.
func Commands(race bool) (string, error) {
	if race {
		// The race runtime sleeps before a process exits (GORACE's
		// atexit_sleep_ms), in every process a test starts.
		if g := os.Getenv("GORACE"); !strings.Contains(g, "atexit_sleep_ms") {
			os.Setenv("GORACE", strings.TrimSpace(g+" atexit_sleep_ms=0"))
		}
	}
	if dir := os.Getenv(BinEnv); dir != "" {
		return dir, nil
	}
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	key, err := buildKey(root, race)
	if err != nil {
		return "", err
	}
	cache := filepath.Join(os.TempDir(), fmt.Sprintf("rdmapipe-test-bin-%d", os.Getuid()))
	if err := os.MkdirAll(cache, 0o700); err != nil {
		return "", err
	}
	lock, err := os.OpenFile(filepath.Join(cache, "lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return "", err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", fmt.Errorf("lock %s: %w", lock.Name(), err)
	}
	dir := filepath.Join(cache, key)
	if _, err := os.Stat(dir); err == nil {
		return dir, nil
	}
	removeOld(cache)
	return dir, build(root, dir, race)
}

// build builds every command of the module at root into dir (with -race
// if race), by way of a temporary directory renamed to dir once the build
// succeeded.
func build(root, dir string, race bool) error {
	tmp, err := os.MkdirTemp(filepath.Dir(dir), "building-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	args := []string{"build", "-buildvcs=false", "-o", tmp + "/"}
	if race {
		args = append(args, "-race")
	}
	cmd := exec.Command("go", append(args, "./cmd/...")...)
	cmd.Dir, cmd.Stdout, cmd.Stderr = root, os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build ./cmd/... in %s: %w", root, err)
	}
	return os.Rename(tmp, dir)
}

// removeOld removes what an earlier run left in cache a day ago or more:
// builds of sources that have changed since, and aborted builds.
func removeOld(cache string) {
	ents, _ := os.ReadDir(cache)
	for _, e := range ents {
		if fi, err := e.Info(); err == nil && e.IsDir() && time.Since(fi.ModTime()) > 24*time.Hour {
			os.RemoveAll(filepath.Join(cache, e.Name()))
		}
	}
}

// moduleRoot returns the directory of the go.mod of the module the test
// runs in.
func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", fmt.Errorf("not in a module: go env GOMOD says %q", mod)
	}
	return filepath.Dir(mod), nil
}

// buildKey returns a hash of what the commands are built from: the race
// flag, the toolchain and its settings, and every file of the module at
// root that a build can read (Go, C and assembly sources outside tests,
// go.mod and go.sum), by name and content.
func buildKey(root string, race bool) (string, error) {
	h := sha256.New()
	fmt.Fprintf(h, "race=%v\n", race)
	env, err := exec.Command("go", "env", "GOVERSION", "GOFLAGS", "GOAMD64", "GOARCH", "CGO_ENABLED", "CC", "CGO_CFLAGS", "CGO_LDFLAGS").Output()
	if err != nil {
		return "", fmt.Errorf("go env: %w", err)
	}
	h.Write(env)
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || exists(filepath.Join(path, "go.mod"))) {
				return filepath.SkipDir
			}
			return nil
		}
		if !buildInput(d.Name()) {
			return nil
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		fmt.Fprintf(h, "\n%s\n", path[len(root):])
		_, err = io.Copy(h, f)
		return err
	})
	if err != nil {
		return "", fmt.Errorf("hashing the sources under %s: %w", root, err)
	}
	return hex.EncodeToString(h.Sum(nil))[:24], nil
}

// buildInput reports whether a file named name can change a build of the
// commands.
func buildInput(name string) bool {
	switch filepath.Ext(name) {
	case ".go":
		return !strings.HasSuffix(name, "_test.go")
	case ".c", ".h", ".s", ".S", ".syso":
		return true
	}
	return name == "go.mod" || name == "go.sum"
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
