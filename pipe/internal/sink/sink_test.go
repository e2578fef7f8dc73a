package sink

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// errWriter fails every write after ok bytes.
type errWriter struct{ ok int }

func (w *errWriter) Write(p []byte) (int, error) {
	if len(p) > w.ok {
		n := w.ok
		w.ok = 0
		return n, errors.New("no room")
	}
	w.ok -= len(p)
	return len(p), nil
}

// TestCloseCountsFinished: writes that finished but were never retired
// (the stream failed first) are counted by Close, up to the first that
// failed, and a file's offset is left after them: a failed stream keeps
// the longest prefix that reached the output.
func TestCloseCountsFinished(t *testing.T) {
	payloads := [][]byte{bytes.Repeat([]byte("a"), 1000), bytes.Repeat([]byte("b"), 3000), bytes.Repeat([]byte("c"), 500)}
	cases := []struct {
		name    string
		out     func(t *testing.T) io.Writer
		retired int   // writes retired before Close
		want    int64 // what Close returns over the bytes retired
		offset  int64 // a file's offset after Close (-1: not a file)
	}{
		{name: "file, none retired", out: file(os.O_RDWR), want: 4500, offset: 4500},
		{name: "file, one retired", out: file(os.O_RDWR), retired: 1, want: 3500, offset: 4500},
		{name: "file, all retired", out: file(os.O_RDWR), retired: 3, want: 0, offset: 4500},
		{name: "file that takes no write", out: file(os.O_RDONLY), want: 0, offset: 0},
		{name: "stream", out: func(*testing.T) io.Writer { return &bytes.Buffer{} }, retired: 2, want: 500, offset: -1},
		{name: "stream whose last write failed", out: func(*testing.T) io.Writer { return &errWriter{ok: 4200} }, retired: 2, want: 0, offset: -1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := tc.out(t)
			s, err := New(w, 4, false)
			if err != nil {
				t.Fatal(err)
			}
			var written int64
			for i, p := range payloads {
				s.Start(i, p)
				if s.Pending() == s.Limit() || i < tc.retired {
					<-s.Oldest().Done
					if i < tc.retired {
						written += int64(s.Oldest().N)
						s.Retire()
					}
				}
			}
			if got := s.Close(written) - written; got != tc.want {
				t.Errorf("Close(%d) = %d more, want %d", written, got, tc.want)
			}
			if tc.offset < 0 {
				return
			}
			f := w.(*os.File)
			if off, _ := f.Seek(0, io.SeekCurrent); off != tc.offset {
				t.Errorf("offset %d after Close, want %d", off, tc.offset)
			}
		})
	}
}

// file opens a new file in a test directory with flag.
func file(flag int) func(t *testing.T) io.Writer {
	return func(t *testing.T) io.Writer {
		name := filepath.Join(t.TempDir(), "out")
		if err := os.WriteFile(name, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		f, err := os.OpenFile(name, flag, 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return f
	}
}

// aligned returns n bytes of page-aligned memory holding a pattern from
// seed, as a receive buffer is.
func aligned(t *testing.T, n int, seed byte) []byte {
	t.Helper()
	b, err := unix.Mmap(-1, 0, (n+directAlign-1)&^(directAlign-1), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(b) })
	for i := range n {
		b[i] = seed + byte(i*7)
	}
	return b[:n]
}

// resident says which of the pages of the file f holds are in the page
// cache.
func resident(t *testing.T, f *os.File, size int) []bool {
	t.Helper()
	m, err := unix.Mmap(int(f.Fd()), 0, size, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(m)
	vec := make([]byte, (size+directAlign-1)/directAlign)
	if _, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0]))); errno != 0 {
		t.Fatal(errno)
	}
	in := make([]bool, len(vec))
	for i, v := range vec {
		in[i] = v&1 != 0
	}
	return in
}

// TestDirectWrites writes aligned payloads, an unaligned tail, a payload
// after it and one from unaligned memory, to a file in the test directory
// and to one on tmpfs: each file holds the stream exactly, and where
// O_DIRECT was taken (tmpfs takes it only since Linux 6.6, and is the
// page cache itself) the aligned payloads did not pass through the page
// cache, the rest did.
func TestDirectWrites(t *testing.T) {
	for _, dir := range []string{t.TempDir(), "/dev/shm"} {
		t.Run(dir, func(t *testing.T) {
			f, err := os.CreateTemp(dir, "sink")
			if err != nil {
				t.Fatal(err)
			}
			defer os.Remove(f.Name())
			defer f.Close()
			direct := openDirect(f)
			if direct >= 0 {
				unix.Close(direct)
			}
			unaligned := aligned(t, 2*directAlign+1, 9)[1:]
			payloads := [][]byte{aligned(t, 3*directAlign, 1), aligned(t, directAlign+100, 2), aligned(t, 2*directAlign, 3), unaligned}
			s, err := New(f, 4, false)
			if err != nil {
				t.Fatal(err)
			}
			want := map[bool]string{true: "pwrite O_DIRECT", false: "pwrite"}[direct >= 0]
			if s.Describe() != want {
				t.Errorf("%s, want %s", s.Describe(), want)
			}
			var stream []byte
			for i, p := range payloads {
				s.Start(i, p)
				<-s.Oldest().Done
				if w := s.Oldest(); w.Err != nil || w.N != len(p) {
					t.Fatalf("write %d: %d bytes, %v", i, w.N, w.Err)
				}
				s.Retire()
				stream = append(stream, p...)
			}
			s.Close(int64(len(stream)))
			var st unix.Statfs_t
			if err := unix.Fstatfs(int(f.Fd()), &st); err != nil {
				t.Fatal(err)
			}
			if direct >= 0 && st.Type != unix.TMPFS_MAGIC { // tmpfs is the page cache
				in := resident(t, f, len(stream))
				if slices.Contains(in[:4], true) || !in[4] {
					t.Errorf("pages in the cache %v: want the first 4 not (written with O_DIRECT), the 5th (the tail) so", in)
				}
			}
			if got, err := os.ReadFile(f.Name()); err != nil || !bytes.Equal(got, stream) {
				t.Fatalf("the file holds %d bytes (%v), not the stream's %d", len(got), err, len(stream))
			}
		})
	}
}

// TestDirectFallback: a direct write that fails leaves the payload, and
// every later one, to the cache, and the file is exact.
func TestDirectFallback(t *testing.T) {
	f := file(os.O_RDWR)(t).(*os.File)
	s, err := New(f, 4, false)
	if err != nil {
		t.Fatal(err)
	}
	fs := s.(*fileSink)
	if fs.direct < 0 {
		if os.Getenv("RDMAPIPE_STRICT") != "" {
			t.Fatal("the test directory's file system does not take O_DIRECT (RDMAPIPE_STRICT is set)")
		}
		t.Skip("the test directory's file system does not take O_DIRECT")
	}
	unix.Close(fs.direct)
	if fs.direct, err = unix.Open(f.Name(), unix.O_RDONLY, 0); err != nil { // writes fail: EBADF
		t.Fatal(err)
	}
	p := aligned(t, 2*directAlign, 5)
	s.Start(0, p)
	<-s.Oldest().Done
	if w := s.Oldest(); w.Err != nil || w.N != len(p) || fs.direct != -1 {
		t.Fatalf("%d bytes, %v; the direct descriptor %d, want -1", w.N, w.Err, fs.direct)
	}
	s.Retire()
	s.Close(int64(len(p)))
	if got, _ := os.ReadFile(f.Name()); !bytes.Equal(got, p) {
		t.Errorf("the file holds %d bytes, not the %d written", len(got), len(p))
	}
}

// TestDirectNotReadOnly: a file opened read-only gets no O_DIRECT twin,
// which could write where the file itself cannot; an aligned payload
// fails as it would without the twin, and the file is not written.
func TestDirectNotReadOnly(t *testing.T) {
	f := file(os.O_RDONLY)(t).(*os.File)
	s, err := New(f, 4, false)
	if err != nil {
		t.Fatal(err)
	}
	if s.Describe() != "pwrite" {
		t.Errorf("a read-only file written with %q", s.Describe())
	}
	s.Start(0, aligned(t, directAlign, 1))
	<-s.Oldest().Done
	if w := s.Oldest(); w.Err == nil || w.N != 0 {
		t.Errorf("a write to a read-only file: %d bytes, %v", w.N, w.Err)
	}
	s.Close(0)
	if fi, err := os.Stat(f.Name()); err != nil || fi.Size() != 0 {
		t.Errorf("the read-only file: %v, %v; want it empty", fi, err)
	}
}
