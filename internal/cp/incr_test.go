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
	if err := writeListing(&w, list); err != nil {
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
	br := bufio.NewReader(&d.Buffer)
	got := map[string]bool{}
	for {
		var l decisionLine
		if err := readJSONLine(br, &l); err != nil {
			t.Fatal(err)
		}
		if l.End {
			break
		}
		got[l.Delete+l.Skip] = true
	}
	if len(got) != len(skip)+1 || !got["top/gone"] {
		t.Errorf("read back %d decisions", len(got))
	}
}
