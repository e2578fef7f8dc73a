package filter

import (
	"os"
	"strings"
	"testing"
)

// rulesOf returns the rules of --filter's rules, failing t on an error.
func rulesOf(t *testing.T, rules ...string) *Rules {
	t.Helper()
	rs := &Rules{}
	for _, r := range rules {
		if err := rs.Filter(r); err != nil {
			t.Fatalf("Filter(%q): %v", r, err)
		}
	}
	return rs
}

// TestMatch checks which paths rule sets exclude, one pattern form each.
func TestMatch(t *testing.T) {
	t.Parallel()
	type path struct {
		name     string
		dir      bool
		excluded bool
	}
	tests := []struct {
		rules []string
		paths []path
	}{
		// A pattern without a '/' matches the last element at any depth.
		{[]string{"- *.o"}, []path{{"a.o", false, true}, {"src/x/a.o", false, true}, {"a.c", false, false}, {"a.o/b", false, false}}},
		// A trailing '/' matches directories only.
		{[]string{"- build/"}, []path{{"build", true, true}, {"x/build", true, true}, {"build", false, false}}},
		// A leading '/' anchors at the root of the transfer.
		{[]string{"- /top"}, []path{{"top", false, true}, {"top", true, true}, {"x/top", false, false}}},
		// '*' does not cross a '/'.
		{[]string{"- /src/*.c"}, []path{{"src/a.c", false, true}, {"src/x/a.c", false, false}}},
		// "**" does.
		{[]string{"- /src/**.c"}, []path{{"src/a.c", false, true}, {"src/x/a.c", false, true}, {"a.c", false, false}}},
		// "/foo/**/bar" needs a directory between (rsync(1)'s example).
		{[]string{"- /foo/**/bar"}, []path{{"foo/a/bar", false, true}, {"foo/a/b/bar", false, true}, {"foo/bar", false, false}}},
		// A '/' inside, not anchored: that many last elements.
		{[]string{"- foo/*/bar"}, []path{{"foo/a/bar", false, true}, {"x/foo/a/bar", false, true}, {"foo/bar", false, false}, {"foo/a/b/bar", false, false}}},
		{[]string{"- a/b"}, []path{{"a/b", false, true}, {"x/a/b", false, true}, {"xa/b", false, false}, {"b", false, false}}},
		// "**" not first and not anchored: after any '/'.
		{[]string{"- x**z"}, []path{{"x/y/z", false, true}, {"d/x/y/z", false, true}, {"dx/y/z", false, false}}},
		// "**" first: the whole name, from the root or after any '/'.
		{[]string{"- **/cache"}, []path{{"cache", false, true}, {"a/b/cache", false, true}, {"acache", false, false}}},
		// "dir/***": the directory and all in it.
		{[]string{"- tmp/***"}, []path{{"tmp", true, true}, {"a/tmp/f", false, true}, {"tmp", false, false}}},
		// '?' and classes; a class's ']' first is a member.
		{[]string{"- f?[0-9][!a][[:upper:]][]]"}, []path{{"fx1bC]", false, true}, {"f/1bC]", false, false}, {"fx1aC]", false, false}, {"fx1bc]", false, false}}},
		// A backslash escapes in a wild pattern, and is itself elsewhere.
		{[]string{`- \*x*`}, []path{{"*xy", false, true}, {"axy", false, false}}},
		{[]string{`- a\b`}, []path{{`a\b`, false, true}, {"ab", false, false}}},
		// The first match wins; a path no rule matches is kept.
		{[]string{"+ keep.o", "- *.o"}, []path{{"keep.o", false, false}, {"x.o", false, true}, {"x.c", false, false}}},
		{[]string{"- *.o", "+ keep.o"}, []path{{"keep.o", false, true}}},
		{[]string{"+ */", "+ *.go", "- *"}, []path{{"a", true, false}, {"a/b.go", false, false}, {"a/b.txt", false, true}}},
		// Clear drops the rules so far; the long names are the short ones.
		{[]string{"- *", "!", "exclude_b", "include a"}, []path{{"a", false, false}, {"b", false, true}, {"c", false, false}}},
	}
	for _, tc := range tests {
		rs := rulesOf(t, tc.rules...)
		for _, p := range tc.paths {
			if got := rs.Match(p.name, p.dir); got != p.excluded {
				t.Errorf("%q: Match(%q, dir %v) = %v, want %v", tc.rules, p.name, p.dir, got, p.excluded)
			}
		}
	}
}

// TestOldStyle checks --exclude's and --include's patterns: "+ " and "- "
// prefixes and "!", as rsync reads them.
func TestOldStyle(t *testing.T) {
	t.Parallel()
	rs := &Rules{}
	for _, step := range []struct {
		add func(string) error
		arg string
	}{{rs.Exclude, "x"}, {rs.Exclude, "!"}, {rs.Exclude, "+ a"}, {rs.Include, "- b"}, {rs.Exclude, "!c"}, {rs.Include, "a*"}, {rs.Exclude, "*"}} {
		if err := step.add(step.arg); err != nil {
			t.Fatalf("%q: %v", step.arg, err)
		}
	}
	want := []string{"+ a", "- b", "- !c", "+ a*", "- *"}
	if got := rs.Lines(); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("Lines() = %q, want %q", got, want)
	}
}

// TestRefused checks that rules this package does not do are refused,
// each with its reason.
func TestRefused(t *testing.T) {
	t.Parallel()
	tests := map[string]string{
		"":                                   "empty",
		"-":                                  "no pattern",
		"- ":                                 "no pattern",
		"-! foo":                             "modifiers",
		"-/ foo":                             "modifiers",
		"+s foo":                             "modifiers",
		"exclude,p foo":                      "modifiers",
		"dir-merge .f":                       "not supported",
		": .f":                               "not supported",
		"H foo":                              "not supported",
		"protect foo":                        "not supported",
		"x foo":                              "not a rule",
		"excludefoo":                         "not a rule",
		"! x":                                "nothing after",
		"- a[b":                              "without its ]",
		"- [[:nope:]]":                       "no character class",
		`- a*\`:                              "backslash",
		"- a\x00b":                           "NUL",
		"- " + strings.Repeat("a", MaxLen+1): "longer than",
	}
	for text, want := range tests {
		err := (&Rules{}).Filter(text)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Filter(%.20q) = %v, want an error with %q", text, err, want)
		}
	}
}

// TestParse checks that Parse reads Lines back, and refuses too many
// rules and any merge rule.
func TestParse(t *testing.T) {
	t.Parallel()
	rs := rulesOf(t, "+ /a/**", "- b/", "exclude_c d")
	got, err := Parse(rs.Lines())
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(got.Lines(), "|") != "+ /a/**|- b/|- c d" {
		t.Errorf("Parse(Lines()).Lines() = %q", got.Lines())
	}
	if _, err := Parse(make([]string, MaxRules+1)); err == nil {
		t.Error("Parse took more than MaxRules rules")
	}
	if _, err := Parse([]string{"merge /etc/passwd"}); err == nil {
		t.Error("Parse took a merge rule")
	}
}

// TestMergeLoop checks that a merge file that merges itself is refused,
// not read forever.
func TestMergeLoop(t *testing.T) {
	t.Parallel()
	f := t.TempDir() + "/rules"
	if err := os.WriteFile(f, []byte("- a\nmerge "+f+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := (&Rules{}).Filter(". " + f); err == nil || !strings.Contains(err.Error(), "too deep") {
		t.Errorf("a merge file that merges itself: %v, want an error", err)
	}
}
