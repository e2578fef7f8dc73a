package cp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rdmapipe/rdmapipe/internal/cp/proto"
	"github.com/rdmapipe/rdmapipe/pipe"
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
			req := proto.Request{Version: proto.Version, Key: hex.EncodeToString(proto.NewKey()), Dest: t.TempDir(),
				Contents: proto.Contents{Mode: proto.ModeFile, Name: "f"}, Listen: tc.listen, Transport: "tcp", Timeout: time.Minute, Verbose: true}
			stdinR, stdinW := io.Pipe()
			stdoutR, stdoutW := io.Pipe()
			var stderr bytes.Buffer
			done := make(chan struct{})
			go func() {
				defer close(done)
				Serve(context.Background(), stdinR, stdoutW, &stderr)
				stdoutW.Close()
			}()
			go proto.WriteRequest(stdinW, req)
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
		st, err := proto.ParseStatus(sc.Text())
		if err != nil {
			t.Fatal(err)
		}
		if st.Kind == "port" {
			return strconv.Itoa(int(st.N))
		}
		if st.Valid {
			t.Fatalf("remote side: %s %d %s, want its port", st.Kind, st.N, st.Msg)
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

// TestBetweenResult: the sending side of a copy between remote hosts
// says it could not connect (see remote.CannotConnect) only when connecting
// failed; any other failure before the stream is a setup failure as it
// is, and one after the stream began keeps its kind.
func TestBetweenResult(t *testing.T) {
	const addr = "10.0.0.2:4000"
	dial := &dialError{addr: addr, err: conn.Errorf(conn.KindSetup, "connect "+addr, "no route to host")}
	cases := []struct {
		name  string
		began bool
		err   error
		kind  conn.Kind
		says  string // the error's start
	}{
		{"connecting failed", false, dial, conn.KindSetup, "cannot connect to " + addr + ": connect " + addr + ": no route to host"},
		{"the receiver refused", false, conn.Errorf(conn.KindSetup, "", "receiver refused the connection: busy"), conn.KindSetup, "receiver refused"},
		{"dropped in the handshake", false, conn.Errorf(conn.KindAborted, "handshake", "reset"), conn.KindSetup, "handshake: reset"},
		{"in mid-stream", true, conn.Errorf(conn.KindAborted, "send", "reset"), conn.KindAborted, "send: reset"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := betweenResult(context.Background(), pipe.Stats{Began: tc.began}, tc.err, addr, Options{}, -1)
			if conn.KindOf(err) != tc.kind || !strings.HasPrefix(err.Error(), tc.says) {
				t.Fatalf("got %v (%v), want %v starting %q", err, conn.KindOf(err), tc.kind, tc.says)
			}
			if tc.err != error(dial) && strings.Contains(err.Error(), "cannot connect") {
				t.Fatalf("%v says it could not connect", err)
			}
		})
	}
}

// TestReadConnect: the sending side of a copy between two remote hosts
// takes one connect line, an IP address and port, and nothing else.
func TestReadConnect(t *testing.T) {
	cases := []struct {
		line string
		ok   bool
	}{
		{`{"connect":"10.0.0.2:4000"}`, true},
		{`{"connect":"[fe80::1]:4000"}`, true},
		{`{"connect":"evil.example:80"}`, false}, // a name, looked up there
		{`{"connect":"10.0.0.2"}`, false},
		{`{"connect":""}`, false},
		{`{"connect":"10.0.0.2:4000","to":"x"}`, false},
		{`{"connect":"10.0.0.2:4000"} {}`, false},
		{strings.Repeat("x", proto.MaxRequestLine+10), false},
		{"", false}, // the ssh channel ended
	}
	for _, tc := range cases {
		in := tc.line + "\n"
		if tc.line == "" {
			in = ""
		}
		addr, err := readConnect(bufio.NewReader(strings.NewReader(in)))
		if (err == nil) != tc.ok {
			t.Errorf("%.40q: %v, want ok %v", tc.line, err, tc.ok)
		}
		if err != nil && conn.KindOf(err) != conn.KindSetup {
			t.Errorf("%.40q: %v is not a setup failure", tc.line, err)
		}
		if err == nil && addr == "" {
			t.Errorf("%.40q: no address", tc.line)
		}
	}
}

// TestPlanSendPattern: the remote side plans a lone pattern's one match,
// or the literal name it stands for, as one source (a file, under its
// name); several matches as an archive of them; nothing there as one
// missing source.
func TestPlanSendPattern(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{"g[1]", "a.txt", "b.txt", "one.log"} {
		if err := os.WriteFile(filepath.Join(dir, n), []byte(n), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		src  string
		want proto.Contents // its mode and name or names
	}{
		{"g[1]", proto.Contents{Mode: proto.ModeFile, Name: "g[1]"}},
		{"*.log", proto.Contents{Mode: proto.ModeFile, Name: "one.log"}},
		{"*.txt", proto.Contents{Mode: proto.ModeTar, Names: []string{"a.txt", "b.txt"}, Counts: []int{2}}},
		{"*.none", proto.Contents{}},
	} {
		p, in, c, err := planSend(proto.Request{Send: []string{dir + "/" + tc.src}}, io.Discard)
		if in != nil {
			in.Close()
		}
		switch {
		case tc.want.Mode == "" && err == nil:
			t.Errorf("%s: planned %+v, want no such file", tc.src, c)
		case tc.want.Mode == "":
		case err != nil:
			t.Errorf("%s: %v", tc.src, err)
		case c.Mode != tc.want.Mode || c.Name != tc.want.Name || !slices.Equal(c.Names, tc.want.Names) || !slices.Equal(c.Counts, tc.want.Counts) || c.Single || p.Several != (c.Mode == proto.ModeTar):
			t.Errorf("%s: planned %+v (several %v), want %+v", tc.src, c, p.Several, tc.want)
		}
	}
}
