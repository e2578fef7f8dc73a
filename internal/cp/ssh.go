package cp

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"
)

// sshOptions are added to every ssh command, as scp does: no forwarding,
// no terminal, and no RemoteCommand or LocalCommand from the user's config
// in the way of the receiver.
var sshOptions = []string{"-x", "-T", "-o", "ClearAllForwardings=yes", "-o", "ForwardAgent=no",
	"-o", "PermitLocalCommand=no", "-o", "RemoteCommand=none"}

// closeWait bounds the wait for ssh to exit once its stdin is closed;
// then it is killed.
const closeWait = 10 * time.Second

// remote is the receiving side, running under ssh.
type remote struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan status   // status lines, closed at the end of ssh's stdout
	ending chan struct{} // closed by close: status lines nobody reads are dropped
	end    sync.Once
	errc   chan error // why reading ssh's stdout ended early, if it did
	waited chan struct{}
	err    error  // ssh's exit, once waited is closed
	failed status // the remote side's last "fail" line, once lines or waited is closed
}

// startRemote runs the command line that o.remoteArgv gives for t and
// flag (remoteReceive or remoteSend), with its stderr (and so the remote
// command's) on stderr, escaped so that it cannot control the terminal.
func startRemote(o Options, t Target, flag string, stderr io.Writer) (*remote, error) {
	argv := o.remoteArgv(t, flag)
	cmd := exec.Command(argv[0], argv[1:]...)
	vis := &visWriter{w: stderr}
	cmd.Stderr = vis
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, setupf("run %s: %v", argv[0], err)
	}
	r := &remote{cmd: cmd, stdin: stdin, lines: make(chan status, 4), ending: make(chan struct{}), errc: make(chan error, 1), waited: make(chan struct{})}
	go r.read(stdout, vis)
	return r, nil
}

// read passes the status lines of stdout on to r.lines, skipping other
// lines, until stdout ends; then it waits for ssh, and writes what its
// stderr's escaping held back at the end.
func (r *remote) read(stdout io.Reader, stderr *visWriter) {
	defer close(r.waited)
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 0, 4096), maxStatusLine)
	for sc.Scan() {
		st, err := parseStatus(sc.Text())
		if err != nil {
			r.errc <- err
			break
		}
		if st.valid && st.kind == "fail" {
			r.failed = st
		}
		if st.valid {
			select {
			case r.lines <- st:
			case <-r.ending:
				select {
				case r.lines <- st:
				default: // nobody reads them any more
				}
			}
		}
	}
	if err := sc.Err(); err != nil {
		r.errc <- fmt.Errorf("read from the remote side: %w", err)
	}
	io.Copy(io.Discard, stdout)
	close(r.lines)
	r.err = r.cmd.Wait()
	stderr.Flush()
}

// next returns the next status line, waiting at most wait for it. It
// fails when the remote side ends without one.
func (r *remote) next(ctx context.Context, wait time.Duration) (status, error) {
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case st, ok := <-r.lines:
		if ok {
			return st, nil
		}
		select {
		case err := <-r.errc:
			return status{}, err
		default:
		}
		<-r.waited
		return status{}, fmt.Errorf("the remote side ended without a status (%s)", r.exitText())
	case err := <-r.errc:
		return status{}, err
	case <-timer.C:
		return status{}, fmt.Errorf("no word from the remote side within %v", wait)
	case <-ctx.Done():
		return status{}, context.Cause(ctx)
	}
}

// exitText describes how ssh exited, with a hint for common causes.
func (r *remote) exitText() string {
	var ee *exec.ExitError
	switch {
	case r.err == nil:
		return "ssh exited with status 0"
	case errors.As(r.err, &ee) && ee.ExitCode() == 127:
		return "exit status 127: is rdmacp installed on the remote host and in its PATH? See --remote-cmd"
	case errors.As(r.err, &ee) && ee.ExitCode() == 2:
		return "exit status 2, a usage error: is the same rdmacp installed there? See --remote-cmd"
	case errors.As(r.err, &ee) && ee.ExitCode() == 255:
		return "ssh exit status 255: the ssh connection failed, or the remote rdmacp was killed"
	}
	return r.err.Error()
}

// lastWords describes how the remote side ended, once ssh has exited: its
// failure, as it said it, or how ssh exited.
func (r *remote) lastWords() string {
	_, words := r.result()
	return words
}

// result is how the remote side ended, once ssh has exited: the byte
// count of its "ok" (-1 if it did not say it), and its failure as it said
// it, or how ssh exited.
func (r *remote) result() (ok int64, words string) {
	ok = -1
	for st := range r.lines {
		switch st.kind {
		case "ok":
			ok = st.n
		case "fail":
			words = strconv.Quote(st.msg)
		}
	}
	if words == "" {
		words = r.exitText()
	}
	return ok, words
}

// close ends the session: closing ssh's stdin tells the remote side to
// stop (it exits when its stdin ends); ssh is killed if it has not exited
// within closeWait.
func (r *remote) close() {
	r.end.Do(func() { close(r.ending) })
	r.stdin.Close()
	select {
	case <-r.waited:
	case <-time.After(closeWait):
		r.cmd.Process.Kill()
		<-r.waited
	}
}

// remoteArgv is the command line that starts the remote side on t:
// `ssh [-p PORT] OPTIONS -- [user@]HOST "REMOTECMD FLAG"`, or with a launcher, its
// words with %h replaced by HOST (or HOST after them, if none has %h),
// then REMOTECMD's words and FLAG.
func (o Options) remoteArgv(t Target, flag string) []string {
	if o.Launcher == nil {
		argv := []string{o.SSH[0]}
		if t.Port != 0 {
			argv = append(argv, "-p", strconv.Itoa(t.Port)) // before -P's: ssh takes the first
		}
		argv = append(append(argv, o.SSH[1:]...), sshOptions...)
		return append(argv, "--", t.SSHDest(), o.RemoteCmd+" "+flag)
	}
	var argv []string
	named := false
	for _, w := range o.Launcher {
		if strings.Contains(w, "%h") {
			w, named = strings.ReplaceAll(w, "%h", t.Host), true
		}
		argv = append(argv, w)
	}
	if !named {
		argv = append(argv, t.Host)
	}
	return append(append(argv, strings.Fields(o.RemoteCmd)...), flag)
}

// hostName is the name of t's host that the stream goes to: as ssh
// resolves it (see resolveHost), or as a launcher is given it.
func (o Options) hostName(ctx context.Context, t Target) string {
	if o.Launcher != nil {
		return t.Host
	}
	return resolveHost(ctx, o.SSH, t)
}

// resolveHost returns the host name ssh would connect to for t (its
// HostName for an alias in the user's ssh config), asked with `ssh -G`,
// or t.Host if that fails (an ssh that has no -G).
func resolveHost(ctx context.Context, sshCmd []string, t Target) string {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	args := append(append([]string{}, sshCmd[1:]...), "-G", "--", t.SSHDest())
	out, err := exec.CommandContext(ctx, sshCmd[0], args...).Output()
	if err != nil {
		return t.Host
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "hostname "); ok && v != "" {
			return v
		}
	}
	return t.Host
}
