package docs

import (
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/rdmapipe/rdmapipe/internal/testutil"
)

// A shell runs a command's completion script, as the command prints it,
// the way the shell's completion would, for each of a list of words.
type shell struct {
	name string
	// script sources the completion script of $cmd (on PATH) and, for
	// each word on stdin, prints the word, a tab and the candidates the
	// completion function offers for it, space-separated. The word is
	// typed after "$cmd src host:dst" when $after is set.
	script string
}

var shells = []shell{
	{"bash", `source <("$cmd" --completion bash)
while IFS= read -r w; do
  if [ -n "$after" ]; then COMP_WORDS=("$cmd" src host:dst "$w"); else COMP_WORDS=("$cmd" "$w"); fi
  COMP_CWORD=$(( ${#COMP_WORDS[@]} - 1 ))
  COMPREPLY=()
  "_${cmd}_complete"
  printf '%s\t%s\n' "$w" "${COMPREPLY[*]}"
done`},
	{"zsh", `compdef() { : }
compadd() { [[ $1 == -- ]] && shift; reply+=("$@") }
_files() { reply+=(FILES) }
source <("$cmd" --completion zsh)
while IFS= read -r w; do
  if [[ -n $after ]]; then words=("$cmd" src host:dst "$w"); else words=("$cmd" "$w"); fi
  CURRENT=${#words}
  reply=()
  "_$cmd"
  print -r -- "$w	${(j: :)reply}"
done`},
	{"fish", `"$cmd" --completion fish | source
while read -l w
  set -l pre $cmd
  test -n "$after"; and set pre $cmd src host:dst
  set -l got
  for c in (complete -C "$pre $w")
    set -a got (string split -m 1 \t -- $c)[1]
  end
  printf '%s\t%s\n' $w "$got"
end`},
}

// TestCompletions runs each command's bash, zsh and fish completion
// functions themselves for a prefix of each of its flags (and after
// operands too): every flag's name must be among the candidates, and a
// word that is not a flag's gets none of them.
func TestCompletions(t *testing.T) {
	for _, sh := range shells {
		if _, err := exec.LookPath(sh.name); err != nil {
			testutil.Unmet(t, "%s is not installed (scripts/deps.sh installs it)", sh.name)
		}
	}
	for name := range ours {
		spec := readSpec(t, name)
		// word -> the flags it must complete to: --nam for --name, and
		// "-" for each letter (a whole -x is complete as it is)
		want := map[string][]string{}
		for flag := range spec {
			switch {
			case flag == "man" || flag == "completion": // hidden
			case len(flag) == 1:
				want["-"] = append(want["-"], "-"+flag)
			default:
				want["--"+flag[:len(flag)-1]] = append(want["--"+flag[:len(flag)-1]], "--"+flag)
			}
		}
		words := make([]string, 0, len(want))
		for w := range want {
			words = append(words, w)
		}
		sort.Strings(words)
		for _, sh := range shells {
			for _, after := range []string{"", "1"} {
				t.Run(name+" "+sh.name+map[string]string{"": "", "1": " after operands"}[after], func(t *testing.T) {
					got := runCompletion(t, sh, name, after, append(words, "--no-such-fla", "x"))
					for _, w := range words {
						for _, f := range want[w] {
							if !strings.Contains(" "+got[w]+" ", " "+f+" ") {
								t.Errorf("%s %q: offers %q, want %s among them", name, w, got[w], f)
							}
						}
					}
					if got["--no-such-fla"] != "" {
						t.Errorf("%s %q: offers %q, want nothing", name, "--no-such-fla", got["--no-such-fla"])
					}
					if strings.Contains(got["x"], "--") {
						t.Errorf("%s %q: offers flags %q", name, "x", got["x"])
					}
				})
			}
		}
	}
}

// runCompletion runs sh's completion of each of words for command name
// and returns the candidates for each.
func runCompletion(t *testing.T, sh shell, name, after string, words []string) map[string]string {
	t.Helper()
	args := map[string][]string{"bash": {"--norc", "-c"}, "zsh": {"-f", "-c"}, "fish": {"--no-config", "-c"}}[sh.name]
	cmd := exec.Command(sh.name, append(args, sh.script)...)
	cmd.Env = append(os.Environ(), "PATH="+bin+string(filepath.ListSeparator)+os.Getenv("PATH"), "cmd="+name, "after="+after)
	cmd.Stdin = strings.NewReader(strings.Join(words, "\n") + "\n")
	out, err := cmd.Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("%s: %v\n%s", sh.name, err, stderr)
	}
	got := map[string]string{}
	for _, line := range strings.Split(strings.TrimSuffix(string(out), "\n"), "\n") {
		w, c, _ := strings.Cut(line, "\t")
		got[w] = c
	}
	if len(got) != len(words) {
		t.Fatalf("%s answered for %d words of %d:\n%s", sh.name, len(got), len(words), out)
	}
	return got
}
