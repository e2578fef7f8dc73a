// Command flood floods an rdmarecv over TCP with connections, to measure
// what such a flood costs a receiver and its real sender (bench/flood.sh).
// What each connection does is its -mode:
//
//	silent    says nothing and stays open
//	proposal  sends a valid proposal, then says nothing and stays open: it
//	          passes the transport's handshake and stalls in the engine's
//	          key handshake (stall is another name for it)
//	mixed     silent or proposal, in turn
//	version   sends a well-formed proposal of another protocol version, which
//	          the receiver refuses, and closes
//	garbage   sends conn.ParamsLen random bytes and closes
//
// It makes -n connections evenly over -over, or -rate a second for -for,
// with at most -workers being made at once (so with neither -over nor -rate,
// as fast as those workers can), from -sources addresses. It prints a line
// once -mark connections were tried and one when all were; the connections
// that stay open are held until stdin closes. Its output lines are flushed
// as they are printed (os.Stdout is not buffered), so a script can wait
// for them.
package main

import (
	"encoding/binary"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

// flood is one flood: what each connection says, where it goes from, and
// how many are made how fast.
type flood struct {
	addr    string
	mode    string
	hold    bool          // connections stay open until stdin closes
	dialers []*net.Dialer // one per source address, used in turn
	total   int
	gap     float64 // seconds between the starts of two connections
	workers int
	mark    int
	said    map[string][]byte // the proposals, by mode

	mu           sync.Mutex
	held         []net.Conn
	made, failed atomic.Int64
	tried        atomic.Int64
}

func main() {
	f := parse()
	start := time.Now()
	f.run(start)
	fmt.Printf("flood: done: %d made, %d failed, %.2f s\n", f.made.Load(), f.failed.Load(), time.Since(start).Seconds())
	if f.hold {
		_, _ = io.Copy(io.Discard, os.Stdin)
		for _, c := range f.held {
			c.Close()
		}
	}
}

// fail says what is wrong with the command line and exits 2.
func fail(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "flood: "+format+"\n", a...)
	os.Exit(2)
}

// parse reads the flags into a flood, or fails.
func parse() *flood {
	addr := flag.String("addr", "127.0.0.1:18800", "receiver address")
	n := flag.Int("n", 1000, "connections to make, without -rate")
	over := flag.Duration("over", 0, "make the -n connections evenly over this long (0: as fast as the workers can)")
	rate := flag.Float64("rate", 0, "connections a second, for -for (instead of -n and -over)")
	span := flag.Duration("for", 0, "how long to make -rate connections a second")
	mode := flag.String("mode", "mixed", "what each does: silent, proposal (or stall), mixed, version or garbage")
	sources := flag.Int("sources", 0, "spread the connections over the source addresses 127.0.0.2 ... 127.0.0.(N+1), in turn (0: 127.0.0.1)")
	workers := flag.Int("workers", 16, "connections being made at once, at most")
	chunk := flag.Int("chunk", 4<<20, "chunk size the proposals ask for")
	mark := flag.Int("mark", 0, "also print a line once this many connections were tried")
	flag.Parse()
	f := &flood{addr: *addr, mode: *mode, workers: *workers, mark: *mark, total: *n}
	f.hold = *mode == "silent" || *mode == "proposal" || *mode == "stall" || *mode == "mixed"
	switch {
	case !f.hold && *mode != "version" && *mode != "garbage":
		fail("-mode %q: want silent, proposal, stall, mixed, version or garbage", *mode)
	case *sources < 0 || *sources > 253:
		fail("-sources %d: want 0 to 253", *sources)
	case *workers < 1:
		fail("-workers %d: want at least 1", *workers)
	case *rate > 0 && (*span <= 0 || *over > 0):
		fail("-rate goes with -for, instead of -n and -over")
	case *rate <= 0 && *span > 0:
		fail("-for goes with -rate")
	case *rate > 0:
		f.total, f.gap = int(*rate*span.Seconds()+0.5), 1 / *rate
	case *over > 0 && f.total > 0:
		f.gap = over.Seconds() / float64(f.total)
	}
	valid := conn.NewParams(*chunk, 8)
	other := valid
	other.Version = conn.Version - 1
	f.said = map[string][]byte{}
	f.said["proposal"], _ = valid.MarshalBinary()
	f.said["version"], _ = other.MarshalBinary()
	f.dialers = dialers(*sources)
	return f
}

// dialers returns a dialer for each of n source addresses from 127.0.0.2
// on, or for 127.0.0.1 when n is 0. A dial gives up after 10 s, so that a
// receiver whose backlog is full shows as failed connections rather than
// a flood that never ends.
func dialers(n int) []*net.Dialer {
	if n == 0 {
		return []*net.Dialer{{Timeout: 10 * time.Second}}
	}
	var ds []*net.Dialer
	for s := range n {
		ip := net.IPv4(127, 0, 0, byte(s+2))
		ds = append(ds, &net.Dialer{Timeout: 10 * time.Second, LocalAddr: &net.TCPAddr{IP: ip}})
	}
	return ds
}

// say returns what connection i sends, nil for nothing.
func (f *flood) say(i int) []byte {
	switch f.mode {
	case "proposal", "stall":
		return f.said["proposal"]
	case "mixed":
		if i%2 == 1 {
			return f.said["proposal"]
		}
	case "version":
		return f.said["version"]
	case "garbage":
		b := make([]byte, conn.ParamsLen)
		for j := 0; j < len(b); j += 8 {
			binary.LittleEndian.PutUint64(b[j:], rand.Uint64())
		}
		return b
	}
	return nil
}

// run makes the connections, each in its turn from start, at most
// f.workers at once, and returns when all were tried.
func (f *flood) run(start time.Time) {
	var wg sync.WaitGroup
	slots := make(chan struct{}, f.workers)
	for i := range f.total {
		time.Sleep(time.Until(start.Add(time.Duration(float64(i) * f.gap * float64(time.Second)))))
		slots <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			f.one(i)
			<-slots
		}()
	}
	wg.Wait()
}

// one makes connection i: it says what its mode says, then holds it or
// closes it.
func (f *flood) one(i int) {
	c, err := f.dialers[i%len(f.dialers)].Dial("tcp", f.addr)
	if err == nil {
		if b := f.say(i); b != nil {
			_, err = c.Write(b)
		}
		switch {
		case err != nil || !f.hold:
			c.Close()
		default:
			f.mu.Lock()
			f.held = append(f.held, c)
			f.mu.Unlock()
		}
	}
	if err != nil {
		f.failed.Add(1)
	} else {
		f.made.Add(1)
	}
	if f.tried.Add(1) == int64(f.mark) {
		fmt.Printf("flood: mark: %d tried\n", f.mark)
	}
}
