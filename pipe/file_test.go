package pipe_test

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
	"golang.org/x/sys/unix"
)

// fileWith writes data to a new file in dir and returns it open for
// reading and writing, at offset off.
func fileWith(t *testing.T, data []byte, off int64) *os.File {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(t.TempDir(), "f"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	return f
}

func offset(t *testing.T, f *os.File) int64 {
	t.Helper()
	off, err := f.Seek(0, io.SeekCurrent)
	if err != nil {
		t.Fatal(err)
	}
	return off
}

// directAllowed reports whether f's file system lets f be opened with
// O_DIRECT.
func directAllowed(f *os.File) bool {
	fd, err := unix.Open(f.Name(), unix.O_RDONLY|unix.O_DIRECT, 0)
	if err != nil {
		return false
	}
	unix.Close(fd)
	return true
}

func TestFileInput(t *testing.T) {
	t.Parallel()
	const chunk = 64 << 10
	tests := []struct {
		name     string
		size     int
		off      int64
		uncached bool // drop the file from the page cache: O_DIRECT where allowed
		chunk    int  // the stream's chunk, if not chunk
	}{
		{"empty", 0, 0, false, 0},
		{"one byte", 1, 0, false, 0},
		{"chunk-1", chunk - 1, 0, false, 0},
		{"chunk", chunk, 0, false, 0},
		{"chunk+1", chunk + 1, 0, false, 0},
		{"many chunks", 37*chunk + 5, 0, false, 0},
		{"from an unaligned offset", 9*chunk + 3, 7, false, 0},
		{"from an aligned offset", 9*chunk + 3, 3 * 4096, false, 0},
		{"not cached", 21*chunk + 11, 0, true, 0},
		{"not cached, chunk multiple", 16 * chunk, 0, true, 0},
		{"not cached, chunk not a multiple of the page", 21*chunk + 11, 0, true, 1000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			data := randomBytes(tt.size, uint64(tt.size))
			f := fileWith(t, data, tt.off)
			if tt.uncached {
				if err := f.Sync(); err != nil {
					t.Fatal(err)
				}
				if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
					t.Fatal(err)
				}
			}
			c := chunk
			if tt.chunk != 0 {
				c = tt.chunk
			}
			r := stream{proposal: conn.NewParams(c, 4)}.run(t, context.Background(), f)
			if r.sendErr != nil || r.recvErr != nil {
				t.Fatalf("send: %v; receive: %v", r.sendErr, r.recvErr)
			}
			if !bytes.Equal(r.out.Bytes(), data[tt.off:]) {
				t.Fatalf("received %d bytes, want the %d after offset %d", len(r.out.Bytes()), len(data)-int(tt.off), tt.off)
			}
			want := "pread"
			if tt.uncached && c%4096 == 0 && directAllowed(f) {
				want = "pread O_DIRECT"
			}
			if r.send.IO != want {
				t.Errorf("sender read with %q, want %q", r.send.IO, want)
			}
			if got := offset(t, f); got != int64(tt.size) {
				t.Errorf("the file's offset is %d after the stream, want %d (its end)", got, tt.size)
			}
		})
	}
}

func TestFileOutput(t *testing.T) {
	t.Parallel()
	const chunk = 4096
	head := []byte("existing head\n")
	tests := []struct {
		name   string
		size   int
		append bool
		want   string // Stats.IO of the receiver
	}{
		{"empty", 0, false, "pwrite"},
		{"one chunk", chunk, false, "pwrite"},
		{"many chunks", 50*chunk + 9, false, "pwrite"},
		{"append mode", 50*chunk + 9, true, "write"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			data := randomBytes(tt.size, 11)
			f := fileWith(t, head, int64(len(head)))
			if tt.append {
				var err error
				f, err = os.OpenFile(f.Name(), os.O_WRONLY|os.O_APPEND, 0)
				if err != nil {
					t.Fatal(err)
				}
				defer f.Close()
			}
			r := stream{out: f}.run(t, context.Background(), bytes.NewReader(data))
			if r.sendErr != nil || r.recvErr != nil {
				t.Fatalf("send: %v; receive: %v", r.sendErr, r.recvErr)
			}
			if r.recv.IO != tt.want {
				t.Errorf("receiver wrote with %q, want %q", r.recv.IO, tt.want)
			}
			got, err := os.ReadFile(f.Name())
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, append(append([]byte(nil), head...), data...)) {
				t.Fatalf("the file holds %d bytes, want the %d-byte head and the %d of the stream", len(got), len(head), tt.size)
			}
			if off := offset(t, f); off != int64(len(got)) {
				t.Errorf("the file's offset is %d after the stream, want %d (its end)", off, len(got))
			}
		})
	}
}

func TestFileOutputFails(t *testing.T) {
	t.Parallel()
	f := fileWith(t, nil, 0)
	ro, err := os.Open(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	r := stream{out: ro}.run(t, context.Background(), bytes.NewReader(randomBytes(20*4096, 5)))
	checkErr(t, "receiver", r.recvErr, conn.KindAborted, "write output: write at offset 0")
	checkErr(t, "sender", r.sendErr, conn.KindAborted, `receiver aborted: "write output`)
}

// directIO is how the receiver writes to f: with O_DIRECT where f's file
// system takes it.
func directIO(t *testing.T, f *os.File) string {
	t.Helper()
	fd, err := unix.Open(f.Name(), unix.O_WRONLY|unix.O_DIRECT, 0)
	if err != nil {
		return "pwrite"
	}
	unix.Close(fd)
	return "pwrite O_DIRECT"
}

// TestFailedStreamKeepsWrites: when a stream fails, the receiver's byte
// count is what its output file holds (writes finished but not yet
// retired count too), and the file's offset is left there: a prefix of
// the stream that a resume can build on. The sender's input fails at its
// end, many times over, so that the abort meets writes in every state;
// with chunks of 64 KiB too, whose buffers are page-aligned, so that the
// file is written with O_DIRECT where its file system takes it.
func TestFailedStreamKeepsWrites(t *testing.T) {
	t.Parallel()
	in := randomBytes(64*4096, 9)
	for i := range 50 {
		f := fileWith(t, nil, 0)
		s := stream{out: f}
		if i%2 == 1 {
			s.proposal = conn.NewParams(64<<10, 4)
		}
		r := s.run(t, context.Background(), failingReader{bytes.NewReader(in)})
		checkErr(t, "receiver", r.recvErr, conn.KindAborted, `sender aborted: "read input`)
		if want := directIO(t, f); i == 1 && r.recv.IO != want {
			t.Errorf("64 KiB chunks written with %q, want %q", r.recv.IO, want)
		}
		got, err := os.ReadFile(f.Name())
		if err != nil {
			t.Fatal(err)
		}
		if int64(len(got)) != r.recv.Bytes || !bytes.HasPrefix(in, got) {
			t.Fatalf("run %d: the receiver counts %d bytes written, its file holds %d (a prefix of the stream: %v)", i, r.recv.Bytes, len(got), bytes.HasPrefix(in, got))
		}
		if off := offset(t, f); off != r.recv.Bytes {
			t.Fatalf("run %d: the file's offset is %d, want %d (after what was written)", i, off, r.recv.Bytes)
		}
	}
}
