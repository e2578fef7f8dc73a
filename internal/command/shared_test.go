package command

import (
	"flag"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/rdmapipe/rdmapipe/internal/window"
)

// TestWindowOf checks the reading of --chunk-size and --depth.
func TestWindowOf(t *testing.T) {
	cases := []struct {
		args []string
		want window.Flags
		err  string
	}{
		{nil, window.Flags{}, ""},
		{[]string{"--chunk-size", "8K"}, window.Flags{Chunk: 8 << 10}, ""},
		{[]string{"--depth", "5"}, window.Flags{Depth: 5}, ""},
		{[]string{"--chunk-size", "lots"}, window.Flags{}, "--chunk-size"},
		{[]string{"--chunk-size", "0"}, window.Flags{}, "chunk size 0 out of range"},
		{[]string{"--chunk-size", "1G"}, window.Flags{}, "out of range"},
		{[]string{"--depth", "0"}, window.Flags{}, "depth 0 out of range"},
		{[]string{"--depth", "2"}, window.Flags{}, "depth 2 out of range"},
	}
	for _, tc := range cases {
		set := flag.NewFlagSet("test", flag.ContinueOnError)
		set.String("chunk-size", "", "")
		set.Int("depth", 0, "")
		if err := set.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		f, err := WindowOf(cli.NewContext(cli.NewApp(), set, nil))
		switch {
		case tc.err == "" && (err != nil || f != tc.want):
			t.Errorf("%q: %+v, %v; want %+v", tc.args, f, err, tc.want)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%q: %v, want an error saying %q", tc.args, err, tc.err)
		}
	}
}
