package sendrecv

import (
	"fmt"
	"io"
	"os"
	"os/exec"
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

// handler is one stream's --exec command, reading the stream on its
// stdin.
type handler struct {
	cmd       *exec.Cmd
	stdin     *os.File // the pipe's write end
	waited    bool     // cmd has been waited for
	committed bool     // by exiting 0 after the whole stream
	log       io.Writer
}

// startHandler starts sh -c command in a process group of its own, the
// stream st on its stdin, its number and sender in its environment, and
// rdmarecv's stdout and stderr as its own. The key is not passed on.
func startHandler(command string, st server.Stream, pipeSize int, log io.Writer) (*server.Output, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, conn.Errorf(conn.KindAborted, "start the receiver's command", "%v", err)
	}
	cmd := exec.Command("/bin/sh", "-c", command)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = r, os.Stdout, os.Stderr
	cmd.Env = append(environ(os.Environ()), "RDMAPIPE_STREAM="+strconv.FormatInt(st.N, 10), "RDMAPIPE_PEER="+st.Remote)
	// Its own group, so that it can be stopped as a whole; SIGTERM if
	// rdmarecv dies first, so that it does not take the end of its
	// stdin for the end of the stream (Linux sends it when the thread
	// that started it ends: Go ends one only for a goroutine that locked
	// it, which rdmarecv has none of).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	err = cmd.Start()
	r.Close()
	if err != nil {
		w.Close()
		return nil, conn.Errorf(conn.KindAborted, "start the receiver's command", "%v", err)
	}
	growPipe(w, pipeSize)
	h := &handler{cmd: cmd, stdin: w, log: log}
	return &server.Output{W: w, Commit: h.commit, End: h.end}, nil
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
	pid := h.cmd.Process.Pid
	syscall.Kill(-pid, syscall.SIGTERM)
	h.stdin.Close()
	done := make(chan struct{})
	go func() {
		h.cmd.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(killGrace):
		fmt.Fprintf(h.log, "rdmarecv: the command of a failed stream still runs %v after SIGTERM: killing its process group\n", killGrace)
		syscall.Kill(-pid, syscall.SIGKILL)
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
