package doctor

import (
	"fmt"
	"runtime"
	"time"

	"github.com/zeebo/xxh3"
	"golang.org/x/sys/unix"

	"github.com/rdmapipe/rdmapipe/pipe/transport/rdma"
)

// Pace is what one core of this host does per second of its CPU time, of
// the per-byte work a stream's sides do: copying from the page cache (a
// sender's pread of a file, a pipe's read or write, a cached file's
// write) and hashing with XXH3 (every message's checksum). Cores is how
// many the host has.
type Pace struct {
	Cores              int
	CopyGBps, HashGBps float64
	Err                error
}

// paceBytes is how much each measurement of measurePace moves: a few tens
// of milliseconds of one core.
const paceBytes = 256 << 20

// paceCPU bounds each measurement's CPU time where paceBytes would take
// longer: an emulated CPU (the SoftRoCE VM's) copied them in 0.6 s.
const paceCPU = 50 * time.Millisecond

// measurePace measures this host's Pace on one thread, by its CPU time,
// which another load on the host does not stretch as it stretches the
// wall clock.
func measurePace() Pace {
	p := Pace{Cores: runtime.NumCPU()}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	fd, err := unix.MemfdCreate("rdmapipe-pace", unix.MFD_CLOEXEC)
	if err != nil {
		p.Err = err
		return p
	}
	defer unix.Close(fd)
	buf := make([]byte, 4<<20)
	if _, err := unix.Pwrite(fd, make([]byte, 64<<20), 0); err != nil {
		p.Err = err
		return p
	}
	p.CopyGBps, p.Err = rate(func(off int) error {
		_, err := unix.Pread(fd, buf, int64(off%(64<<20)))
		return err
	}, len(buf))
	if p.Err == nil {
		p.HashGBps, p.Err = rate(func(int) error {
			xxh3.Hash(buf)
			return nil
		}, len(buf))
	}
	return p
}

// rate runs step, which moves n bytes at offset off, until paceBytes are
// moved or it has taken paceCPU, and returns the GB per CPU-second of this
// thread. A first step, untimed, touches the memory: the first touch of a
// page can cost more than its copy many times over (in a VM whose host took
// its memory back, a 4 MiB read into a new buffer took about 65 ms of CPU).
func rate(step func(off int) error, n int) (float64, error) {
	if err := step(0); err != nil {
		return 0, err
	}
	start, err := threadCPU()
	if err != nil {
		return 0, err
	}
	var moved int
	var spent time.Duration
	for moved < paceBytes && spent < paceCPU {
		if err := step(moved); err != nil {
			return 0, err
		}
		moved += n
		now, err := threadCPU()
		if err != nil {
			return 0, err
		}
		spent = now - start
	}
	if spent <= 0 {
		return 0, nil
	}
	return float64(moved) / spent.Seconds() / 1e9, nil
}

// threadCPU is the CPU time, user and system, of the calling thread, to
// the nanosecond (getrusage counts in scheduler ticks).
func threadCPU() (time.Duration, error) {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return 0, err
	}
	return time.Duration(ts.Nano()), nil
}

// Fixes quoted by the cores check.
const (
	fixPaceUnknown = "nothing for a stream to work: this says only how fast the host can go (bench/needs.sh measures each mode)"
	fixCores       = "expect about %.0f Gb/s from this host, not the link's rate; a pipe runs on one core: where you can, read and write files (rdmasend < FILE, rdmarecv -o FILE)"
)

// referenceGbps is the link rate the cores check speaks of on a host
// without an active RDMA port.
const referenceGbps = 100

// judgeCores says whether this host's cores keep up with its fastest
// active RDMA port (without one, it only tells what referenceGbps would
// take): at least what the copy and the hash of a sender from a file take
// at that rate, and the hash of a receiver. The receiver's output costs
// more (bench/needs.sh): a file with O_DIRECT a little, a pipe or the
// page cache a copy.
func (f Facts) judgeCores(r *Report) {
	p := f.Pace
	if p.Err != nil || p.CopyGBps <= 0 || p.HashGBps <= 0 {
		r.add("cores", Warn, fixPaceUnknown, "%d; this host's copy and hash rates could not be measured (%v)", p.Cores, p.Err)
		return
	}
	gbps, link := fastestPort(f.Devices)
	active := gbps > 0
	if !active {
		gbps, link = referenceGbps, "no active RDMA port here"
	}
	rate := gbps / 8 // GB/s
	send, recv := rate/p.CopyGBps+rate/p.HashGBps, rate/p.HashGBps
	s, fix := OK, ""
	if active && send > float64(p.Cores) {
		s, fix = Warn, fmt.Sprintf(fixCores, gbps*float64(p.Cores)/send)
	}
	r.add("cores", s, fix, "%d; one copies %.1f GB/s from the page cache and hashes %.1f GB/s (XXH3): at %g Gb/s (%s) a sender from a file needs at least %.1f cores, a receiver %.1f (more into a pipe or through the page cache)",
		p.Cores, p.CopyGBps, p.HashGBps, gbps, link, send, recv)
}

// fastestPort returns the rate of the fastest active port of devs, in
// Gb/s, and names it (0 and "" if none is active).
func fastestPort(devs []rdma.Device) (float64, string) {
	best, name := 0.0, ""
	for _, d := range devs {
		for _, p := range d.Ports {
			if g := p.Gbps(); p.State == "ACTIVE" && g > best {
				best, name = g, fmt.Sprintf("%s port %d", d.Name, p.Num)
			}
		}
	}
	return best, name
}
