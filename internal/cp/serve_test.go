package cp

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

// TestListenAddress runs the remote side with SSH_CONNECTION set as sshd
// sets it and checks where it listens: on the address the ssh connection
// arrived on, or the one the request names, not on the others; on every
// address (saying so with -v) only when SSH_CONNECTION says nothing usable.
func TestListenAddress(t *testing.T) {
	cases := []struct {
		name          string
		sshConnection string
		listen        string // the request's Listen (--data-host)
		reach, refuse []string
		says          string
	}{
		{"the ssh connection's address", "127.0.0.9 50000 127.0.0.1 22", "",
			[]string{"127.0.0.1"}, []string{"127.0.0.2"}, "listening on 127.0.0.1:"},
		{"the data host", "127.0.0.9 50000 127.0.0.1 22", "127.0.0.2",
			[]string{"127.0.0.2"}, []string{"127.0.0.1"}, "listening on 127.0.0.2:"},
		{"no SSH_CONNECTION", "", "",
			[]string{"127.0.0.1", "127.0.0.2"}, nil, "every address: SSH_CONNECTION"},
		{"a garbled SSH_CONNECTION", "127.0.0.9 50000 nonsense 22", "",
			[]string{"127.0.0.1", "127.0.0.2"}, nil, "every address: SSH_CONNECTION"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("SSH_CONNECTION", tc.sshConnection)
			req := Request{Version: protocolVersion, Key: strings.Repeat("ab", keyLen), Dest: t.TempDir(),
				Contents: Contents{Mode: modeFile, Name: "f"}, Listen: tc.listen, Transport: "tcp", Timeout: time.Minute, Verbose: true}
			stdinR, stdinW := io.Pipe()
			stdoutR, stdoutW := io.Pipe()
			var stderr bytes.Buffer
			done := make(chan struct{})
			go func() {
				defer close(done)
				Serve(context.Background(), stdinR, stdoutW, &stderr)
				stdoutW.Close()
			}()
			go writeRequest(stdinW, req)
			port := readPort(t, stdoutR)
			go io.Copy(io.Discard, stdoutR)
			for _, host := range tc.reach {
				c, err := net.Dial("tcp", net.JoinHostPort(host, port))
				if err != nil {
					t.Errorf("%s: %v, want it listening there", host, err)
					continue
				}
				c.Close()
			}
			for _, host := range tc.refuse {
				if c, err := net.Dial("tcp", net.JoinHostPort(host, port)); err == nil {
					c.Close()
					t.Errorf("%s: connected, want nothing listening there", host)
				}
			}
			stdinW.Close() // the ssh session ends
			<-done
			if !strings.Contains(stderr.String(), tc.says) {
				t.Errorf("stderr %q, want it to say %q", stderr.String(), tc.says)
			}
		})
	}
}

// readPort returns the port the remote side reports on r.
func readPort(t *testing.T, r io.Reader) string {
	t.Helper()
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		st, err := parseStatus(sc.Text())
		if err != nil {
			t.Fatal(err)
		}
		if st.kind == "port" {
			return strconv.Itoa(int(st.n))
		}
		if st.valid {
			t.Fatalf("remote side: %s %d %s, want its port", st.kind, st.n, st.msg)
		}
	}
	t.Fatalf("no port from the remote side: %v", sc.Err())
	return ""
}

// TestNotWritable: an output refused for want of permission or by a
// read-only file system is a setup failure (DST not writable, exit 3);
// other output failures stay aborts.
func TestNotWritable(t *testing.T) {
	out := func(err error) error {
		return &conn.Error{Kind: conn.KindAborted, Op: "write output", Err: fmt.Errorf("extract: %w", err)}
	}
	for _, tc := range []struct {
		err  error
		want conn.Kind
	}{
		{out(syscall.EACCES), conn.KindSetup},
		{out(syscall.EPERM), conn.KindSetup},
		{out(syscall.EROFS), conn.KindSetup},
		{out(syscall.ENOSPC), conn.KindAborted},
		{&conn.Error{Kind: conn.KindAborted, Op: "finish /d", Err: fmt.Errorf("make directory %q: %w", "x", syscall.EPERM)}, conn.KindSetup},
		{&conn.Error{Kind: conn.KindAborted, Op: "finish /d", Err: syscall.ENOSPC}, conn.KindAborted},
		{&conn.Error{Kind: conn.KindAuth, Op: "handshake", Err: syscall.EPERM}, conn.KindAuth},
	} {
		if got := conn.KindOf(notWritable(tc.err, "/d")); got != tc.want {
			t.Errorf("%v: kind %v, want %v", tc.err, got, tc.want)
		}
	}
}
