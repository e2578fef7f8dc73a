package cp

import (
	"bufio"
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/rdmapipe/rdmapipe/internal/cp/quick"
)

// countingWriter counts the writes it is handed.
type countingWriter struct {
	bytes.Buffer
	writes int
}

func (w *countingWriter) Write(p []byte) (int, error) {
	w.writes++
	return w.Buffer.Write(p)
}

// TestListingBuffered checks that a listing and the decisions on it reach
// the ssh channel in a few writes, not one a line, and read back whole.
func TestListingBuffered(t *testing.T) {
	var list []quick.Entry
	skip := map[string]bool{}
	for i := range 5000 {
		n := fmt.Sprintf("top/f%04d", i)
		list = append(list, quick.Entry{Name: n, Type: quick.File, Size: 4096, MTime: 1})
		skip[n] = true
	}
	var w countingWriter
	lw := newListingWriter(&w)
	for _, e := range list {
		if err := lw.entry(e); err != nil {
			t.Fatal(err)
		}
	}
	if err := lw.end(); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(w.String(), "\n"), "\n")
	if len(lines) != len(list)+1 || lines[len(list)] != statusPrefix+"listed 5000" {
		t.Fatalf("%d lines, the last %q", len(lines), lines[len(lines)-1])
	}
	for i, l := range lines[:len(list)] {
		st, err := parseStatus(l)
		if err != nil || st.kind != "entry" || st.entry != list[i] {
			t.Fatalf("line %d: %q: %+v %v", i, l, st, err)
		}
	}
	if w.writes > 10 {
		t.Errorf("the listing took %d writes", w.writes)
	}

	var d countingWriter
	if err := writeDecisions(&d, []string{"top/gone"}, skip); err != nil {
		t.Fatal(err)
	}
	if d.writes > 10 {
		t.Errorf("the decisions took %d writes", d.writes)
	}
	have := quick.NewListing([]string{"top"})
	for _, e := range append([]quick.Entry{{Name: "top", Type: quick.Dir}, {Name: "top/gone", Type: quick.File}}, list...) {
		if err := have.Add(e); err != nil {
			t.Fatal(err)
		}
	}
	got := map[string]string{}
	err := readDecisions(bufio.NewReader(&d.Buffer), have, func(what, name string) error {
		got[name] = what
		return nil
	})
	if err != nil || len(got) != len(skip)+1 || got["top/gone"] != "delete" || got["top/f0001"] != "skip" {
		t.Errorf("read back %d decisions: %v", len(got), err)
	}
}

// TestDecisionsRefused checks that decisions naming what the listing has
// not, more decisions than entries, or lines that are not decisions, fail
// the reading.
func TestDecisionsRefused(t *testing.T) {
	t.Parallel()
	have := quick.NewListing([]string{"top"})
	for _, e := range []quick.Entry{{Name: "top", Type: quick.Dir}, {Name: "top/a", Type: quick.File}} {
		if err := have.Add(e); err != nil {
			t.Fatal(err)
		}
	}
	for _, text := range []string{
		"delete \"top/b\"\nend\n", "delete \"../x\"\nend\n", "skip \"top/a\"\nskip \"top/a\"\nskip \"top/a\"\nend\n",
		"delete top/a\nend\n", "remove \"top/a\"\nend\n", "end \"top\"\n", "{\"end\":true}\n", "delete \"top/a\"\n",
	} {
		err := readDecisions(bufio.NewReader(strings.NewReader(text)), have, func(string, string) error { return nil })
		if err == nil {
			t.Errorf("%q: read", text)
		}
	}
}
