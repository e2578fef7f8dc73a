package tree

import (
	"archive/tar"
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rdmapipe/rdmapipe/internal/cp/filter"
	"github.com/rdmapipe/rdmapipe/internal/cp/meta"
)

// TestTallyLine drives a tree's progress line on a fake clock: given the
// totals and the entries and bytes that pass at given times, the lines it
// prints, on a terminal (redrawn in place) and off one (a line each).
func TestTallyLine(t *testing.T) {
	t.Parallel()
	type event struct {
		after time.Duration // clock advance before it
		bytes int64         // data bytes passing
		entry byte          // an entry of this type passing after them; 0: none
	}
	tests := []struct {
		name         string
		lines        bool
		files, bytes int64
		events       []event
		err          error // how the copy ends
		want         []string
	}{
		{
			name: "a tree on a terminal", files: 3, bytes: 4 << 20,
			events: []event{{0, 0, tar.TypeDir}, {time.Second, 2 << 20, tar.TypeReg}, {100 * time.Millisecond, 1, 0}, {time.Second, 2<<20 - 1, tar.TypeReg}},
			want: []string{
				"\r       0 B   0%      - MB/s  -:--:-- (xfr#0, to-chk=2/3)",
				"\r   2.0 MiB  50%    2.1 MB/s  0:00:01 (xfr#0, to-chk=2/3)", // the file's last bytes, not yet the file
				"\r   4.0 MiB 100%    2.0 MB/s  0:00:00 (xfr#1, to-chk=1/3)",
				"\r   4.0 MiB 100%    2.0 MB/s  0:00:02 (xfr#2, to-chk=0/3)\n", // the time taken
			},
		},
		{
			name: "off a terminal, a line a second at most", lines: true, files: 2, bytes: 3e6,
			events: []event{{0, 1e6, tar.TypeReg}, {500 * time.Millisecond, 1e6, 0}, {500 * time.Millisecond, 1e6, tar.TypeReg}},
			want: []string{
				" 976.6 KiB  33%      - MB/s  -:--:-- (xfr#0, to-chk=2/2)\n",
				"   2.9 MiB 100%    3.0 MB/s  0:00:00 (xfr#1, to-chk=1/2)\n",
				"   2.9 MiB 100%    3.0 MB/s  0:00:01 (xfr#2, to-chk=0/2)\n",
			},
		},
		{
			name: "no bytes: the entries make the percentage", files: 4,
			events: []event{{time.Second, 0, tar.TypeDir}},
			err:    errors.New("lost"),
			want: []string{
				"\r       0 B  25%      - MB/s  -:--:-- (xfr#0, to-chk=3/4)",
				"\r       0 B  25%      - MB/s  0:00:01 (xfr#0, to-chk=3/4)\n", // where it stopped
			},
		},
		{
			name: "a failure before any line draws none", files: 4, bytes: 10,
			err: errors.New("refused"),
		},
		{
			name: "totals that lie are never passed", files: 1, bytes: 10,
			events: []event{{0, 20, tar.TypeReg}, {0, 0, tar.TypeSymlink}},
			want: []string{
				"\r      20 B 100%      - MB/s  -:--:-- (xfr#0, to-chk=1/1)",
				"\r      20 B 100%      - MB/s  0:00:00 (xfr#1, to-chk=0/1)\n",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			now := time.Unix(1000, 0)
			var out bytes.Buffer
			tl := NewTally(&out, tt.lines, tt.files, tt.bytes, func() time.Time { return now })
			for _, e := range tt.events {
				now = now.Add(e.after)
				if e.bytes > 0 {
					tl.add(e.bytes)
				}
				if e.entry != 0 {
					tl.entry(e.entry)
				}
			}
			tl.End(tt.err)
			if got, want := out.String(), strings.Join(tt.want, ""); got != want {
				t.Errorf("printed\n%q\nwant\n%q", got, want)
			}
		})
	}
}

// TestCountTree counts a tree as its archive holds it: the entries the
// walk hands over (not what the rules exclude, nor a socket), and the
// bytes of its files, a hard link's once with -H.
func TestCountTree(t *testing.T) {
	t.Parallel()
	src := t.TempDir()
	mk := func(name string, size int) {
		if err := os.WriteFile(filepath.Join(src, name), make([]byte, size), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(src, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	mk("a", 100)
	mk("d/b", 1000)
	mk("d/skip.o", 5000)
	if err := os.Link(filepath.Join(src, "a"), filepath.Join(src, "d/a2")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("a", filepath.Join(src, "l")); err != nil {
		t.Fatal(err)
	}
	rules, err := filter.Parse([]string{"- *.o"})
	if err != nil {
		t.Fatal(err)
	}
	srcs := []Source{{Path: src, Name: filepath.Base(src), Rules: rules}}
	for _, tc := range []struct {
		keep         meta.Flags
		files, bytes int64
	}{
		{meta.Flags{}, 6, 1200},
		{meta.Flags{Links: true}, 6, 1100},
	} {
		if files, bytes := CountTree(srcs, tc.keep); files != tc.files || bytes != tc.bytes {
			t.Errorf("%+v: %d entries, %d bytes; want %d, %d", tc.keep, files, bytes, tc.files, tc.bytes)
		}
	}
}
