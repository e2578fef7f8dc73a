package sendrecv

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestTemplate checks --output templates: the names they give, and those
// refused.
func TestTemplate(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "taken"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 11, 27, 21, 10, 45, 0, time.FixedZone("CET", 3600))
	for _, tc := range []struct {
		tmpl string
		keep bool
		want string // the name of stream 12, or the error
	}{
		{"in-%n", true, "in-12"},
		{"%t-%n.tar", true, "20261127T201045Z-12.tar"},
		{"100%%-%n", true, "100%-12"},
		{"one.tar", false, "one.tar"},
		{"one.tar", true, "with -k needs %n"},
		{"in-%t", true, "with -k needs %n"},
		{"in-%", false, "% must be followed by n"},
		{"in-%x-%n", true, "% must be followed by n"},
		{"taken", false, "exists: rdmarecv never overwrites"},
		{"%n/in", true, "expansions go in the file name"},
		{"sub/", false, "give a file name"},
		{"missing/in-%n", true, "is not a directory"},
	} {
		tmpl, err := parseTemplate(dir+"/"+tc.tmpl, tc.keep)
		got := ""
		if err != nil {
			got = err.Error()
		} else {
			got = tmpl.name(12, at)
		}
		if !strings.Contains(got, tc.want) {
			t.Errorf("--output %s (keep %v): %q, want %q", tc.tmpl, tc.keep, got, tc.want)
		}
	}
}

// TestEnviron: the command of --exec is not given the key.
func TestEnviron(t *testing.T) {
	got := environ([]string{"PATH=/bin", "RDMAPIPE_KEY=secret", "RDMAPIPE_KEYS=x"})
	if strings.Join(got, " ") != "PATH=/bin RDMAPIPE_KEYS=x" {
		t.Errorf("environ = %q", got)
	}
}
