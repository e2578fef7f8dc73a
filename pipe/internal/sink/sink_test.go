package sink

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
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
