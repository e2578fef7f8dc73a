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

func main() {
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
	fail := func(format string, a ...any) {
		fmt.Fprintf(os.Stderr, "flood: "+format+"\n", a...)
		os.Exit(2)
	}
	hold := *mode == "silent" || *mode == "proposal" || *mode == "stall" || *mode == "mixed"
	if !hold && *mode != "version" && *mode != "garbage" {
		fail("-mode %q: want silent, proposal, stall, mixed, version or garbage", *mode)
	}
	if *sources < 0 || *sources > 253 {
		fail("-sources %d: want 0 to 253", *sources)
	}
	if *workers < 1 {
		fail("-workers %d: want at least 1", *workers)
	}
	total, gap := *n, 0.0 // gap: seconds between the starts of two connections
	switch {
	case *rate > 0:
		if *span <= 0 || *over > 0 {
			fail("-rate goes with -for, instead of -n and -over")
		}
		total, gap = int(*rate*span.Seconds()+0.5), 1 / *rate
	case *span > 0:
		fail("-for goes with -rate")
	case *over > 0 && total > 0:
		gap = over.Seconds() / float64(total)
	}

	proposal, _ := conn.NewParams(*chunk, 8).MarshalBinary()
	other := conn.NewParams(*chunk, 8)
	other.Version = conn.Version - 1
	otherVersion, _ := other.MarshalBinary()
	say := func(i int) []byte {
		switch *mode {
		case "proposal", "stall":
			return proposal
		case "mixed":
			if i%2 == 1 {
				return proposal
			}
		case "version":
			return otherVersion
		case "garbage":
			b := make([]byte, conn.ParamsLen)
			for j := 0; j < len(b); j += 8 {
				binary.LittleEndian.PutUint64(b[j:], rand.Uint64())
			}
			return b
		}
		return nil
	}

	// A dial gives up after 10 s, so that a receiver whose backlog is full
	// shows as failed connections rather than a flood that never ends.
	dialers := []*net.Dialer{{Timeout: 10 * time.Second}}
	if *sources > 0 {
		dialers = nil
		for s := range *sources {
			ip := net.IPv4(127, 0, 0, byte(s+2))
			dialers = append(dialers, &net.Dialer{Timeout: 10 * time.Second, LocalAddr: &net.TCPAddr{IP: ip}})
		}
	}

	var (
		mu           sync.Mutex
		held         []net.Conn
		made, failed atomic.Int64
		tried        atomic.Int64
		wg           sync.WaitGroup
	)
	one := func(i int) {
		c, err := dialers[i%len(dialers)].Dial("tcp", *addr)
		if err == nil {
			if b := say(i); b != nil {
				_, err = c.Write(b)
			}
			switch {
			case err != nil || !hold:
				c.Close()
			default:
				mu.Lock()
				held = append(held, c)
				mu.Unlock()
			}
		}
		if err != nil {
			failed.Add(1)
		} else {
			made.Add(1)
		}
		if tried.Add(1) == int64(*mark) {
			fmt.Printf("flood: mark: %d tried\n", *mark)
		}
	}
	slots := make(chan struct{}, *workers)
	start := time.Now()
	for i := range total {
		time.Sleep(time.Until(start.Add(time.Duration(float64(i) * gap * float64(time.Second)))))
		slots <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			one(i)
			<-slots
		}()
	}
	wg.Wait()
	fmt.Printf("flood: done: %d made, %d failed, %.2f s\n", made.Load(), failed.Load(), time.Since(start).Seconds())
	if hold {
		_, _ = io.Copy(io.Discard, os.Stdin)
		for _, c := range held {
			c.Close()
		}
	}
}
