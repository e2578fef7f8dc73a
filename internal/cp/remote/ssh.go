// Package remote starts rdmacp's remote side, over ssh or with a
// launcher, and reads its status lines; and parses the targets
// ([user@]HOST:PATH) it is started for.
package remote

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

	"github.com/rdmapipe/rdmapipe/internal/cp/proto"
	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

// sshOptions are added to every ssh command, as scp does: no forwarding,
// no terminal, and no RemoteCommand or LocalCommand from the user's config
// in the way of the receiver.
var sshOptions = []string{"-x", "-T", "-o", "ClearAllForwardings=yes", "-o", "ForwardAgent=no",
	"-o", "PermitLocalCommand=no", "-o", "RemoteCommand=none"}

// closeWait bounds the wait for ssh to exit once its stdin is closed;
// then it is killed.
const closeWait = 10 * time.Second

// Command is how the remote side is started: over ssh, or with a
// launcher, running rdmacp there.
type Command struct {
	SSH       []string // the ssh command and its options
	RemoteCmd string   // the rdmacp command on the remote host
	// Launcher, if set, starts the remote side instead of ssh: its words,
	// with %h replaced by the host (else the host after them), then the
	// remote command's. It must carry the remote side's stdin and stdout
	// as ssh does.
	Launcher []string
}

// Remote is the remote side of a copy, running under ssh (or a
// launcher): its stdin, and the status lines of its stdout.
type Remote struct {
	cmd    *exec.Cmd
	Stdin  io.WriteCloser    // the remote side's stdin, the ssh channel
	lines  chan proto.Status // status lines, closed at the end of ssh's stdout
	ending chan struct{}     // closed by Close: status lines nobody reads are dropped
	end    sync.Once
	errc   chan error    // why reading ssh's stdout ended early, if it did
	Waited chan struct{} // closed once ssh has exited
	err    error         // ssh's exit, once Waited is closed
	Failed proto.Status  // the remote side's last "fail" line, once lines or Waited is closed
}

// linesAhead is how many status lines are read ahead of Next: a listing's
// thousands of lines pass without a goroutine switch each.
const linesAhead = 256

// Start runs the command line that c.remoteArgv gives for t and
// flag (--remote-receive or --remote-send), with its stderr (and so the remote
// command's) on stderr, escaped so that it cannot control the terminal.
func Start(c Command, t Target, flag string, stderr io.Writer) (*Remote, error) {
	argv := c.remoteArgv(t, flag)
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
		return nil, conn.Errorf(conn.KindSetup, "", "run %s: %v", argv[0], err)
	}
	r := &Remote{cmd: cmd, Stdin: stdin, lines: make(chan proto.Status, linesAhead), ending: make(chan struct{}), errc: make(chan error, 1), Waited: make(chan struct{})}
	go r.read(stdout, vis)
	return r, nil
}

// read passes the status lines of stdout on to r.lines, skipping other
// lines, until stdout ends; then it waits for ssh, and writes what its
// stderr's escaping held back at the end.
func (r *Remote) read(stdout io.Reader, stderr *visWriter) {
	defer close(r.Waited)
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 0, 4096), proto.MaxStatusLine)
	for sc.Scan() {
		st, err := proto.ParseStatus(sc.Text())
		if err != nil {
			r.errc <- err
			break
		}
		if st.Valid && st.Kind == "fail" {
			r.Failed = st
		}
		if st.Valid {
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

// Next returns the next status line, waiting at most wait for it. It
// fails when the remote side ends without one.
func (r *Remote) Next(ctx context.Context, wait time.Duration) (proto.Status, error) {
	if ctx.Err() == nil {
		select {
		case st, ok := <-r.lines: // read ahead: no timer to start
			if ok {
				return st, nil
			}
		default:
		}
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case st, ok := <-r.lines:
		if ok {
			return st, nil
		}
		select {
		case err := <-r.errc:
			return proto.Status{}, err
		default:
		}
		<-r.Waited
		return proto.Status{}, fmt.Errorf("the remote side ended without a status (%s)", r.exitText())
	case err := <-r.errc:
		return proto.Status{}, err
	case <-timer.C:
		return proto.Status{}, fmt.Errorf("no word from the remote side within %v", wait)
	case <-ctx.Done():
		return proto.Status{}, context.Cause(ctx)
	}
}

// exitText describes how ssh exited, with a hint for common causes.
func (r *Remote) exitText() string {
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

// LastWords describes how the remote side ended, once ssh has exited: its
// failure, as it said it, or how ssh exited.
func (r *Remote) LastWords() string {
	_, words := r.Result()
	return words
}

// Result is how the remote side ended, once ssh has exited: the byte
// count of its "ok" (-1 if it did not say it), and its failure as it said
// it, or how ssh exited.
func (r *Remote) Result() (ok int64, words string) {
	ok = -1
	for st := range r.lines {
		switch st.Kind {
		case "ok":
			ok = st.N
		case "fail":
			words = strconv.Quote(st.Msg)
		}
	}
	if words == "" {
		words = r.exitText()
	}
	return ok, words
}

// Close ends the session: closing ssh's stdin tells the remote side to
// stop (it exits when its stdin ends); ssh is killed if it has not exited
// within closeWait.
func (r *Remote) Close() {
	r.end.Do(func() { close(r.ending) })
	r.Stdin.Close()
	select {
	case <-r.Waited:
	case <-time.After(closeWait):
		r.cmd.Process.Kill()
		<-r.Waited
	}
}

// remoteArgv is the command line that starts the remote side on t:
// `ssh [-p PORT] OPTIONS -- [user@]HOST "REMOTECMD FLAG"`, or with a launcher, its
// words with %h replaced by HOST (or HOST after them, if none has %h),
// then REMOTECMD's words and FLAG.
func (c Command) remoteArgv(t Target, flag string) []string {
	if c.Launcher == nil {
		argv := []string{c.SSH[0]}
		if t.Port != 0 {
			argv = append(argv, "-p", strconv.Itoa(t.Port)) // before -P's: ssh takes the first
		}
		argv = append(append(argv, c.SSH[1:]...), sshOptions...)
		return append(argv, "--", t.SSHDest(), c.RemoteCmd+" "+flag)
	}
	var argv []string
	named := false
	for _, w := range c.Launcher {
		if strings.Contains(w, "%h") {
			w, named = strings.ReplaceAll(w, "%h", t.Host), true
		}
		argv = append(argv, w)
	}
	if !named {
		argv = append(argv, t.Host)
	}
	return append(append(argv, strings.Fields(c.RemoteCmd)...), flag)
}

// HostName is the name of t's host that the stream goes to: as ssh
// resolves it (see resolveHost), or as a launcher is given it.
func (c Command) HostName(ctx context.Context, t Target) string {
	if c.Launcher != nil {
		return t.Host
	}
	return resolveHost(ctx, c.SSH, t)
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
