package filter

import (
	"slices"
	"strings"
	"testing"
)

// FuzzParse feeds arbitrary rules, one a line, to Parse, as a request from
// another host brings them: it must not panic, and rules it takes must
// match any name without panicking and read back from Lines the same.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"- *.o\n+ */", "exclude_/a/**/b/\ninclude [!a-c]?", "- [[:alpha:]]x\\*", "!\n- tmp/***", "merge f", "- [", "+ a\\"} {
		f.Add(s, "a/b.o", true)
	}
	f.Fuzz(func(t *testing.T, text, name string, isDir bool) {
		rs, err := Parse(strings.Split(text, "\n"))
		if err != nil {
			return
		}
		rs.Match(name, isDir)
		again, err := Parse(rs.Lines())
		if err != nil {
			t.Fatalf("Parse(%q) of Lines: %v", rs.Lines(), err)
		}
		if !slices.Equal(again.Lines(), rs.Lines()) || again.Match(name, isDir) != rs.Match(name, isDir) {
			t.Fatalf("Parse(Lines()) differs: %q, %q", again.Lines(), rs.Lines())
		}
	})
}
