// Command dist packages the tree that `make install DESTDIR=STAGE
// PREFIX=/usr` staged (binaries, man pages, completions) as a .deb and an
// .rpm with nfpm, with the files of the packaging directory: the Debian
// copyright file, the licence, the lintian overrides, the rdmarecv@
// service and the script that makes its user. It is a module of
// its own so that the packaging library never becomes a dependency of the
// commands it packages.
package main

import (
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

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

// release is the packages' release (Debian revision): the first packaging
// of each version.
const release = "1"

// libc is what every command links (cgo).
var libc = map[string]string{"deb": "libc6", "rpm": "glibc"}

// settings are what the command line says about the packages.
type settings struct {
	stage, packaging, out string
	version, arch         string
	license, maintainer   string
	revision              string    // the VCS revision the binaries were built from
	date                  time.Time // its commit time: the changelog entry's and every file's
}

func main() {
	var s settings
	var date string
	flag.StringVar(&s.stage, "stage", "", "the staged tree: `DIR`/usr/bin, DIR/usr/share/...")
	flag.StringVar(&s.packaging, "packaging", "packaging", "the `DIR` of copyright, lintian-overrides, systemd/, postinstall.sh")
	flag.StringVar(&s.version, "version", "", "the package `VERSION`")
	flag.StringVar(&s.arch, "arch", "amd64", "the Go `GOARCH` the binaries were built for")
	flag.StringVar(&s.out, "out", "dist", "the `DIR` to write the packages to")
	flag.StringVar(&s.license, "license", "", "the licence `FILE` the .rpm ships as %license")
	flag.StringVar(&s.maintainer, "maintainer", "", "the package's `MAINTAINER` (NAME <EMAIL>)")
	flag.StringVar(&s.revision, "revision", "", "the VCS `REVISION` the binaries were built from")
	flag.StringVar(&date, "date", "", "its commit `TIME` (RFC 3339)")
	flag.Parse()
	var err error
	if s.date, err = time.Parse(time.RFC3339, date); err != nil || s.stage == "" || s.version == "" || s.license == "" || s.maintainer == "" || s.revision == "" {
		fmt.Fprintln(os.Stderr, "usage: dist -stage DIR -version VERSION -license FILE -maintainer 'NAME <EMAIL>' -revision REV -date TIME [-packaging DIR] [-arch GOARCH] [-out DIR]")
		os.Exit(2)
	}
	changelog, err := writeChangelog(s)
	if err != nil {
		fmt.Fprintf(os.Stderr, "dist: %v\n", err)
		os.Exit(1)
	}
	defer os.Remove(changelog)
	for _, format := range []string{"deb", "rpm"} {
		name, err := build(format, s, changelog)
		if err != nil {
			fmt.Fprintf(os.Stderr, "dist: %s: %v\n", format, err)
			os.Exit(1)
		}
		fmt.Println(name)
	}
}

// writeChangelog writes the packages' changelog (nfpm's chglog YAML) to a
// temporary file and returns its name: one entry, for this version and
// release, that names the revision it was built from.
func writeChangelog(s settings) (string, error) {
	f, err := os.CreateTemp("", "rdmapipe-changelog-*.yml")
	if err != nil {
		return "", err
	}
	_, err = fmt.Fprintf(f, "- semver: %q\n  date: %s\n  packager: %q\n  deb:\n    urgency: low\n    distributions: [unstable]\n  changes:\n    - note: %q\n",
		s.version+"-"+release, s.date.UTC().Format(time.RFC3339), s.maintainer,
		"Built from revision "+s.revision+".")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(f.Name())
		return "", err
	}
	return f.Name(), nil
}

// build writes the package of format (deb or rpm) into s.out and returns
// its file name.
func build(format string, s settings, changelog string) (string, error) {
	contents, err := contents(format, s)
	if err != nil {
		return "", err
	}
	info := info(format, s, contents)
	info.Changelog = changelog
	if err := nfpm.PrepareForPackager(info, format); err != nil {
		return "", err
	}
	pkg, err := nfpm.Get(format)
	if err != nil {
		return "", err
	}
	name := filepath.Join(s.out, pkg.ConventionalFileName(info))
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

// contents lists the staged tree's files, each with its mode (man pages
// marked as documentation in the .rpm), then the files of the packaging
// directory: the rdmarecv@ service (where format's systemd looks: Debian 12
// in /lib), its example environment file, the directory of those files,
// and for the .deb its copyright file and lintian overrides, for the .rpm
// the licence.
func contents(format string, s settings) (files.Contents, error) {
	var cs files.Contents
	file := func(src, dst string, mode fs.FileMode, kind string) {
		cs = append(cs, &files.Content{Source: src, Destination: dst, Type: kind,
			FileInfo: &files.ContentFileInfo{Mode: mode, MTime: s.date}})
	}
	err := filepath.WalkDir(s.stage, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		dst := "/" + filepath.ToSlash(strings.TrimPrefix(path, s.stage+"/"))
		kind := files.TypeFile
		if format == "rpm" && strings.HasPrefix(dst, "/usr/share/man/") {
			kind = files.TypeRPMDoc
		}
		file(path, dst, fi.Mode().Perm(), kind)
		return nil
	})
	units, doc := "/usr/lib/systemd/system/", files.TypeRPMDoc
	if format == "deb" {
		units, doc = "/lib/systemd/system/", files.TypeFile
	}
	file(filepath.Join(s.packaging, "systemd", "rdmarecv@.service"), units+"rdmarecv@.service", 0o644, files.TypeFile)
	file(filepath.Join(s.packaging, "systemd", "rdmarecv.env"), "/usr/share/doc/rdmapipe/examples/rdmarecv.env", 0o644, doc)
	cs = append(cs, &files.Content{Destination: "/etc/rdmapipe", Type: files.TypeDir,
		FileInfo: &files.ContentFileInfo{Mode: 0o755, MTime: s.date}})
	if format == "deb" {
		file(filepath.Join(s.packaging, "copyright"), "/usr/share/doc/rdmapipe/copyright", 0o644, files.TypeFile)
		file(filepath.Join(s.packaging, "lintian-overrides"), "/usr/share/lintian/overrides/rdmapipe", 0o644, files.TypeFile)
	} else {
		file(s.license, "/usr/share/licenses/rdmapipe/"+filepath.Base(s.license), 0o644, files.TypeRPMLicense)
	}
	return cs, err
}

// info describes the package of format with contents.
func info(format string, s settings, contents files.Contents) *nfpm.Info {
	return nfpm.WithDefaults(&nfpm.Info{
		Name:          "rdmapipe",
		Arch:          s.arch,
		Platform:      "linux",
		Version:       s.version,
		VersionSchema: "none",
		Release:       release,
		Section:       "net",
		Priority:      "optional",
		Maintainer:    s.maintainer,
		Homepage:      "https://github.com/rdmapipe/rdmapipe",
		License:       "Apache-2.0",
		MTime:         s.date,
		Description: "Byte streams and file copies over RDMA (or TCP)\n" +
			"rdmasend and rdmarecv pipe a byte stream between hosts over RDMA\n" +
			"(InfiniBand, RoCE, iWARP) or TCP, like netcat, and exit 0 only when\n" +
			"every byte arrived; rdmacp copies files and directories like scp.",
		Overridables: nfpm.Overridables{
			Depends:    []string{libc[format]},
			Recommends: runtimeLibs[format],
			Contents:   contents,
			Scripts:    nfpm.Scripts{PostInstall: filepath.Join(s.packaging, "postinstall.sh")},
			RPM:        nfpm.RPM{Group: "Applications/Internet", Packager: s.maintainer},
		},
	})
}
