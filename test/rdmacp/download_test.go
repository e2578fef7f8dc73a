package rdmacp

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rdmapipe/rdmapipe/internal/testutil"
)

// TestDownload copies from the remote host: single files (into a
// directory, to a new name, with -p), trees and several sources, each
// exact, with the summary saying how the stream was protected.
func TestDownload(t *testing.T) {
	t.Parallel()
	s := startSSHD(t)
	src := t.TempDir()
	file := filepath.Join(src, "weights.bin")
	makeFile(t, file, 5<<20+3, false)
	mtime := time.Date(2001, 2, 3, 4, 5, 6, 789, time.UTC)
	if err := os.Chmod(file, 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(file, mtime, mtime); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(src, "empty")
	makeFile(t, empty, 0, false)
	tree := filepath.Join(src, "tree")
	makeTree(t, tree)
	exact := func(m os.FileMode) os.FileMode { return m }
	cases := []struct {
		name  string
		flags []string
		srcs  []string
		dst   string            // relative to a new directory; "" is the directory itself
		want  map[string]string // source -> where it must land, relative to that directory
		says  string            // in -v's summary
	}{
		{"file into a directory", []string{"-v"}, []string{file}, "", map[string]string{file: "weights.bin"}, "encrypted (AES-256-GCM)"},
		{"file to a new name, -p", []string{"-v", "-p"}, []string{file}, "w", map[string]string{file: "w"}, "bytes in"},
		{"empty file", nil, []string{empty}, "", map[string]string{empty: "empty"}, ""},
		{"unencrypted", []string{"-v", "--no-encrypt"}, []string{file}, "", map[string]string{file: "weights.bin"}, "not encrypted (authenticated with aes-gmac)"},
		{"tree, -p", []string{"-r", "-p"}, []string{tree}, "", map[string]string{tree: "tree"}, ""},
		{"tree to a new name", []string{"-r", "-p"}, []string{tree}, "copy", map[string]string{tree: "copy"}, ""},
		{"several sources", []string{"-r", "-p"}, []string{tree, file}, "", map[string]string{tree: "tree", file: "weights.bin"}, ""},
		{"tree as dir/", []string{"-r", "-p"}, []string{tree + "/"}, "", map[string]string{tree: "tree"}, ""},
		{"tree as dir/. to a new name", []string{"-r", "-p"}, []string{tree + "/."}, "copy", map[string]string{tree: "copy"}, ""},
		{"several files without -r", []string{"-p"}, []string{file, empty}, "", map[string]string{file: "weights.bin", empty: "empty"}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			args := tc.flags
			for _, p := range tc.srcs {
				args = append(args, "target:"+p)
			}
			r := s.rdmacp(t, append(args, filepath.Join(dir, tc.dst))...)
			if r.code != 0 || !strings.Contains(r.stderr, tc.says) {
				t.Fatalf("exit %d, want 0 saying %q: %s", r.code, tc.says, r.stderr)
			}
			for from, to := range tc.want {
				got := filepath.Join(dir, to)
				fi, err := os.Stat(from)
				if err != nil {
					t.Fatal(err)
				}
				if fi.IsDir() {
					sameTree(t, from, got, exact)
					continue
				}
				if hashFile(t, from) != hashFile(t, got) {
					t.Fatalf("%s: content differs", got)
				}
				gi, err := os.Stat(got)
				if err != nil {
					t.Fatal(err)
				}
				if preserve := strings.Contains(strings.Join(tc.flags, " "), "-p"); preserve && (gi.Mode() != fi.Mode() || !gi.ModTime().Equal(fi.ModTime())) {
					t.Errorf("-p: %v %v, want %v %v", gi.Mode(), gi.ModTime(), fi.Mode(), fi.ModTime())
				}
				noLeftovers(t, filepath.Dir(got), filepath.Base(got))
			}
			noStrays(t)
		})
	}
}

// TestDownloadSparse downloads a file with holes, alone and in a tree: it
// arrives exact, with its holes, and only its data travels.
func TestDownloadSparse(t *testing.T) {
	t.Parallel()
	s := startSSHD(t)
	src := t.TempDir()
	name := filepath.Join(src, "disk.img")
	sparseFile(t, name, 64<<20, 0, 40<<20)
	for _, flags := range [][]string{{"-v"}, {"-v", "-r"}} {
		dst := t.TempDir()
		from := name
		if len(flags) == 2 {
			from = src
		}
		r := s.rdmacp(t, append(flags, "target:"+from, dst+"/")...)
		if r.code != 0 {
			t.Fatalf("%v: exit %d: %s", flags, r.code, r.stderr)
		}
		got := filepath.Join(dst, "disk.img")
		if len(flags) == 2 {
			got = filepath.Join(dst, filepath.Base(src), "disk.img")
		}
		if hashFile(t, name) != hashFile(t, got) {
			t.Fatalf("%v: content differs", flags)
		}
		if room := testutil.Allocated(t, got); room > 3<<20 {
			t.Errorf("%v: the copy takes %d bytes on disk for 2 MiB of data", flags, room)
		}
		noStrays(t)
	}
}
