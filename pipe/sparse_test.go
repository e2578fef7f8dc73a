package pipe_test

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/rdmapipe/rdmapipe/internal/testutil"
	"github.com/rdmapipe/rdmapipe/pipe"
	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

// TestSparseOutput: with ReceiveConfig.Sparse the blocks of zeros of a file
// output become holes, past what the file held; the content is exact and
// the file as long as the stream.
func TestSparseOutput(t *testing.T) {
	t.Parallel()
	const mib = 1 << 20
	stream1 := make([]byte, 16*mib)
	copy(stream1[3*mib:], bytes.Repeat([]byte("data"), 1000))
	copy(stream1[9*mib+1:], "x")
	cases := []struct {
		name    string
		head    []byte // the file's content before the stream
		off     int64  // where the stream starts
		data    []byte
		most    int64 // the room the file may take at most
		atLeast int64 // and at least
	}{
		{"zeros at both ends", nil, 0, stream1, 64 << 10, 8 << 10},
		{"all zeros", nil, 0, make([]byte, 8*mib), 0, 0},
		{"no zeros", nil, 0, bytes.Repeat([]byte{7}, mib+3), 2 * mib, mib},
		{"after a head", []byte("head"), 4, stream1, 64 << 10, 8 << 10},
		{"over old content", bytes.Repeat([]byte{1}, 2*mib), 0, make([]byte, 4*mib), 3 * mib, 2 * mib},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := fileWith(t, tc.head, tc.off)
			r := stream{out: f, proposal: conn.NewParams(64<<10, 4), recvCfg: pipe.ReceiveConfig{Sparse: true}}.run(t, context.Background(), bytes.NewReader(tc.data))
			if r.sendErr != nil || r.recvErr != nil {
				t.Fatalf("send: %v; receive: %v", r.sendErr, r.recvErr)
			}
			if r.recv.IO != "pwrite sparse" {
				t.Errorf("receiver wrote with %q, want %q", r.recv.IO, "pwrite sparse")
			}
			got, err := os.ReadFile(f.Name())
			if err != nil {
				t.Fatal(err)
			}
			want := append(append([]byte(nil), tc.head[:tc.off]...), tc.data...)
			if len(tc.head) > len(want) {
				want = append(want, tc.head[len(want):]...)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("the file holds %d bytes, not the %d expected", len(got), len(want))
			}
			if room := testutil.Allocated(t, f.Name()); room > tc.most || room < tc.atLeast {
				t.Fatalf("the file takes %d bytes on disk, want %d to %d", room, tc.atLeast, tc.most)
			}
			if off := offset(t, f); off != tc.off+int64(len(tc.data)) {
				t.Errorf("the file's offset is %d after the stream, want %d", off, tc.off+int64(len(tc.data)))
			}
		})
	}
}

// TestSparseOutputRefused: ReceiveConfig.Sparse needs a regular file that is not
// in append mode.
func TestSparseOutputRefused(t *testing.T) {
	t.Parallel()
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	defer pw.Close()
	app, err := os.OpenFile(filepath.Join(t.TempDir(), "f"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	cases := []struct {
		name string
		out  io.Writer
		says string
	}{
		{"pipe", pw, "not a regular file but a pipe"},
		{"append mode", app, "opened for appending"},
		{"buffer", &bytes.Buffer{}, "must be a regular file"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if err := pipe.SparseOutput(tc.out); err == nil || !bytes.Contains([]byte(err.Error()), []byte(tc.says)) {
				t.Fatalf("SparseOutput: %v, want it to say %q", err, tc.says)
			}
			r := stream{out: tc.out, recvCfg: pipe.ReceiveConfig{Sparse: true}}.run(t, context.Background(), bytes.NewReader([]byte("x")))
			checkErr(t, "receiver", r.recvErr, conn.KindUsage, tc.says)
		})
	}
}
