// Command latency measures what a user notices of a stream's latency
// (bench/latency.sh): the time from starting the sender until the first
// byte reaches the receiver's stdout, and the time a line written into the
// sender's stdin during a stream takes to appear on the receiver's stdout.
// Every timestamp is taken in this process, on the monotonic clock: it
// starts both sides itself, with pipes on the sender's stdin and the
// receiver's stdout.
//
//	latency -mode first -port P -- RECEIVER ARGS... -- SENDER ARGS...
//	latency -mode line  -port P -lines 5 -gap 200ms -delay 1s -- RECEIVER... -- SENDER...
//
// The literal word PORT in either command line is replaced by -port. The
// receiver is started first; the sender only once something listens on
// 127.0.0.1:PORT (read from /proc/net/tcp, what ss reads: no connection is
// made to find out, no fixed sleep).
//
// first: the sender's stdin is a pipe that already holds one line when it
// starts; the time runs from just before the sender's fork until the first
// byte is read from the receiver's stdout; then the sender's stdin is
// closed and both sides must exit 0. Prints one line: "first MS".
//
// line: the sender's stdin gets a first line at once (the stream starts),
// then, delay after the sender's start, -lines lines gap apart; each line's
// time runs from just before its write(2) into the sender's stdin until the
// moment its last byte (the newline) is read from the receiver's stdout.
// Then stdin is closed and both sides must exit 0. Prints one line per
// line: "line I MS".
//
// Exit status 0 only if both sides exited 0 and every byte arrived, in
// order; failures are explained on stderr.
package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

func main() {
	mode := flag.String("mode", "first", "first or line")
	port := flag.Int("port", 0, "the port the receiver listens on (127.0.0.1)")
	lines := flag.Int("lines", 5, "line mode: lines to time")
	gap := flag.Duration("gap", 200*time.Millisecond, "line mode: time between two timed lines")
	delay := flag.Duration("delay", time.Second, "line mode: time from the sender's start to the first timed line")
	timeout := flag.Duration("timeout", 30*time.Second, "give up (and kill both sides) after this long")
	flag.Parse()
	recvArgs, sendArgs, err := split(flag.Args(), *port)
	if err == nil && *port <= 0 {
		err = errors.New("-port is required")
	}
	if err == nil && *mode != "first" && *mode != "line" {
		err = fmt.Errorf("-mode %q: first or line", *mode)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "latency:", err)
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	t := &trial{mode: *mode, port: *port, lines: *lines, gap: *gap, delay: *delay}
	if err := t.run(ctx, recvArgs, sendArgs); err != nil {
		fmt.Fprintln(os.Stderr, "latency:", err)
		os.Exit(1)
	}
}

// split parses "-- RECEIVER... -- SENDER..." (the first "--" may have been
// eaten by flag) and replaces the word PORT with port.
func split(args []string, port int) (recv, send []string, err error) {
	if len(args) > 0 && args[0] == "--" {
		args = args[1:]
	}
	i := -1
	for j, a := range args {
		if a == "--" {
			i = j
			break
		}
	}
	if i <= 0 || i == len(args)-1 {
		return nil, nil, errors.New("usage: latency [flags] -- RECEIVER ARGS... -- SENDER ARGS...")
	}
	sub := func(s []string) []string {
		out := make([]string, len(s))
		for k, a := range s {
			out[k] = strings.ReplaceAll(a, "PORT", strconv.Itoa(port))
		}
		return out
	}
	return sub(args[:i]), sub(args[i+1:]), nil
}

type trial struct {
	mode         string
	port         int
	lines        int
	gap, delay   time.Duration
	recv, send   *exec.Cmd
	recvErr      bytes.Buffer
	sendErr      bytes.Buffer
	arrivals     chan arrival
	recvReadDone chan error
}

// arrival is one read(2) from the receiver's stdout.
type arrival struct {
	at   time.Time
	data []byte
}

// run starts the receiver and then the sender, measures what t.mode asks
// for, and checks that the stream arrived whole and both sides exited 0.
func (t *trial) run(ctx context.Context, recvArgs, sendArgs []string) (err error) {
	if err := t.startReceiver(recvArgs); err != nil {
		return err
	}
	defer func() {
		if err != nil {
			t.kill()
			err = fmt.Errorf("%w; receiver said: %q; sender said: %q", err, tail(&t.recvErr), tail(&t.sendErr))
		}
	}()
	if err := waitListen(ctx, t.port); err != nil {
		return err
	}
	// The stream's first line is in the pipe before the sender starts.
	var expect bytes.Buffer
	expect.WriteString("start\n")
	pw, t0, err := t.startSender(sendArgs, expect.String())
	if err != nil {
		return err
	}
	got := new(bytes.Buffer)
	if err := t.measure(ctx, pw, t0, got, &expect); err != nil {
		return err
	}
	pw.Close()
	return t.finish(ctx, got, expect.Bytes())
}

// startReceiver starts the receiver and the goroutine that reads its
// stdout.
func (t *trial) startReceiver(args []string) error {
	t.recv = exec.Command(args[0], args[1:]...)
	t.recv.Stderr = &t.recvErr
	out, err := t.recv.StdoutPipe()
	if err != nil {
		return err
	}
	if err := t.recv.Start(); err != nil {
		return fmt.Errorf("receiver: %w", err)
	}
	t.arrivals = make(chan arrival, 1024)
	t.recvReadDone = make(chan error, 1)
	go t.read(out)
	return nil
}

// startSender starts the sender with first already in its stdin, and
// returns the pipe to write the rest into and when the sender started.
func (t *trial) startSender(args []string, first string) (*os.File, time.Time, error) {
	t.send = exec.Command(args[0], args[1:]...)
	t.send.Stderr = &t.sendErr
	t.send.Stdout = io.Discard
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, time.Time{}, err
	}
	defer pr.Close()
	t.send.Stdin = pr
	if _, err := pw.WriteString(first); err != nil {
		pw.Close()
		return nil, time.Time{}, err
	}
	t0 := time.Now()
	if err := t.send.Start(); err != nil {
		pw.Close()
		return nil, time.Time{}, fmt.Errorf("sender: %w", err)
	}
	return pw, t0, nil
}

// measure prints the first byte's latency from t0, or writes t.lines lines
// into pw and prints each one's, adding them to expect.
func (t *trial) measure(ctx context.Context, pw *os.File, t0 time.Time, got, expect *bytes.Buffer) error {
	switch t.mode {
	case "first":
		a, err := t.next(ctx, got)
		if err != nil {
			return fmt.Errorf("waiting for the first byte: %w", err)
		}
		fmt.Printf("first %.3f\n", ms(a.at.Sub(t0)))
	case "line":
		if err := t.until(ctx, got, expect.Bytes()); err != nil {
			return fmt.Errorf("waiting for the first line: %w", err)
		}
		for i := 1; i <= t.lines; i++ {
			at := t0.Add(t.delay + time.Duration(i-1)*t.gap)
			if err := sleepUntil(ctx, at); err != nil {
				return err
			}
			line := fmt.Sprintf("line %d of the latency benchmark\n", i)
			expect.WriteString(line)
			w := time.Now()
			if _, err := pw.WriteString(line); err != nil {
				return fmt.Errorf("write into the sender's stdin: %w", err)
			}
			r, err := t.untilAt(ctx, got, expect.Bytes())
			if err != nil {
				return fmt.Errorf("waiting for line %d: %w", i, err)
			}
			fmt.Printf("line %d %.3f\n", i, ms(r.Sub(w)))
		}
	}
	return nil
}

// finish reads the rest of the stream, which must equal expect, and waits
// for both sides, which must exit 0.
func (t *trial) finish(ctx context.Context, got *bytes.Buffer, expect []byte) error {
	for {
		_, err := t.next(ctx, got)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("at the end of the stream: %w", err)
		}
	}
	if !bytes.Equal(got.Bytes(), expect) {
		return fmt.Errorf("the receiver wrote %q, expected %q", got.Bytes(), expect)
	}
	if err := waitCmd(ctx, t.send); err != nil {
		return fmt.Errorf("sender: %w", err)
	}
	if err := waitCmd(ctx, t.recv); err != nil {
		return fmt.Errorf("receiver: %w", err)
	}
	return nil
}

// read timestamps every read(2) from the receiver's stdout.
func (t *trial) read(r io.Reader) {
	for {
		b := make([]byte, 64<<10)
		n, err := r.Read(b)
		if n > 0 {
			t.arrivals <- arrival{at: time.Now(), data: b[:n]}
		}
		if err != nil {
			t.recvReadDone <- err
			close(t.arrivals)
			return
		}
	}
}

// next waits for the next read from the receiver's stdout and appends it
// to got; io.EOF when the receiver closed it.
func (t *trial) next(ctx context.Context, got *bytes.Buffer) (arrival, error) {
	select {
	case a, ok := <-t.arrivals:
		if !ok {
			err := <-t.recvReadDone
			if err == nil {
				err = io.EOF
			}
			return arrival{}, err
		}
		got.Write(a.data)
		return a, nil
	case <-ctx.Done():
		return arrival{}, ctx.Err()
	}
}

// untilAt waits until got holds expect (which it must start with) and
// returns when its last byte was read.
func (t *trial) untilAt(ctx context.Context, got *bytes.Buffer, expect []byte) (time.Time, error) {
	for got.Len() < len(expect) {
		a, err := t.next(ctx, got)
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return time.Time{}, err
		}
		if !bytes.HasPrefix(expect, got.Bytes()) && !bytes.HasPrefix(got.Bytes(), expect) {
			return time.Time{}, fmt.Errorf("the receiver wrote %q, expected %q", got.Bytes(), expect)
		}
		if got.Len() >= len(expect) {
			return a.at, nil
		}
	}
	return time.Now(), nil
}

func (t *trial) until(ctx context.Context, got *bytes.Buffer, expect []byte) error {
	_, err := t.untilAt(ctx, got, expect)
	return err
}

func (t *trial) kill() {
	for _, c := range []*exec.Cmd{t.send, t.recv} {
		if c != nil && c.Process != nil && c.ProcessState == nil {
			_ = c.Process.Kill()
			_ = c.Wait()
		}
	}
}

// waitCmd waits for c to exit, within ctx.
func waitCmd(ctx context.Context, c *exec.Cmd) error {
	done := make(chan error, 1)
	go func() { done <- c.Wait() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		_ = c.Process.Kill()
		<-done
		return fmt.Errorf("still running: %w", ctx.Err())
	}
}

// waitListen polls /proc/net/tcp every millisecond until a socket listens
// on 127.0.0.1:port (or 0.0.0.0:port).
func waitListen(ctx context.Context, port int) error {
	want := fmt.Sprintf(":%04X ", port)
	for {
		if listening("/proc/net/tcp", want) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("nothing listens on port %d: %w", port, ctx.Err())
		case <-time.After(time.Millisecond):
		}
	}
}

// listening reports whether a line of a /proc/net/tcp file has a local
// address on 127.0.0.1 or 0.0.0.0 ending in want (":PPPP ") and state 0A
// (LISTEN).
func listening(path, want string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) < 4 || fields[3] != "0A" {
			continue
		}
		local := fields[1] + " "
		if strings.HasSuffix(local, want) &&
			(strings.HasPrefix(local, "0100007F:") || strings.HasPrefix(local, "00000000:")) {
			return true
		}
	}
	return false
}

func sleepUntil(ctx context.Context, at time.Time) error {
	d := time.Until(at)
	if d <= 0 {
		return nil
	}
	select {
	case <-time.After(d):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func tail(b *bytes.Buffer) string {
	s := strings.TrimSpace(b.String())
	if len(s) > 300 {
		s = "..." + s[len(s)-300:]
	}
	return s
}
