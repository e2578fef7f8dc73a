package rdma

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
	"golang.org/x/sys/unix"
)

func TestMappings(t *testing.T) {
	const base = unix.MAP_PRIVATE | unix.MAP_ANONYMOUS
	const huge = base | unix.MAP_HUGETLB | unix.MAP_HUGE_2MB
	const mib = 1 << 20
	tests := []struct {
		name string
		size int
		page int
		want []mapping
	}{
		{"one byte", 1, 4096, []mapping{{4096, base}}},
		{"one page", 4096, 4096, []mapping{{4096, base}}},
		{"page and a byte", 4097, 4096, []mapping{{8192, base}}},
		{"just under 2 MiB", 2*mib - 1, 4096, []mapping{{2 * mib, base}}},
		{"2 MiB", 2 * mib, 4096, []mapping{{2 * mib, huge}, {2 * mib, base}}},
		{"2 MiB and a byte", 2*mib + 1, 4096, []mapping{{4 * mib, huge}, {2*mib + 4096, base}}},
		{"4 chunks of 1 MiB with headers", 4*(mib+64) + 4*256, 4096, []mapping{{6 * mib, huge}, {4*mib + 4096, base}}},
		{"64 KiB pages", 2*mib + 1, 65536, []mapping{{4 * mib, huge}, {2*mib + 65536, base}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := mappings(tt.size, tt.page)
			if len(got) != len(tt.want) {
				t.Fatalf("mappings(%d, %d) = %+v, want %+v", tt.size, tt.page, got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Errorf("mappings(%d, %d)[%d] = %+v, want %+v", tt.size, tt.page, i, got[i], tt.want[i])
				}
			}
		})
	}
	// The flags ask for 2 MiB pages explicitly: log2(2 MiB) << MAP_HUGE_SHIFT.
	if unix.MAP_HUGE_2MB != 21<<unix.MAP_HUGE_SHIFT {
		t.Errorf("MAP_HUGE_2MB = %#x, want 21<<%d", unix.MAP_HUGE_2MB, unix.MAP_HUGE_SHIFT)
	}
}

// hugeFree returns the number of free 2 MiB huge pages, or -1 if the host
// has no pool of them.
func hugeFree(t *testing.T) int {
	const dir = "/sys/kernel/mm/hugepages/hugepages-2048kB/"
	read := func(name string) int {
		b, err := os.ReadFile(dir + name)
		if err != nil {
			return 0
		}
		n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		return n
	}
	if read("nr_hugepages") == 0 {
		return -1
	}
	return read("free_hugepages")
}

// TestMapRegion maps and unmaps regions of several sizes on this host. Where
// the host has free 2 MiB huge pages (e.g. the SoftRoCE VM after
// `echo 8 > /proc/sys/vm/nr_hugepages`), it also checks that large regions
// take exactly their length in huge pages and give them all back.
func TestMapRegion(t *testing.T) {
	for _, size := range []int{1, 4096, 2<<20 - 1, 2 << 20, 5<<20 + 3} {
		free := hugeFree(t)
		mem, err := mapRegion(size)
		if err != nil {
			t.Fatalf("mapRegion(%d): %v", size, err)
		}
		if len(mem) < size || len(mem)%unix.Getpagesize() != 0 {
			t.Errorf("mapRegion(%d) mapped %d bytes", size, len(mem))
		}
		for off := 0; off < len(mem); off += unix.Getpagesize() {
			mem[off] = 1
		}
		used := free - hugeFree(t)
		if free >= 0 && size >= hugePage && free >= len(mem)/hugePage {
			if len(mem)%hugePage != 0 || used != len(mem)/hugePage {
				t.Errorf("mapRegion(%d): %d bytes on %d huge pages, want a multiple of 2 MiB on as many pages", size, len(mem), used)
			}
		}
		if err := unmapRegion(mem); err != nil {
			t.Errorf("unmapRegion after mapRegion(%d): %v", size, err)
		}
		if after := hugeFree(t); after != free {
			t.Errorf("mapRegion(%d): %d free huge pages before, %d after unmapping", size, free, after)
		}
		t.Logf("size %d: mapped %d bytes, %d huge pages", size, len(mem), used)
	}
}

// TestRegionsLength checks the lengths Pinned counts, one region after
// another: on huge pages while enough are free, as mapRegion maps them,
// else on normal pages.
func TestRegionsLength(t *testing.T) {
	const mib = 1 << 20
	r := &regions{page: 4096, huge: 3}
	for _, tc := range []struct{ size, want, left int }{
		{1, 4096, 3},
		{2*mib - 1, 2 * mib, 3},
		{2*mib + 1, 4 * mib, 1},
		{3 * mib, 3 * mib, 1},
		{mib + 4096, mib + 4096, 1},
		{2 * mib, 2 * mib, 0},
		{2 * mib, 2 * mib, 0},
	} {
		if got := r.length(tc.size); got != tc.want || r.huge != tc.left {
			t.Errorf("length(%d) = %d with %d huge pages left, want %d with %d", tc.size, got, r.huge, tc.want, tc.left)
		}
	}
}

// TestHugePages checks the huge pages a side's regions take: none for
// regions under 2 MiB, each region rounded up to whole huge pages, and a
// receiver's window counted.
func TestHugePages(t *testing.T) {
	small := conn.NewParams(64<<10, 4)
	if n := (Options{SendOnly: true}).HugePages(small, false); n != 0 {
		t.Errorf("a 64 KiB x 4 sender takes %d huge pages, want 0", n)
	}
	big := conn.NewParams(4<<20, 8)
	l := conn.SenderLayout(big)
	size := buffersSize(l.SendBufs, l.SendSize, l.RecvBufs, l.RecvSize, 0)
	if n, want := DefaultOptions().HugePages(big, false), (size+hugePage-1)/hugePage; n != want {
		t.Errorf("a 4 MiB x 8 sender takes %d huge pages, want %d", n, want)
	}
	if n, least := DefaultOptions().HugePages(big, true), big.Credits()*(4<<20)/hugePage; n < least {
		t.Errorf("a 4 MiB x 8 receiver takes %d huge pages, want at least its window's %d", n, least)
	}
}
