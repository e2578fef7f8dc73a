package e2e

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rdmapipe/rdmapipe/internal/testutil"
)

// slowInput starts a sender to port whose input the test feeds by hand:
// it writes to the returned pipe and closes it to end the input.
func slowInput(t *testing.T, port int, extra ...string) (*proc, *os.File) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	p := send(t, port, r, extra...)
	r.Close() // the sender holds the only read end: writes fail once it is gone
	return p, w
}

// fileSize returns the size of the file at path, 0 if it does not exist.
func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// TestReceiverOutputClosed runs `rdmarecv | head -c 10`: the receiver's
// stdout closes early, so the stream is aborted and the sender says why.
func TestReceiverOutputClosed(t *testing.T) {
	t.Parallel()
	port := testutil.FreePort(t)
	in, _ := randomFile(t, 64<<20, 3)
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	r := recv(t, port, outW)
	outW.Close()
	head := make([]byte, 10)
	s := send(t, port, openFile(t, in))
	if _, err := io.ReadFull(outR, head); err != nil {
		t.Fatal(err)
	}
	outR.Close()
	code, stderr := r.wait(time.Minute)
	expect(t, "rdmarecv", code, stderr, 4, "broken pipe")
	code, stderr = s.wait(time.Minute)
	expect(t, "rdmasend", code, stderr, 4, "receiver", "broken pipe")
}

// midStream starts a receiver into a file and a sender from a pipe, and
// returns them once the receiver has written the first 100000 bytes, with
// the pipe's end to write more to.
func midStream(t *testing.T) (r, s *proc, inW *os.File) {
	port := testutil.FreePort(t)
	out := filepath.Join(t.TempDir(), "output")
	r = recv(t, port, createFile(t, out), "--timeout", "20s")
	s, inW = slowInput(t, port, "--timeout", "20s")
	inW.Write(bytes.Repeat([]byte("x"), 100000))
	testutil.WaitFor(t, 30*time.Second, "data at the receiver", func() bool { return fileSize(out) == 100000 })
	return r, s, inW
}

// TestSenderKilled kills the sender mid-stream: the receiver must exit
// non-zero and say the stream was cut short.
func TestSenderKilled(t *testing.T) {
	t.Parallel()
	r, s, _ := midStream(t)
	s.cmd.Process.Signal(syscall.SIGKILL)
	s.wait(10 * time.Second)
	code, stderr := r.wait(30 * time.Second)
	expect(t, "rdmarecv", code, stderr, 4, "truncated after 100000 bytes")
}

// TestReceiverKilled kills the receiver mid-stream: the sender must exit
// non-zero and say so.
func TestReceiverKilled(t *testing.T) {
	t.Parallel()
	r, s, inW := midStream(t)
	r.cmd.Process.Signal(syscall.SIGKILL)
	r.wait(10 * time.Second)
	inW.Write(bytes.Repeat([]byte("y"), 100000))
	code, stderr := s.wait(30 * time.Second)
	expect(t, "rdmasend", code, stderr, 4, "receiver")
}

// TestInterrupt signals one side mid-stream: it aborts the stream, tells
// the other side, and both exit with the aborted code.
func TestInterrupt(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		sig     syscall.Signal
		victim  string // "send" or "recv"
		peerSay string
	}{
		{"sender SIGINT", syscall.SIGINT, "send", `sender aborted: "interrupted (SIGINT)"`},
		{"receiver SIGTERM", syscall.SIGTERM, "recv", `receiver aborted: "interrupted (SIGTERM)"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			port := testutil.FreePort(t)
			out := filepath.Join(t.TempDir(), "output")
			r := recv(t, port, createFile(t, out))
			s, inW := slowInput(t, port)
			inW.Write([]byte("partial"))
			testutil.WaitFor(t, 30*time.Second, "data at the receiver", func() bool { return fileSize(out) == 7 })
			victim, peer := s, r
			if tc.victim == "recv" {
				victim, peer = r, s
			}
			victim.cmd.Process.Signal(tc.sig)
			code, stderr := victim.wait(30 * time.Second)
			expect(t, tc.name, code, stderr, 4, "interrupted")
			code, stderr = peer.wait(30 * time.Second)
			expect(t, "its peer", code, stderr, 4, tc.peerSay)
		})
	}
}

// TestKeys checks the shared-key handshake in every combination. A sender
// that fails it gets the key error; the receiver logs it and keeps waiting
// for its real sender (an unauthenticated peer does not decide its exit),
// which it then serves.
func TestKeys(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	keyA, keyB := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	os.WriteFile(keyA, []byte("correct horse battery staple\n"), 0o600)
	os.WriteFile(keyB, []byte("another secret\n"), 0o600)
	cases := []struct {
		name                 string
		recvKey, sendKey     string
		recvExtra, sendExtra []string
		code                 int
		recvSays             string
		sendSays             string
	}{
		{"same key", keyA, keyA, nil, nil, 0, "", ""},
		{"wrong key", keyA, keyB, nil, nil, 6, "key is wrong", "key is wrong"},
		{"sender without key", keyA, "", nil, nil, 6, "requires a shared key", "requires a shared key"},
		{"receiver without key", "", keyA, nil, nil, 6, "has a key", "receiver has none"},
		{"encrypted", keyA, keyA, nil, []string{"--encrypt", "-v"}, 0, "", ", encrypted"},
		{"encrypted for a receiver that requires it", keyA, keyA, []string{"--encrypt"}, []string{"--encrypt"}, 0, "", ""},
		{"receiver requires encryption", keyA, keyA, []string{"--encrypt"}, nil, 6, "accepts only encrypted streams", "accepts only encrypted streams"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			port := testutil.FreePort(t)
			var out strings.Builder
			var rargs, sargs []string
			if tc.recvKey != "" {
				rargs = append([]string{"--key-file", tc.recvKey}, tc.recvExtra...)
			}
			if tc.sendKey != "" {
				sargs = append([]string{"--key-file", tc.sendKey}, tc.sendExtra...)
			}
			r := recv(t, port, &out, rargs...)
			s := send(t, port, strings.NewReader("secret data\n"), sargs...)
			code, stderr := s.wait(time.Minute)
			expect(t, "rdmasend", code, stderr, tc.code, tc.sendSays)
			want := "secret data\n"
			if tc.code != 0 {
				r.waitStderr(30*time.Second, tc.recvSays)
				if out.Len() != 0 {
					t.Errorf("the receiver wrote %q without authentication", out.String())
				}
				want = "real data\n"
				real := send(t, port, strings.NewReader(want), rargs...) // the receiver's own settings
				code, stderr := real.wait(time.Minute)
				expect(t, "the real rdmasend", code, stderr, 0, "")
			}
			code, stderr = r.wait(30 * time.Second)
			expect(t, "rdmarecv", code, stderr, 0, "")
			if out.String() != want {
				t.Errorf("the receiver wrote %q, want %q", out.String(), want)
			}
		})
	}
}

// TestBusyPort starts a receiver on a port that is taken: the second one
// starts once the first says it is listening.
func TestBusyPort(t *testing.T) {
	t.Parallel()
	port := testutil.FreePort(t)
	first := recv(t, port, io.Discard, "-v")
	first.waitStderr(30*time.Second, listening)
	second := recv(t, port, io.Discard)
	code, stderr := second.wait(30 * time.Second)
	expect(t, "second rdmarecv", code, stderr, 3, "in use")
	first.cmd.Process.Kill()
}

// TestNothingListening dials a port nobody listens on with --wait 2s: the
// sender retries for the whole --wait (it may not give up earlier), then
// exits with the setup code. How much later it gives up depends on the
// machine; the wait limit only guards against a hang.
func TestNothingListening(t *testing.T) {
	t.Parallel()
	port := testutil.FreePort(t)
	began := time.Now()
	s := start(t, "rdmasend", strings.NewReader("x"), io.Discard, append(flags(port, "--wait", "2s"), suite.host)...)
	code, stderr := s.wait(time.Minute)
	took := time.Since(began)
	expect(t, "rdmasend", code, stderr, 3, "gave up after waiting 2s")
	t.Logf("rdmasend gave up after %v", took)
	if took < 2*time.Second {
		t.Errorf("rdmasend gave up after %v, before its --wait of 2s", took)
	}
}

// TestKeepListening serves two senders one after another and refuses a
// third that connects while a stream is in progress.
func TestKeepListening(t *testing.T) {
	t.Parallel()
	port := testutil.FreePort(t)
	out := filepath.Join(t.TempDir(), "output")
	r := recv(t, port, createFile(t, out), "-k")
	first, inW := slowInput(t, port)
	inW.WriteString("one\n")
	testutil.WaitFor(t, 30*time.Second, "the first stream", func() bool { return fileSize(out) == 4 })
	busy := start(t, "rdmasend", strings.NewReader("intruder\n"), io.Discard, append(flags(port), suite.host)...)
	code, stderr := busy.wait(time.Minute)
	expect(t, "concurrent rdmasend", code, stderr, 3, "busy")
	inW.WriteString("two\n")
	inW.Close()
	code, stderr = first.wait(time.Minute)
	expect(t, "first rdmasend", code, stderr, 0)
	second := send(t, port, strings.NewReader("three\n"))
	code, stderr = second.wait(time.Minute)
	expect(t, "second rdmasend", code, stderr, 0)
	r.cmd.Process.Signal(syscall.SIGTERM)
	code, stderr = r.wait(30 * time.Second)
	expect(t, "rdmarecv -k", code, stderr, 0)
	if b, _ := os.ReadFile(out); string(b) != "one\ntwo\nthree\n" {
		t.Fatalf("output %q, want the two streams one after the other", b)
	}
}

// TestUsage checks that bad command lines exit 2 with a message.
func TestUsage(t *testing.T) {
	t.Parallel()
	cases := []struct {
		bin  string
		args []string
		says string
	}{
		{"rdmasend", nil, "expected a HOST[:PORT] argument or --to"},
		{"rdmasend", []string{"a", "b"}, "give one HOST[:PORT] argument, or the receivers with --to"},
		{"rdmasend", []string{"--to", "b,c", "a"}, "not both"},
		{"rdmasend", []string{"--to-file", "/nonexistent/hosts"}, "--to-file: /nonexistent/hosts: no such file or directory"},
		{"rdmasend", []string{"--bench", "--to", "b,c"}, "take one receiver, not a chain"},
		{"rdmarecv", []string{"--bench", "--forward", "h"}, "--forward and --bench do not go together"},
		{"rdmasend", []string{"--no-such-flag", "h"}, "no-such-flag"},
		{"rdmasend", []string{"--encrypt", "h"}, "--encrypt needs a shared key"},
		{"rdmarecv", []string{"--encrypt"}, "--encrypt needs a shared key"},
		{"rdmarecv", []string{"-k", "--output", "in"}, "with -k needs %n"},
		{"rdmarecv", []string{"--output", "in-%n", "--exec", "cat"}, "--output and --exec do not go together"},
		{"rdmarecv", []string{"--exec", "cat", "--sparse"}, "--exec takes neither --sparse nor --sync"},
		{"rdmarecv", []string{"--output", "/nonexistent/in-%n"}, "/nonexistent/ is not a directory"},
		{"rdmarecv", []string{"--output", "in-%s"}, "% must be followed by n"},
		{"rdmarecv", []string{"--output", "%n/in"}, "expansions go in the file name"},
		{"rdmarecv", []string{"--bench", "--output", "in-%n"}, "--bench discards the data"},
		{"rdmasend", []string{"--chunk-size", "lots", "h"}, "not a size"},
		{"rdmasend", []string{"--transport", "carrier-pigeon", "h"}, "must be auto, rdma or tcp"},
		{"rdmasend", []string{"--qps", "0", "h"}, "--qps 0: must be 1 to 16"},
		{"rdmasend", []string{"--qps", "17", "h"}, "--qps 17: must be 1 to 16"},
		{"rdmarecv", []string{"--rdma-op", "read"}, `--rdma-op "read": must be write or send`},
		{"rdmarecv", []string{"--depth", "1"}, "depth 1 out of range"},
		{"rdmarecv", []string{"extra"}, "takes no arguments"},
		{"rdmasend", []string{"h:99999"}, `"h:99999": the port must be a number from 1 to 65535`},
		{"rdmasend", []string{"--to", "a,b:0"}, `"b:0": the port must be a number from 1 to 65535`},
		{"rdmarecv", []string{"--forward", ":5"}, `--forward ":5": not a HOST[:PORT]`},
		{"rdmasend", []string{"--timeout", "5", "h"}, "--timeout 5: a duration needs its unit: 5s, 5m, 5h"},
		{"rdmasend", []string{"--wait", "soon", "h"}, `--wait "soon": not a duration`},
		{"rdmasend", []string{"-P", "x", "h"}, `-P "x": not a whole number`},
		{"rdmasend", []string{"--limit-rate", "0", "h"}, "for no limit leave --limit-rate out"},
		{"rdmasend", []string{"--limit-rate", "1.5Q", "h"}, "not a rate in bytes per second"},
	}
	for _, tc := range cases {
		t.Run(tc.bin+" "+strings.Join(tc.args, " "), func(t *testing.T) {
			p := start(t, tc.bin, nil, io.Discard, tc.args...)
			code, stderr := p.wait(30 * time.Second)
			expect(t, tc.bin, code, stderr, 2, tc.says)
		})
	}
}

// TestNoRDMA asks for RDMA where there is none: the dedicated exit code.
func TestNoRDMA(t *testing.T) {
	t.Parallel()
	if suite.transport == "rdma" {
		t.Skip("this environment has RDMA")
	}
	if _, err := os.Stat("/sys/class/infiniband"); err == nil {
		if entries, _ := os.ReadDir("/sys/class/infiniband"); len(entries) > 0 {
			t.Skip("this host has RDMA devices")
		}
	}
	port := testutil.FreePort(t)
	for _, bin := range []string{"rdmasend", "rdmarecv"} {
		args := []string{"--transport", "rdma", "--port", itoa(int64(port))}
		if bin == "rdmasend" {
			args = append(args, "127.0.0.1")
		}
		p := start(t, bin, strings.NewReader("x"), io.Discard, args...)
		code, stderr := p.wait(30 * time.Second)
		expect(t, bin, code, stderr, 7, "RDMA")
	}
}
