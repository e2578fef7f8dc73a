package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var mdLink = regexp.MustCompile(`\]\(([^)#\s]+)(?:#[^)]*)?\)`)

// TestLinks checks that every relative link of the README and docs/*.md
// leads to a file or directory of the repository.
func TestLinks(t *testing.T) {
	files, _ := filepath.Glob("../../docs/*.md")
	for _, file := range append([]string{"../../README.md"}, files...) {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range mdLink.FindAllStringSubmatch(string(data), -1) {
			if strings.Contains(m[1], "://") {
				continue
			}
			if _, err := os.Stat(filepath.Join(filepath.Dir(file), m[1])); err != nil {
				t.Errorf("%s: link to %s: %v", strings.TrimPrefix(file, "../../"), m[1], err)
			}
		}
	}
}
