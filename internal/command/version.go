package command

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// version is what --version prints: the module version and the VCS
// revision the binary was built from (for bug reports).
func version(name string) string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return fmt.Sprintf("%s (no build information) %s %s/%s", name, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	}
	v := bi.Main.Version
	if v == "" {
		v = "(devel)"
	}
	rev, modified, when := "unknown", "", ""
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				modified = " with local changes"
			}
		case "vcs.time":
			when = ", committed " + s.Value
		}
	}
	return fmt.Sprintf("%s %s (%s, revision %s%s%s) %s %s/%s", name, v, bi.Main.Path, rev, modified, when, bi.GoVersion, runtime.GOOS, runtime.GOARCH)
}
