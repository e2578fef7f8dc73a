package filter

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// maxDepth is how deep merge files may merge others.
const maxDepth = 8

// Exclude adds the rule of --exclude: an exclude of pattern, unless it
// starts with "+ " (an include of the rest) or "- " (an exclude of the
// rest), or is "!", which clears the rules so far.
func (rs *Rules) Exclude(pattern string) error { return rs.old(pattern, false) }

// Include adds the rule of --include, as Exclude does but an include.
func (rs *Rules) Include(pattern string) error { return rs.old(pattern, true) }

// old adds an old-style rule (rsync's XFLG_OLD_PREFIXES): pattern, an
// include if include, with Exclude's prefixes.
func (rs *Rules) old(pattern string, include bool) error {
	switch {
	case pattern == "!":
		rs.list = nil
		return nil
	case strings.HasPrefix(pattern, "- "):
		pattern, include = pattern[2:], false
	case strings.HasPrefix(pattern, "+ "):
		pattern, include = pattern[2:], true
	}
	r, err := newRule(include, pattern)
	if err != nil {
		return err
	}
	return rs.add(r)
}

// Filter adds the rule of --filter: "-" or "exclude", "+" or "include",
// then a space or an underscore and the pattern; "!" or "clear"; or
// "." or "merge" and a file whose lines are such rules (blank lines and
// lines that start with '#' aside). Other rules and modifiers are
// refused.
func (rs *Rules) Filter(text string) error { return rs.filter(text, 0) }

// filter adds the rule text, read in merge files depth deep.
func (rs *Rules) filter(text string, depth int) error {
	kind, arg, err := split(text)
	if err != nil {
		return fmt.Errorf("filter rule %.64q: %v", text, err)
	}
	switch kind {
	case '!':
		rs.list = nil
		return nil
	case '.':
		if depth >= maxDepth {
			return fmt.Errorf("filter rule %.64q: %w", text, errMerge)
		}
		return rs.merge(arg, depth+1)
	}
	r, err := newRule(kind == '+', arg)
	if err != nil {
		return err
	}
	return rs.add(r)
}

// ruleNames are the long names of filter rules, by their short ones.
var ruleNames = map[string]byte{
	"exclude": '-', "include": '+', "merge": '.', "clear": '!',
	"dir-merge": ':', "hide": 'H', "show": 'S', "protect": 'P', "risk": 'R',
}

// split splits a filter rule into its kind (its short name) and its
// argument, as rsync's parse_rule_tok reads them, and refuses what this
// package does not do.
func split(text string) (kind byte, arg string, err error) {
	if text == "" {
		return 0, "", errors.New("empty")
	}
	kind, name, rest := text[0], text[:1], text[1:]
	for long, k := range ruleNames {
		if after, ok := strings.CutPrefix(text, long); ok && (after == "" || strings.ContainsAny(after[:1], " _,")) {
			kind, name, rest = k, long, after
		}
	}
	mods := strings.TrimPrefix(rest, ",")
	if i := strings.IndexAny(mods, " _"); i >= 0 {
		mods, arg = mods[:i], mods[i+1:]
	}
	switch {
	case strings.IndexByte(":HSPR", kind) >= 0:
		return 0, "", fmt.Errorf("%q rules are not supported: only -, +, exclude, include, merge (.) and clear (!)", name)
	case strings.IndexByte("-+.!", kind) < 0:
		return 0, "", errors.New("not a rule: -, +, exclude, include, merge (.) or clear (!), then a space or _ and the pattern")
	case kind == '!' && rest != "":
		return 0, "", errors.New("clear takes nothing after it")
	case mods != "":
		return 0, "", fmt.Errorf("modifiers (%q) are not supported", mods)
	case kind != '!' && arg == "":
		return 0, "", errors.New("no pattern or file name")
	}
	return kind, arg, nil
}

// merge adds the rules of the file name ("-": stdin), one a line, as
// Filter reads them, depth merges deep.
func (rs *Rules) merge(name string, depth int) error {
	return readLines(name, "#", func(line string) error { return rs.filter(line, depth) })
}

// ExcludeFrom adds the rules of --exclude-from: the patterns in the file
// name ("-": stdin), one a line, each as Exclude takes it; blank lines and
// lines that start with ';' or '#' are left aside.
func (rs *Rules) ExcludeFrom(name string) error {
	return readLines(name, ";#", func(line string) error { return rs.old(line, false) })
}

// IncludeFrom adds the rules of --include-from, as ExcludeFrom does but
// with Include's.
func (rs *Rules) IncludeFrom(name string) error {
	return readLines(name, ";#", func(line string) error { return rs.old(line, true) })
}

// Flag is a flag.Value that adds each value it is set to to Rules with
// Add, so that the rules of several flags keep the command line's order.
type Flag struct {
	Rules *Rules
	Add   func(rs *Rules, arg string) error
}

// Set adds the rule (or file of rules) arg.
func (f *Flag) Set(arg string) error { return f.Add(f.Rules, arg) }

// String is empty: the flag has no default.
func (f *Flag) String() string { return "" }

// readLines calls add with each line of the file name ("-": stdin) but
// blank ones and those that start with a byte of comments.
func readLines(name, comments string, add func(string) error) error {
	var r io.Reader = os.Stdin
	if name != "-" {
		f, err := os.Open(name)
		if err != nil {
			return err
		}
		defer f.Close()
		r = f
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), MaxLen+1)
	for sc.Scan() {
		line := strings.TrimSuffix(sc.Text(), "\r")
		if line == "" || strings.ContainsRune(comments, rune(line[0])) {
			continue
		}
		if err := add(line); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}
