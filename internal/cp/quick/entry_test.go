package quick

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"
)

// TestListingRefuses checks that a peer's listing cannot name what is
// outside the copy's names, nor break its bounds.
func TestListingRefuses(t *testing.T) {
	t.Parallel()
	dir := Entry{Name: "t", Type: Dir}
	for _, e := range []Entry{
		{Name: "../t", Type: File},
		{Name: "/etc/passwd", Type: File},
		{Name: "t/../x", Type: File},
		{Name: "t//x", Type: File},
		{Name: "t/./x", Type: File},
		{Name: "t/x/", Type: File},
		{Name: "u/x", Type: File},
		{Name: "t/a/b", Type: File},
		{Name: "t/x\x00y", Type: File},
		{Name: "t/" + strings.Repeat("x", MaxElem+1), Type: File},
		{Name: "t/x", Type: "c"},
		{Name: "t/x", Type: File, Size: -1},
		{Name: "t/x", Type: Dir, Size: 1},
		{Name: "t/x", Type: File, Mode: 0o10000},
		{Name: "t/x", Type: File, Link: "y"},
		{Name: "t/x", Type: File, Hash: "00"},
		{Name: "t", Type: Dir},
	} {
		l := NewListing([]string{"t"})
		if err := l.Add(dir); err != nil {
			t.Fatal(err)
		}
		if err := l.Add(e); err == nil {
			t.Errorf("%+v: added", e)
		}
	}
}

// TestList checks a listing's entries, and that it does not go through a
// link.
func TestList(t *testing.T) {
	t.Parallel()
	outside := t.TempDir()
	os.WriteFile(filepath.Join(outside, "secret"), []byte("s"), 0o600)
	top := makeTree(t, t.TempDir(), []node{{"a", "data", 0}, {"d/", "", 0}})
	os.Symlink(outside, filepath.Join(top, "out"))
	list, err := List(top, "t", How{Hash: true})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]Entry{}
	for _, e := range list {
		got[e.Name] = e
	}
	if len(got) != 4 || got["t"].Type != Dir || got["t/d"].Type != Dir || got["t/out"].Link != outside {
		t.Fatalf("listed %+v", list)
	}
	if a := got["t/a"]; a.Type != File || a.Size != 4 || a.MTime != t0.UnixNano() || a.Mode != 0o644 || len(a.Hash) != 2*hashLen {
		t.Errorf("t/a: %+v", a)
	}
	if list, err := List(filepath.Join(top, "missing"), "m", How{}); err != nil || len(list) != 0 {
		t.Errorf("a missing top: %v, %v", list, err)
	}
}

// TestRemove checks that Remove removes a file, a link (not what it leads
// to) and an empty directory, and nothing through a link.
func TestRemove(t *testing.T) {
	t.Parallel()
	outside := t.TempDir()
	secret := filepath.Join(outside, "secret")
	os.WriteFile(secret, []byte("s"), 0o600)
	top := makeTree(t, t.TempDir(), []node{{"f", "x", 0}, {"d/", "", 0}})
	os.Symlink(outside, filepath.Join(top, "out"))
	r, err := OpenRoot(filepath.Dir(top))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := r.Remove("t/out/secret"); err == nil {
		t.Error("removed through a link")
	}
	if _, err := os.Stat(secret); err != nil {
		t.Fatalf("the file behind the link: %v", err)
	}
	for _, n := range []string{"t/f", "t/d", "t/out"} {
		if err := r.Remove(n); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Lstat(filepath.Join(filepath.Dir(top), n)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s: still there (%v)", n, err)
		}
	}
	if _, err := os.Stat(secret); err != nil {
		t.Errorf("the file behind the removed link: %v", err)
	}
	if err := r.Remove("../x"); err == nil {
		t.Error("removed ../x")
	}
}

// TestEntryText checks that an entry's text parses back to it, whatever
// its name and target hold, and that text that AppendText does not write
// is refused (what the fields say, Listing.Add checks: TestListingRefuses).
func TestEntryText(t *testing.T) {
	t.Parallel()
	for _, e := range []Entry{
		{Name: "t", Type: Dir, Mode: 0o755, MTime: -1},
		{Name: "t/a b\t\"c\"\n", Type: File, Size: 4096, MTime: 1700000000123456789, Mode: 0o4755, Hash: strings.Repeat("0f", hashLen)},
		{Name: "t/ünï ✓", Type: Link, Link: "../x y", MTime: 5},
		{Name: "t/dev", Type: Device},
		{Name: "t/fifo", Type: Special},
		{Name: "t/o", Type: File, Marks: Marks{Owner: strings.Repeat("a1", 8), Xattrs: strings.Repeat("0", 16)}},
	} {
		text := string(e.AppendText(nil))
		got, err := ParseEntry(text)
		if err != nil || got != e {
			t.Errorf("%q: %+v, %v; want %+v", text, got, err, e)
		}
	}
	for _, text := range []string{
		``, `f 644 1 2 - -,-,-,-`, `f 644 1 2 - -,-,-,- t`, `L 777 0 2 - -,-,-,- "t" ""`,
		`L 777 0 2 - -,-,-,- "t" "l" `, `L 777 0 2 - -,-,-,- "t"  "l"`, `f 644 01 2 - -,-,-,- "t"`,
		`f 644 +1 2 - -,-,-,- "t"`, `f 644 -0 2 - -,-,-,- "t"`, `f 0644 1 2 - -,-,-,- "t"`,
		`f 644 1 2  -,-,-,- "t"`, `f 40000000000 1 2 - -,-,-,- "t"`, `f 644 1 2 - "t"`,
		`f 644 1 2 - -,-,- "t"`, `f 644 1 2 - -,-,-,-,- "t"`, `f 644 1 2 - A1a1a1a1a1a1a1a1,-,-,- "t"`,
		`f 644 1 2 - a1a1,-,-,- "t"`, `f 644 1 2 - ,-,-,- "t"`,
	} {
		if e, err := ParseEntry(text); err == nil {
			t.Errorf("%q: parsed as %+v", text, e)
		}
	}
}

// FuzzParseEntry checks that whatever ParseEntry takes, it takes again
// as AppendText writes it, and to the same entry.
func FuzzParseEntry(f *testing.F) {
	f.Add(`f 644 4096 1700000000123456789 - -,-,-,- "t/a"`)
	f.Add(`L 777 0 -5 - 0123456789abcdef,-,-,- "t/l" "../x"`)
	f.Add(`f 4755 1 2 0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f -,-,0123456789abcdef,fedcba9876543210 "t/\x00\u00fc"`)
	f.Fuzz(func(t *testing.T, text string) {
		e, err := ParseEntry(text)
		if err != nil {
			return
		}
		again, err := ParseEntry(string(e.AppendText(nil)))
		if err != nil || again != e {
			t.Fatalf("%q: %+v, then %+v, %v", text, e, again, err)
		}
	})
}

// TestWalkOrder walks a tree of many directories, read several at once:
// every entry comes once, each directory before what it holds, and a
// failure of each stops the walk with that failure.
func TestWalkOrder(t *testing.T) {
	t.Parallel()
	top := t.TempDir()
	want := map[string]bool{"t": true}
	for i := range 30 {
		d := filepath.Join(top, fmt.Sprint("d", i%5), fmt.Sprint("e", i))
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(d, "f"), []byte("x"), 0o644)
		want["t/"+fmt.Sprint("d", i%5)] = true
		want["t/"+fmt.Sprint("d", i%5, "/e", i)], want["t/"+fmt.Sprint("d", i%5, "/e", i, "/f")] = true, true
	}
	seen := map[string]bool{}
	err := Walk(top, "t", How{}, func(e Entry) error {
		if parent := path.Dir(e.Name); parent != "." && !seen[parent] || seen[e.Name] {
			t.Errorf("%s: before its directory, or twice", e.Name)
		}
		seen[e.Name] = true
		return nil
	})
	if err != nil || len(seen) != len(want) {
		t.Fatalf("listed %d of %d: %v", len(seen), len(want), err)
	}
	stop := errors.New("stop")
	n := 0
	err = Walk(top, "t", How{}, func(Entry) error {
		if n++; n == 10 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) || n != 10 {
		t.Errorf("after a failure at the 10th entry: %d entries, %v", n, err)
	}
}

// TestJoin checks that join is filepath.Join for a clean directory and a
// plain name.
func TestJoin(t *testing.T) {
	t.Parallel()
	for _, dir := range []string{".", "/", "a", "/a/b", "../a"} {
		if got, want := join(dir, "x"), filepath.Join(dir, "x"); got != want {
			t.Errorf("join(%q, x) = %q, want %q", dir, got, want)
		}
	}
}
