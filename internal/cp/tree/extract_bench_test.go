package tree

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/rdmapipe/rdmapipe/internal/cp/meta"
)

// BenchmarkExtractSmall extracts an archive of 2,000 files of 4 KiB in 20
// directories (issue 34's small files, scaled down) into a new directory
// under RDMACP_BENCH_DIR (default the test's temporary directory).
func BenchmarkExtractSmall(b *testing.B) {
	src := smallTree(b)
	var ar bytes.Buffer
	if err := WriteTar(&ar, []Source{{Path: src, Name: "src"}}, os.Stderr, nil, meta.Flags{}, nil); err != nil {
		b.Fatal(err)
	}
	base := cmp.Or(os.Getenv("RDMACP_BENCH_DIR"), b.TempDir())
	b.ResetTimer()
	for range b.N {
		dst, err := os.MkdirTemp(base, "dst")
		if err != nil {
			b.Fatal(err)
		}
		root, err := os.OpenRoot(dst)
		if err != nil {
			b.Fatal(err)
		}
		if err := extract(context.Background(), root, bytes.NewReader(ar.Bytes()), scope{names: []string{"src"}}, "", modes{umask: 0o022}, nil, nil); err != nil {
			b.Fatal(err)
		}
		root.Close()
	}
}

// BenchmarkWriteTarSmall archives 2,000 files of 4 KiB in 20 directories.
func BenchmarkWriteTarSmall(b *testing.B) {
	src := smallTree(b)
	b.ResetTimer()
	for range b.N {
		if err := WriteTar(io.Discard, []Source{{Path: src, Name: "src"}}, os.Stderr, nil, meta.Flags{}, nil); err != nil {
			b.Fatal(err)
		}
	}
}

// smallTree makes 2,000 files of 4 KiB in 20 directories under a new
// directory, src, and returns it.
func smallTree(b *testing.B) string {
	src := filepath.Join(b.TempDir(), "src")
	body := bytes.Repeat([]byte("x"), 4096)
	for d := range 20 {
		dir := filepath.Join(src, fmt.Sprint("d", d))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			b.Fatal(err)
		}
		for f := range 100 {
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprint("f", f)), body, 0o644); err != nil {
				b.Fatal(err)
			}
		}
	}
	return src
}
