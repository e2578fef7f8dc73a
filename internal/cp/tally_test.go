package cp

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rdmapipe/rdmapipe/internal/cp/filter"
	"github.com/rdmapipe/rdmapipe/internal/cp/meta"
)

// TestTallyLine draws a tree's progress line off a terminal (a line
// each drawing): given the totals and the entries and bytes that pass,
// the counts it ends with (files sent, entries left of the total, as
// rsync's --info=progress2), where it stops after a failure, and that it
// never goes past the totals. The first drawing comes at once, the
// others a second apart at most: within the test only the last.
func TestTallyLine(t *testing.T) {
	t.Parallel()
	type event struct {
		bytes int64 // data bytes passing
		entry byte  // an entry of this type passing after them; 0: none
	}
	tests := []struct {
		name         string
		files, bytes int64
		events       []event
		err          error // how the copy ends
		want         []string
	}{
		{
			name: "a tree", files: 3, bytes: 4 << 20,
			events: []event{{0, tar.TypeDir}, {2 << 20, tar.TypeReg}, {2 << 20, tar.TypeReg}},
			want:   []string{"   0% |                    | ( 0 B/4.0 MiB) [0s:0s] (xfr#0, to-chk=2/3)", " 100% |████████████████████| (4.0/4.0 MiB, "},
		},
		{
			name: "a failure: the line ends where the copy stopped", files: 4, bytes: 10 << 20,
			events: []event{{0, tar.TypeDir}, {1 << 20, tar.TypeReg}},
			err:    errors.New("lost"),
			want:   []string{"   0% ", "  10% |██                  | (1.0/10 MiB, "},
		},
		{
			name: "a failure before any line draws none", files: 4, bytes: 10,
			err: errors.New("refused"),
		},
		{
			name: "totals that lie are never passed", files: 1, bytes: 10,
			events: []event{{20, tar.TypeReg}, {0, tar.TypeSymlink}},
			want:   []string{"   0% ", " 100% |████████████████████| (10/10 B, "},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var out bytes.Buffer
			tl := newTallyOn(&out, true, tt.files, tt.bytes)
			for _, e := range tt.events {
				if e.bytes > 0 {
					tl.add(e.bytes)
				}
				if e.entry != 0 {
					tl.entry(e.entry)
				}
			}
			tl.end(tt.err)
			lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
			if out.Len() == 0 {
				lines = nil
			}
			if len(lines) != len(tt.want) {
				t.Fatalf("printed %d lines, want %d:\n%s", len(lines), len(tt.want), out.String())
			}
			for i, w := range tt.want {
				if !strings.Contains(lines[i], w) {
					t.Errorf("line %d %q lacks %q", i+1, lines[i], w)
				}
			}
			if tt.err == nil && len(lines) > 0 && !strings.HasSuffix(lines[len(lines)-1], fmt.Sprintf("(xfr#%d, to-chk=0/%d)", tl.xfr.Load(), tt.files)) {
				t.Errorf("the last line %q does not end with every entry passed", lines[len(lines)-1])
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
	p, err := planCopy([]string{src}, true, false, rules)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		keep         meta.Flags
		files, bytes int64
	}{
		{meta.Flags{}, 6, 1200},
		{meta.Flags{Links: true}, 6, 1100},
	} {
		if files, bytes := countTree(p.srcs, tc.keep); files != tc.files || bytes != tc.bytes {
			t.Errorf("%+v: %d entries, %d bytes; want %d, %d", tc.keep, files, bytes, tc.files, tc.bytes)
		}
	}
}
