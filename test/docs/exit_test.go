package docs

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	codes "github.com/rdmapipe/rdmapipe/internal/command"
)

// TestReadmeExitCodes checks the README's table of exit codes against the
// codes the commands use (package internal/command): the same codes, each once.
func TestReadmeExitCodes(t *testing.T) {
	data, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(data), "\n## Exit codes\n")
	if !ok {
		t.Fatal("README.md has no Exit codes section")
	}
	table, _, _ = strings.Cut(table, "\n## ")
	row := regexp.MustCompile(`(?m)^\| (\d+) \| (.+) \|$`)
	var got []int
	for _, m := range row.FindAllStringSubmatch(table, -1) {
		n, _ := strconv.Atoi(m[1])
		got = append(got, n)
	}
	want := []int{codes.ExitOK, codes.ExitInternal, codes.ExitUsage, codes.ExitSetup, codes.ExitAborted,
		codes.ExitIntegrity, codes.ExitAuth, codes.ExitNoRDMA, codes.ExitPartial, codes.ExitUnasked}
	if len(got) != len(want) {
		t.Fatalf("README's exit codes %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("README's exit codes %v, want %v", got, want)
		}
	}
}
