package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// others are the flags the documentation names that are not a command's
// --help flag, each with whose it is.
var others = map[string]string{
	"delete-excluded": "rsync's",
	"info":            "rsync's (--info=progress2)",
	"partial":         "rsync's",
	"remote-receive":  "rdmacp's remote side (hidden: rdmacp starts it over ssh)",
	"remote-send":     "rdmacp's remote side (hidden: rdmacp starts it over ssh)",
}

var (
	codeSpan    = regexp.MustCompile("`([^`\n]+)`")
	commandSpan = regexp.MustCompile("\\b(rdmasend|rdmarecv|rdmacp)( +-[^`\n]*)")
	flagWord    = regexp.MustCompile(`^--?([A-Za-z][A-Za-z0-9-]*)`)
)

// TestDocFlagNames checks every flag the README and docs/*.md name in
// code: after rdmasend, rdmarecv or rdmacp, a flag of that command; alone
// (`--flag`), a flag of one of them, unless it is one of others.
func TestDocFlagNames(t *testing.T) {
	specs := map[string]flagSpec{}
	for name := range ours {
		specs[name] = readSpec(t, name)
	}
	files, _ := filepath.Glob("../../docs/*.md")
	for _, file := range append([]string{"../../README.md"}, files...) {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		where := strings.TrimPrefix(file, "../../")
		for _, m := range commandSpan.FindAllStringSubmatch(string(data), -1) {
			for _, w := range leadingFlags(specs[m[1]], m[2]) {
				t.Errorf("%s: %q: %s has no flag %s", where, m[0], m[1], w)
			}
		}
		for _, m := range codeSpan.FindAllStringSubmatch(string(data), -1) {
			f := flagWord.FindStringSubmatch(m[1])
			if f == nil || !strings.HasPrefix(m[1], "--") || others[f[1]] != "" {
				continue
			}
			if !specs["rdmasend"].has(f[1]) && !specs["rdmarecv"].has(f[1]) && !specs["rdmacp"].has(f[1]) {
				t.Errorf("%s: `%s`: no command has the flag --%s", where, m[1], f[1])
			}
		}
	}
}

func (s flagSpec) has(name string) bool {
	_, ok := s[name]
	return ok
}

// leadingFlags returns the flags that spec lacks among those that start
// text, the words after a command's name, up to its first operand or the
// end of the command. A command quoted for another one (pdsh '...') ends
// at the closing quote.
func leadingFlags(spec flagSpec, text string) []string {
	words, err := split(text)
	if q := strings.IndexAny(text, `'"`); err != nil && q >= 0 {
		words, err = split(text[:q])
	}
	if err != nil {
		return []string{text + " (" + err.Error() + ")"}
	}
	var bad []string
	for i := 0; i < len(words); i++ {
		w := words[i]
		f := flagWord.FindStringSubmatch(w)
		if f == nil {
			break
		}
		takes, ok := spec[f[1]]
		switch {
		case ok && takes && !strings.Contains(w, "="):
			i++
		case !ok && !spec.shortBools(w) && others[f[1]] == "":
			bad = append(bad, w)
		}
	}
	return bad
}
