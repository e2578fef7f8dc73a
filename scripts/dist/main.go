// Command dist packages the tree that `make install DESTDIR=STAGE
// PREFIX=/usr` staged (binaries, man pages, completions) as a .deb and an
// .rpm with nfpm. It is a module of its own so that the packaging library
// never becomes a dependency of the commands it packages.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/goreleaser/nfpm/v2"
	_ "github.com/goreleaser/nfpm/v2/deb"
	"github.com/goreleaser/nfpm/v2/files"
	_ "github.com/goreleaser/nfpm/v2/rpm"
)

// runtimeLibs are what the commands load with dlopen only when a stream,
// a listener or --check uses RDMA: recommended, not required, since TCP
// streams and rdmacp over TCP run without them.
var runtimeLibs = map[string][]string{
	"deb": {"libibverbs1", "librdmacm1"},
	"rpm": {"libibverbs", "librdmacm"},
}

// libc is what every command links (cgo).
var libc = map[string]string{"deb": "libc6", "rpm": "glibc"}

func main() {
	stage := flag.String("stage", "", "the staged tree: `DIR`/usr/bin, DIR/usr/share/...")
	version := flag.String("version", "", "the package `VERSION`")
	arch := flag.String("arch", "amd64", "the Go `GOARCH` the binaries were built for")
	out := flag.String("out", "dist", "the `DIR` to write the packages to")
	license := flag.String("license", "", "the licence `FILE` to ship, if the project has one")
	maintainer := flag.String("maintainer", "rdmapipe developers", "the package's `MAINTAINER` (NAME <EMAIL>)")
	flag.Parse()
	if *stage == "" || *version == "" {
		fmt.Fprintln(os.Stderr, "usage: dist -stage DIR -version VERSION [-arch GOARCH] [-out DIR] [-license FILE]")
		os.Exit(2)
	}
	for _, format := range []string{"deb", "rpm"} {
		name, err := build(format, *stage, *version, *arch, *out, *license, *maintainer)
		if err != nil {
			fmt.Fprintf(os.Stderr, "dist: %s: %v\n", format, err)
			os.Exit(1)
		}
		fmt.Println(name)
	}
}

// build writes the package of format (deb or rpm) into out and returns its
// file name.
func build(format, stage, version, arch, out, license, maintainer string) (string, error) {
	info := info(format, stage, version, arch, license)
	info.Maintainer = maintainer
	if err := nfpm.PrepareForPackager(info, format); err != nil {
		return "", err
	}
	pkg, err := nfpm.Get(format)
	if err != nil {
		return "", err
	}
	name := filepath.Join(out, pkg.ConventionalFileName(info))
	f, err := os.Create(name)
	if err != nil {
		return "", err
	}
	if err := pkg.Package(info, f); err != nil {
		f.Close()
		os.Remove(name)
		return "", err
	}
	return name, f.Close()
}

// info describes the package of format with the staged tree's /usr as its
// contents.
func info(format, stage, version, arch, license string) *nfpm.Info {
	contents := files.Contents{
		{Source: filepath.Join(stage, "usr"), Destination: "/usr", Type: files.TypeTree},
	}
	if license != "" {
		kind := files.TypeFile
		if format == "rpm" {
			kind = files.TypeRPMLicense // %license: kept by rpm --excludedocs too
		}
		contents = append(contents, &files.Content{Source: license, Destination: "/usr/share/doc/rdmapipe/" + filepath.Base(license), Type: kind})
	}
	return nfpm.WithDefaults(&nfpm.Info{
		Name:          "rdmapipe",
		Arch:          arch,
		Platform:      "linux",
		Version:       version,
		VersionSchema: "none",
		Section:       "net",
		Priority:      "optional",
		Homepage:      "https://github.com/rdmapipe/rdmapipe",
		Description: "netcat for InfiniBand, RoCE and iWARP, and scp over RDMA\n" +
			"rdmasend and rdmarecv pipe a byte stream between hosts over RDMA (or TCP)\n" +
			"and exit 0 only when every byte arrived; rdmacp copies files like scp.",
		Overridables: nfpm.Overridables{
			Depends:    []string{libc[format]},
			Recommends: runtimeLibs[format],
			Contents:   contents,
		},
	})
}
