package tree

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/rdmapipe/rdmapipe/internal/cp/proto"
)

func TestPartialOf(t *testing.T) {
	cases := []struct {
		p, target string
		partial   bool
	}{
		{"a/.f.rdmacp-0123456789abcdef.part", "a/f", true},
		{".x.y.rdmacp-00.part", "x.y", true},
		{"a/f", "a/f", false},
		{"a/.rdmacp-00.part", "a/.rdmacp-00.part", false},
		{"a/.f.rdmacp-00", "a/.f.rdmacp-00", false},
		{"a/f.rdmacp-00.part", "a/f.rdmacp-00.part", false},
	}
	for _, tc := range cases {
		if target, partial := partialOf(tc.p); target != tc.target || partial != tc.partial {
			t.Errorf("partialOf(%q) = %q, %v; want %q, %v", tc.p, target, partial, tc.target, tc.partial)
		}
	}
}

// TestTreeResume resumes the files of a tree from what the destination
// offered, and refuses archives that resume anything else.
func TestTreeResume(t *testing.T) {
	key := proto.NewKey()
	body := strings.Repeat("0123456789", 300)
	resume := func(name string, at int, rest string) []byte {
		var b bytes.Buffer
		tw := tar.NewWriter(&b)
		h := &tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(rest)), Format: tar.FormatPAX,
			PAXRecords: map[string]string{resumeRecord: strconv.Itoa(at)}}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		io.WriteString(tw, rest)
		tw.Close()
		return b.Bytes()
	}
	cases := []struct {
		name    string
		archive []byte
		fail    string // in the error; "" for success
		file    string // the file resumed, and what it must hold
		want    string
	}{
		{"from the partial copy", resume("top/a", 1000, body[1000:]), "", "a", body},
		{"from the file in place", resume("top/b", 3000, ""), "", "b", body},
		{"the file in place, grown", resume("top/b", 3000, "more"), "", "b", body + "more"},
		{"a file not offered", resume("top/c", 0, body), "did not offer", "", ""},
		{"past the offered file", resume("top/a", 2000, body[2000:]), "shorter file", "", ""},
		{"a negative start", resume("top/a", -1, body), "resumes at", "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			os.MkdirAll(filepath.Join(dir, "top"), 0o755)
			partial := partialName(filepath.Join(dir, "top", "a"), proto.Contents{Size: 3000, Changed: 1})
			os.WriteFile(partial, []byte(body[:1500]), 0o600)
			os.WriteFile(filepath.Join(dir, "top", "b"), []byte(body), 0o644)
			s, err := newTarSink(proto.Request{Dest: dir, Contents: proto.Contents{Mode: proto.ModeTar, Names: []string{"top"}}, Resume: true})
			if err != nil {
				t.Fatal(err)
			}
			list, err := s.Offers(key)
			if err != nil || len(list) != 2 || list[0].Name != "top/a" || list[0].Size != 1500 || list[1].Name != "top/b" || list[1].Size != 3000 {
				t.Fatalf("offers %+v, %v; want top/a's partial copy and top/b", list, err)
			}
			s.Writer().Write(tc.archive)
			err = s.Finish()
			if tc.fail != "" {
				if err == nil || !strings.Contains(err.Error(), tc.fail) {
					t.Fatalf("got %v, want an error with %q", err, tc.fail)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if b, err := os.ReadFile(filepath.Join(dir, "top", tc.file)); err != nil || string(b) != tc.want {
				t.Fatalf("%s holds %d bytes, %v; want %d", tc.file, len(b), err, len(tc.want))
			}
			if m, _ := filepath.Glob(filepath.Join(dir, "top", "."+tc.file+".rdmacp-*")); len(m) != 0 {
				t.Fatalf("partial copies left: %v", m)
			}
		})
	}
}

// TestResumptionAdd: a tree's sending side takes an offer only for a file
// under the archive's top-level names, once, with few enough hashes.
func TestResumptionAdd(t *testing.T) {
	rs := NewResumption([]Source{{Name: "top"}}, proto.NewKey())
	one := []string{strings.Repeat("ab", 16)}
	cases := []struct {
		o    proto.Offer
		fail string // in the error; "" for taken
	}{
		{proto.Offer{Name: "top/a", Block: proto.MinBlock, Size: 1, Hashes: one}, ""},
		{proto.Offer{Name: "top/a", Block: proto.MinBlock, Size: 1, Hashes: one}, "offered before"},
		{proto.Offer{Name: ".ssh/authorized_keys", Block: proto.MinBlock, Size: 1, Hashes: one}, "not under the archive's names"},
		{proto.Offer{Name: "topx/a", Block: proto.MinBlock, Size: 1, Hashes: one}, "not under the archive's names"},
		{proto.Offer{Block: proto.MinBlock, Size: 1, Hashes: one}, "names no file"},
		{proto.Offer{Name: "top/b", Block: proto.MinBlock, Size: 17 * proto.MinBlock, Hashes: slices.Repeat(one, 17)}, "block hashes"},
		{proto.Offer{Name: "top/c", Block: 1 << 47, Size: 1 << 47, Hashes: one}, ""},
	}
	for _, tc := range cases {
		err := rs.Add(tc.o)
		if tc.fail == "" && err != nil || tc.fail != "" && (err == nil || !strings.Contains(err.Error(), tc.fail)) {
			t.Errorf("%s: got %v, want %q", tc.o.Name, err, tc.fail)
		}
	}
}
