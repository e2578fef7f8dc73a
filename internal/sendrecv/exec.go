package sendrecv

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rdmapipe/rdmapipe/internal/server"
	"github.com/rdmapipe/rdmapipe/pipe/conn"
	"golang.org/x/sys/unix"
)

// killGrace is how long a command told to stop (SIGTERM) has before its
// process group is killed.
const killGrace = 10 * time.Second

// guardName is argv[0] of rdmarecv started as the guard of a command's
// stdin: Recv then runs runGuard, not its flags.
const guardName = "rdmarecv-exec-guard"

// handler is one stream's --exec command, reading the stream on its
// stdin, and the command's guard, which holds a copy of the pipe's write
// end so that rdmarecv's death cannot end the command's stdin.
type handler struct {
	cmd       *exec.Cmd
	stdin     *os.File // the pipe's write end
	pgid      int      // the command's process group: its guard's pid
	guard     *exec.Cmd
	ctl       *os.File      // the guard's control pipe: a byte releases it
	guardDone chan struct{} // closed once the guard has exited
	waited    bool          // cmd has been waited for
	committed bool          // by exiting 0 after the whole stream
	log       io.Writer
}

// startHandler starts sh -c command in its guard's process group, the
// stream st on its stdin, its number and sender in its environment, and
// rdmarecv's stdout and stderr as its own. The key is not passed on.
func startHandler(command string, st server.Stream, pipeSize int, log io.Writer) (*server.Output, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, conn.Errorf(conn.KindAborted, "start the receiver's command", "%v", err)
	}
	h, err := startGuard(w, log)
	if err != nil {
		r.Close()
		w.Close()
		return nil, err
	}
	cmd := exec.Command("/bin/sh", "-c", command)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = r, os.Stdout, os.Stderr
	cmd.Env = append(environ(os.Environ()), "RDMAPIPE_STREAM="+strconv.FormatInt(st.N, 10), "RDMAPIPE_PEER="+st.Remote)
	// The guard kills its group should rdmarecv die; SIGKILL covers sh
	// until it has joined the group (Go's child checks that rdmarecv is
	// still there once it is set; Linux also sends it when the thread that
	// started sh ends, which Go does only for a goroutine that locked it:
	// rdmarecv has none).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pgid: h.pgid, Pdeathsig: syscall.SIGKILL}
	err = cmd.Start()
	r.Close()
	if err != nil {
		w.Close()
		h.release()
		return nil, conn.Errorf(conn.KindAborted, "start the receiver's command", "%v", err)
	}
	h.cmd = cmd
	growPipe(w, pipeSize)
	return &server.Output{W: h, Commit: h.commit, End: h.end}, nil
}

// startGuard starts rdmarecv again as the guard of w, a command's stdin,
// in a process group of its own for the command to join (see guard).
func startGuard(w *os.File, log io.Writer) (*handler, error) {
	ctlR, ctlW, err := os.Pipe()
	if err != nil {
		return nil, conn.Errorf(conn.KindAborted, "start the guard of the receiver's command", "%v", err)
	}
	held, err := reopen(w)
	if err != nil {
		ctlR.Close()
		ctlW.Close()
		return nil, conn.Errorf(conn.KindAborted, "start the guard of the receiver's command", "%v", err)
	}
	g := exec.Command("/proc/self/exe")
	g.Args = []string{guardName}
	g.Env, g.Stderr = environ(os.Environ()), log
	g.ExtraFiles = []*os.File{ctlR, held} // fd 3 and 4
	g.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = g.Start()
	ctlR.Close()
	held.Close()
	if err != nil {
		ctlW.Close()
		return nil, conn.Errorf(conn.KindAborted, "start the guard of the receiver's command", "%v", err)
	}
	h := &handler{stdin: w, pgid: g.Process.Pid, guard: g, ctl: ctlW, guardDone: make(chan struct{}), log: log}
	go func() {
		g.Wait()
		close(h.guardDone)
	}()
	return h, nil
}

// reopen opens the pipe whose write end is w anew, as a file of its own:
// handing it to a child makes it blocking, and w stays non-blocking in
// Go's poller.
func reopen(w *os.File) (*os.File, error) {
	raw, err := w.SyscallConn()
	if err != nil {
		return nil, err
	}
	var f *os.File
	cerr := raw.Control(func(fd uintptr) {
		f, err = os.OpenFile("/proc/self/fd/"+strconv.Itoa(int(fd)), os.O_WRONLY, 0)
	})
	if cerr != nil {
		return nil, cerr
	}
	return f, err
}

// runGuard is rdmarecv started by startGuard, its control pipe on fd 3
// and the command's stdin on fd 4; it ignores SIGHUP, SIGINT and SIGTERM,
// which are rdmarecv's to act on.
func runGuard() int {
	signal.Ignore(syscall.SIGHUP, syscall.SIGINT, syscall.SIGTERM)
	kill := func() error { return syscall.Kill(0, syscall.SIGKILL) }
	if err := guard(os.NewFile(3, "control pipe"), os.NewFile(4, "command's stdin"), kill); err != nil {
		fmt.Fprintf(os.Stderr, "rdmarecv: guard of the receiver's command: %v\n", err)
		return 1
	}
	return 0
}

// guard holds w until ctl says how the stream ended: a byte (rdmarecv
// ended it) lets w go; the end of ctl (rdmarecv died) calls kill, which
// ends the guard's process group with the command in it, before w closes.
func guard(ctl io.Reader, w io.Closer, kill func() error) error {
	defer w.Close()
	if n, _ := ctl.Read(make([]byte, 1)); n == 1 {
		return nil
	}
	if err := kill(); err != nil {
		return fmt.Errorf("kill the command's process group: %w", err)
	}
	return nil
}

// Write writes p to the command's stdin while its guard lives: without
// it rdmarecv's death would end the command's stdin as a clean end.
func (h *handler) Write(p []byte) (int, error) {
	select {
	case <-h.guardDone:
		return 0, conn.Errorf(conn.KindAborted, "write to the receiver's command", "its guard %s", status(h.guard.ProcessState))
	default:
	}
	return h.stdin.Write(p)
}

// release tells the guard that rdmarecv ended the command's stdin, so that
// it lets go of its copy, and waits for it to exit.
func (h *handler) release() {
	h.ctl.Write([]byte{1})
	h.ctl.Close()
	<-h.guardDone
}

// environ is env without RDMAPIPE_KEY: the command needs no key.
func environ(env []string) []string {
	var out []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, "RDMAPIPE_KEY=") {
			out = append(out, kv)
		}
	}
	return out
}

// commit ends the command's stdin and waits for it: the stream is
// confirmed to the sender only if it exits 0.
func (h *handler) commit() error {
	h.stdin.Close()
	h.release()
	err := h.cmd.Wait()
	h.waited = true
	if err != nil {
		return conn.Errorf(conn.KindAborted, "run the receiver's command", "it read the whole stream, then %s", status(h.cmd.ProcessState))
	}
	h.committed = true
	return nil
}

// end stops the command of a stream that failed before its commit,
// SIGTERM to its process group before its stdin ends, so that it never
// sees a clean end of a cut stream, and waits for it (killing the group
// after killGrace). It returns err, with the command's exit status if it
// had exited by itself; nil for a committed stream (whatever failed
// after, the command read it all and exited 0).
func (h *handler) end(err error) error {
	switch {
	case h.committed:
		return nil // the command read it all and exited 0
	case h.waited:
		return err // the command failed the commit
	}
	syscall.Kill(-h.pgid, syscall.SIGTERM)
	h.stdin.Close()
	h.release()
	done := make(chan struct{})
	go func() {
		h.cmd.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(killGrace):
		fmt.Fprintf(h.log, "rdmarecv: the command of a failed stream still runs %v after SIGTERM: killing its process group\n", killGrace)
		syscall.Kill(-h.pgid, syscall.SIGKILL)
		<-done
	}
	if ws, ok := h.cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Exited() {
		return fmt.Errorf("%w (the receiver's command %s)", err, status(h.cmd.ProcessState))
	}
	return err
}

// status says how a command ended.
func status(ps *os.ProcessState) string {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return "was killed by " + unix.SignalName(ws.Signal())
	}
	return "exited with status " + strconv.Itoa(ps.ExitCode())
}
