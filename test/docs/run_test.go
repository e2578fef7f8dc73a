package docs

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rdmapipe/rdmapipe/internal/testutil"
)

// A lab runs documentation lines as if on several hosts (node1, node2,
// ...), all on this one: each host has a directory of its own (its HOME
// and working directory) and a port its rdmarecv listens on; in a line,
// nodeN becomes 127.0.0.1:PORT, and every command runs over TCP.
type lab struct {
	t     *testing.T
	dirs  map[string]string
	ports map[string]int
}

// newLab returns a lab with the hosts node1 to nodeN.
func newLab(t *testing.T, n int) *lab {
	l := &lab{t: t, dirs: map[string]string{}, ports: map[string]int{}}
	for i := 1; i <= n; i++ {
		h := "node" + strconv.Itoa(i)
		l.dirs[h] = filepath.Join(t.TempDir(), h)
		if err := os.Mkdir(l.dirs[h], 0o700); err != nil {
			t.Fatal(err)
		}
		l.ports[h] = testutil.FreePort(t)
	}
	return l
}

var (
	nodeName = regexp.MustCompile(`\bnode[0-9]+\b`)
	comment  = regexp.MustCompile(`\s+#\s.*$`)
)

// docLine returns the line of file (from the repository's root) that holds
// text, without its prompt and comment: the test runs what the
// documentation says.
func docLine(t *testing.T, file, text string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("../..", file))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if strings.Contains(line, text) {
			return comment.ReplaceAllString(prompt.ReplaceAllString(strings.TrimSpace(line), ""), "")
		}
	}
	t.Fatalf("%s no longer holds %q", file, text)
	return ""
}

// A run is a documentation line running on a host of a lab.
type run struct {
	line   string
	cmd    *exec.Cmd
	stderr bytes.Buffer
	done   chan struct{}
	code   int
}

// start runs line on host h with bash, in its own process group. The
// commands replace the shell (or the subshell of their pipeline stage), so
// that a signal to the run reaches them as it would from a terminal.
func (l *lab) start(h, line string) *run {
	l.t.Helper()
	script := fmt.Sprintf(`rdmasend() { exec %[1]q/rdmasend --transport tcp "$@"; }
rdmarecv() { exec %[1]q/rdmarecv --transport tcp -P %[2]d "$@"; }
%[3]s`, bin, l.ports[h], nodeName.ReplaceAllStringFunc(line, func(n string) string {
		return fmt.Sprintf("127.0.0.1:%d", l.ports[n])
	}))
	r := &run{line: h + "$ " + line, cmd: exec.Command("bash", "-c", script), done: make(chan struct{})}
	r.cmd.Dir = l.dirs[h]
	r.cmd.Env = append(os.Environ(), "HOME="+l.dirs[h])
	r.cmd.Stderr = &r.stderr
	r.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := r.cmd.Start(); err != nil {
		l.t.Fatalf("%s: %v", r.line, err)
	}
	go func() {
		err := r.cmd.Wait()
		if ee, ok := err.(*exec.ExitError); ok {
			r.code = ee.ExitCode()
		} else if err != nil {
			r.code = -1
		}
		close(r.done)
	}()
	l.t.Cleanup(func() { r.signal(syscall.SIGKILL); <-r.done })
	return r
}

// signal sends sig to the run's process group.
func (r *run) signal(sig syscall.Signal) {
	syscall.Kill(-r.cmd.Process.Pid, sig)
}

// wait waits for the run to end and fails t unless it exited 0.
func (r *run) wait(t *testing.T) {
	t.Helper()
	testutil.WaitFor(t, time.Minute, r.line+" to end", func() bool {
		select {
		case <-r.done:
			return true
		default:
			return false
		}
	})
	if r.code != 0 {
		t.Fatalf("%s: exit %d:\n%s", r.line, r.code, r.stderr.String())
	}
}

// listening waits until host h's rdmarecv listens.
func (l *lab) listening(h string) {
	l.t.Helper()
	testutil.WaitFor(l.t, time.Minute, h+"'s rdmarecv to listen", func() bool { return listens(l.ports[h]) })
}

// listens reports whether a TCP socket of this host listens on port.
func listens(port int) bool {
	want := fmt.Sprintf(":%04X ", port)
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		data, _ := os.ReadFile(f)
		for _, line := range strings.Split(string(data), "\n") {
			fields := strings.Fields(line)
			if len(fields) > 3 && strings.HasSuffix(fields[1]+" ", want) && fields[3] == "0A" {
				return true
			}
		}
	}
	return false
}

// file writes n random bytes to name on host h and returns them.
func (l *lab) file(h, name string, n int) []byte {
	l.t.Helper()
	data := make([]byte, n)
	rand.Read(data)
	if err := os.WriteFile(filepath.Join(l.dirs[h], name), data, 0o644); err != nil {
		l.t.Fatal(err)
	}
	return data
}

// same fails t unless name on host h holds want.
func (l *lab) same(h, name string, want []byte) {
	l.t.Helper()
	got, err := os.ReadFile(filepath.Join(l.dirs[h], name))
	if err != nil {
		l.t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		l.t.Fatalf("%s:%s: %d bytes, not the %d sent", h, name, len(got), len(want))
	}
}

// TestReadmeStream runs the README's first example: a file from node1 to
// node2's rdmarecv, byte for byte.
func TestReadmeStream(t *testing.T) {
	l := newLab(t, 2)
	data := l.file("node1", "backup.tar", 3<<20+17)
	r := l.start("node2", docLine(t, "README.md", "node2$ rdmarecv > backup.tar"))
	l.listening("node2")
	l.start("node1", docLine(t, "README.md", "node1$ rdmasend node2 < backup.tar")).wait(t)
	r.wait(t)
	l.same("node2", "backup.tar", data)
}

// TestReadmeRelay runs the README's relay line on node2, between a sender
// on node1 and a receiver on node3.
func TestReadmeRelay(t *testing.T) {
	l := newLab(t, 3)
	data := l.file("node1", "backup.tar", 2<<20+5)
	last := l.start("node3", docLine(t, "README.md", "node2$ rdmarecv > backup.tar"))
	l.listening("node3")
	relay := l.start("node2", docLine(t, "README.md", "rdmarecv | rdmasend node3"))
	l.listening("node2")
	l.start("node1", docLine(t, "README.md", "node1$ rdmasend node2 < backup.tar")).wait(t)
	relay.wait(t)
	last.wait(t)
	l.same("node3", "backup.tar", data)
}

// TestReadmeKey makes the key as the README says, and streams with it,
// encrypted: the data arrives whole, and neither side warns about the key.
func TestReadmeKey(t *testing.T) {
	l := newLab(t, 2)
	l.start("node1", docLine(t, "README.md", "head -c 32 /dev/urandom | base64 > ~/.rdmapipe.key")).wait(t)
	key, err := os.ReadFile(filepath.Join(l.dirs["node1"], ".rdmapipe.key"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(l.dirs["node2"], ".rdmapipe.key"), key, 0o600); err != nil {
		t.Fatal(err)
	}
	data := l.file("node1", "file", 1<<20+3)
	r := l.start("node2", docLine(t, "README.md", "rdmarecv --key-file ~/.rdmapipe.key > file"))
	l.listening("node2")
	s := l.start("node1", docLine(t, "README.md", "rdmasend --key-file ~/.rdmapipe.key --encrypt node2 < file"))
	s.wait(t)
	r.wait(t)
	l.same("node2", "file", data)
	for _, x := range []*run{r, s} {
		if strings.Contains(x.stderr.String(), "warning") {
			t.Errorf("%s warned:\n%s", x.line, x.stderr.String())
		}
	}
}

// TestReadmeCheck runs the README's --check lines: rdmarecv --check
// alone, then rdmasend --check (text and JSON) against a listening
// rdmarecv, which a check leaves listening.
func TestReadmeCheck(t *testing.T) {
	l := newLab(t, 2)
	l.start("node2", docLine(t, "README.md", "rdmarecv --check ")).wait(t)
	r := l.start("node2", docLine(t, "README.md", "node2$ rdmarecv > backup.tar"))
	l.listening("node2")
	l.start("node1", docLine(t, "README.md", "rdmasend --check node2 ")).wait(t)
	j := l.start("node1", docLine(t, "README.md", "rdmasend --check --json node2")+" > report.json")
	j.wait(t)
	var report struct {
		OK bool `json:"ok"`
	}
	data, err := os.ReadFile(filepath.Join(l.dirs["node1"], "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &report); err != nil || !report.OK {
		t.Fatalf("rdmasend --check --json: ok %v, %v:\n%s", report.OK, err, data)
	}
	data2 := l.file("node1", "backup.tar", 1<<20)
	l.start("node1", docLine(t, "README.md", "node1$ rdmasend node2 < backup.tar")).wait(t)
	r.wait(t)
	l.same("node2", "backup.tar", data2)
}

// TestReadmeKeepListening runs the README's rdmarecv -k -o line: two
// senders, two files, and exit 0 on SIGTERM.
func TestReadmeKeepListening(t *testing.T) {
	l := newLab(t, 2)
	data := l.file("node1", "backup.tar", 1<<20+1)
	r := l.start("node2", docLine(t, "README.md", "rdmarecv -k -o 'in-%t-%n.log'"))
	l.listening("node2")
	for range 2 {
		l.start("node1", docLine(t, "README.md", "node1$ rdmasend node2 < backup.tar")).wait(t)
	}
	r.signal(syscall.SIGTERM)
	r.wait(t)
	for _, n := range []string{"1", "2"} {
		m, _ := filepath.Glob(filepath.Join(l.dirs["node2"], "in-*-"+n+".log"))
		if len(m) != 1 {
			t.Fatalf("stream %s: files %q, want one in-*-%s.log", n, m, n)
		}
		l.same("node2", filepath.Base(m[0]), data)
	}
}

// TestReadmeWait starts the README's --wait line before its receiver.
func TestReadmeWait(t *testing.T) {
	l := newLab(t, 2)
	data := l.file("node1", "file", 1<<20+9)
	s := l.start("node1", docLine(t, "README.md", "rdmasend --wait 30s node2 < file"))
	r := l.start("node2", docLine(t, "README.md", "node2$ rdmarecv > backup.tar"))
	s.wait(t)
	r.wait(t)
	l.same("node2", "backup.tar", data)
}
