// Package filter is rsync's include and exclude rules (rsync(1), FILTER
// RULES): an ordered list of patterns, each of which includes or excludes
// the paths it matches, the first match deciding.
package filter

import (
	"errors"
	"fmt"
	"strings"
)

// Bounds of a list of rules, and of each rule's pattern.
const (
	MaxRules = 1024
	MaxLen   = 4096
)

// Rules is an ordered list of include and exclude rules; the zero value
// (and nil) excludes nothing.
type Rules struct {
	list []rule
}

// rule is one include or exclude rule: text is its pattern as given.
type rule struct {
	include bool
	text    string
	pat     pattern
	// What the pattern says: a leading '/' (anchored), a trailing '/'
	// (dirOnly), how many '/' it has besides a trailing one, whether it
	// has "**", starts with it, or ends with "***".
	anchored, dirOnly         bool
	slashes                   int
	stars, starsFirst, stars3 bool
}

// newRule compiles the rule that includes or excludes what text matches.
func newRule(include bool, text string) (rule, error) {
	if text == "" || len(text) > MaxLen || strings.IndexByte(text, 0) >= 0 {
		return rule{}, fmt.Errorf("pattern %.64q: empty, longer than %d bytes or with a NUL byte", text, MaxLen)
	}
	r := rule{include: include, text: text}
	s := text
	if len(s) > 1 && strings.HasSuffix(s, "/") {
		s, r.dirOnly = s[:len(s)-1], true
	}
	r.slashes = strings.Count(s, "/")
	s, r.anchored = strings.CutPrefix(s, "/")
	wild := strings.ContainsAny(s, "*?[")
	if wild {
		r.stars = strings.Contains(s, "**")
		r.starsFirst = strings.HasPrefix(s, "**") && !r.anchored
		r.stars3 = strings.HasSuffix(s, "***")
	}
	var err error
	if r.pat, err = compile(s, wild); err != nil {
		return rule{}, fmt.Errorf("pattern %.64q: %v", text, err)
	}
	return r, nil
}

// Match says whether the rules exclude name, a path relative to the root
// of the transfer ("dir/sub/file", without a leading or trailing slash),
// which isDir says is a directory.
func (rs *Rules) Match(name string, isDir bool) (excluded bool) {
	if rs == nil {
		return false
	}
	for _, r := range rs.list {
		if r.matches(name, isDir) {
			return !r.include
		}
	}
	return false
}

// matches says whether r's pattern matches name, as rsync's rule_matches
// does: a pattern without a '/' or "**" matches the last element; one
// with a '/' and no "**" the same number of last elements; an anchored
// one, or one that starts with "**", the whole name; one with "**" the
// whole name or what follows any '/' in it.
func (r rule) matches(name string, isDir bool) bool {
	if name == "" || r.dirOnly && !isDir {
		return false
	}
	if r.slashes == 0 && !r.stars {
		name = name[strings.LastIndexByte(name, '/')+1:]
	} else if r.starsFirst {
		name = "/" + name
	}
	if isDir && r.stars3 {
		name += "/" // "dir/***" matches dir itself
	}
	switch {
	case r.anchored || r.starsFirst || !r.stars && r.slashes == 0:
		return r.pat.match(name)
	case !r.stars:
		tail, ok := lastElements(name, r.slashes+1)
		return ok && r.pat.match(tail)
	}
	for {
		if r.pat.match(name) {
			return true
		}
		i := strings.IndexByte(name, '/')
		if i < 0 {
			return false
		}
		name = name[i+1:]
	}
}

// lastElements returns the last n slash-separated elements of name, or
// false if it has fewer.
func lastElements(name string, n int) (string, bool) {
	for i := len(name) - 1; i >= 0; i-- {
		if name[i] == '/' {
			if n--; n == 0 {
				return name[i+1:], true
			}
		}
	}
	return name, n == 1
}

// add appends r to the rules, at most MaxRules of them.
func (rs *Rules) add(r rule) error {
	if len(rs.list) == MaxRules {
		return fmt.Errorf("more than %d filter rules", MaxRules)
	}
	rs.list = append(rs.list, r)
	return nil
}

// Lines returns the rules as filter rules ("- PATTERN", "+ PATTERN"), in
// order, which Parse reads back; nil for none.
func (rs *Rules) Lines() []string {
	if rs == nil {
		return nil
	}
	var lines []string
	for _, r := range rs.list {
		prefix := "- "
		if r.include {
			prefix = "+ "
		}
		lines = append(lines, prefix+r.text)
	}
	return lines
}

// Parse reads rules from another host: at most MaxRules lines, each a
// filter rule (see Filter) that reads no file.
func Parse(lines []string) (*Rules, error) {
	if len(lines) > MaxRules {
		return nil, fmt.Errorf("%d filter rules: more than %d", len(lines), MaxRules)
	}
	rs := &Rules{}
	for _, l := range lines {
		if err := rs.filter(l, maxDepth); err != nil {
			return nil, err
		}
	}
	return rs, nil
}

// errMerge is the failure of a merge rule where no file may be read.
var errMerge = errors.New("a merge rule where no file may be read (merge files are read on the local side, or nested too deep)")
