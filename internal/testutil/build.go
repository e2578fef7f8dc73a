package testutil

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
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
// if set; else a directory under os.TempDir named by a hash of what goes
// into the build (buildKey), built by the first test process that asks
// for it while the others wait on a file lock, and kept for the next run.
// It is meant for TestMain: with race it sets GORACE so that the
// processes a test starts do not sleep a second as they exit.
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

// buildKey returns a hash of what the commands are built from: race, the
// toolchain and its settings, go.mod and go.sum, and every file of this
// module that goes into them (go list -deps ./cmd/...), by name and
// content.
func buildKey(root string, race bool) (string, error) {
	h := sha256.New()
	fmt.Fprintf(h, "race=%v\n", race)
	env, err := exec.Command("go", "env", "GOVERSION", "GOFLAGS", "GOAMD64", "GOARCH", "CGO_ENABLED", "CC", "CGO_CFLAGS", "CGO_LDFLAGS").Output()
	if err != nil {
		return "", fmt.Errorf("go env: %w", err)
	}
	h.Write(env)
	args := []string{"list", "-deps", "-f", inputsTemplate}
	if race {
		args = append(args, "-race")
	}
	list := exec.Command("go", append(args, "./cmd/...")...)
	list.Dir, list.Stderr = root, os.Stderr
	out, err := list.Output()
	if err != nil {
		return "", fmt.Errorf("go list ./cmd/... in %s: %w", root, err)
	}
	files := []string{filepath.Join(root, "go.mod"), filepath.Join(root, "go.sum")}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if f := strings.Split(line, "\t"); len(f) > 1 {
			for _, name := range f[1:] {
				files = append(files, filepath.Join(f[0], name))
			}
		}
	}
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "\n%s %d\n", name[len(root):], len(b))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))[:24], nil
}

// inputsTemplate makes go list print a line for each package of the main
// module: its directory and the files a build reads from it, separated by
// tabs.
const inputsTemplate = "{{if .Module}}{{if .Module.Main}}{{.Dir}}" +
	"{{range .GoFiles}}\t{{.}}{{end}}{{range .CgoFiles}}\t{{.}}{{end}}{{range .CFiles}}\t{{.}}{{end}}" +
	"{{range .HFiles}}\t{{.}}{{end}}{{range .SFiles}}\t{{.}}{{end}}{{range .EmbedFiles}}\t{{.}}{{end}}" +
	"{{range .SysoFiles}}\t{{.}}{{end}}{{end}}{{end}}"
