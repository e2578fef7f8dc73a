package e2e

import (
	"bytes"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/zeebo/xxh3"

	"github.com/rdmapipe/rdmapipe/internal/testutil"
)

// sparseInput writes a file of size bytes that is zeros but for 1 MiB of
// random data at off, and returns its path and digest.
func sparseInput(t *testing.T, size, off int64) (string, digest) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "input")
	f := createFile(t, path)
	data := make([]byte, 1<<20)
	rand.NewChaCha8([32]byte{9}).Read(data)
	if _, err := f.WriteAt(data, off); err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	h := xxh3.New()
	if _, err := io.Copy(h, openFile(t, path)); err != nil {
		t.Fatal(err)
	}
	return path, digestOf(h)
}

// TestSparse: rdmarecv --sparse writes the zeros of the stream as holes,
// through a relay too (each hop writes its own output sparse); the files
// hold exactly the stream, in a fraction of its size on disk.
func TestSparse(t *testing.T) {
	t.Parallel()
	const size = 64 << 20
	in, want := sparseInput(t, size, 20<<20+5)
	hops, ports, outs := relayChain(t, 2, "--sparse")
	s := send(t, ports[0], openFile(t, in))
	code, stderr := s.wait(time.Minute)
	expect(t, "rdmasend", code, stderr, 0, "")
	for i, r := range hops {
		code, stderr = r.wait(30 * time.Second)
		expect(t, "rdmarecv --sparse", code, stderr, 0, "")
		if got, n := fileSum(t, outs[i]); got != want || n != size {
			t.Fatalf("%s: %d bytes that differ from the input's %d", outs[i], n, int64(size))
		}
		if room := testutil.Allocated(t, outs[i]); room > 4<<20 {
			t.Errorf("%s takes %d bytes on disk for 1 MiB of data", outs[i], room)
		}
	}
}

// TestSparseRefused: --sparse is a usage error unless standard output is
// a regular file that is not in append mode.
func TestSparseRefused(t *testing.T) {
	t.Parallel()
	appended, err := os.OpenFile(filepath.Join(t.TempDir(), "log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer appended.Close()
	cases := []struct {
		name string
		out  io.Writer
		says string
	}{
		{"pipe", &bytes.Buffer{}, "not a regular file but a pipe"},
		{"append mode", appended, "opened for appending"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := recv(t, testutil.FreePort(t), tc.out, "--sparse")
			code, stderr := p.wait(30 * time.Second)
			expect(t, "rdmarecv --sparse", code, stderr, 2, "--sparse needs standard output to be a regular file", tc.says)
		})
	}
}
