// Command flood opens many connections to an rdmarecv over TCP and holds
// them, to measure what a connect flood costs a receiver and its real
// sender (bench/flood.sh): silent ones (connect, say nothing), and ones
// that send a valid proposal and then say nothing (they pass the
// transport's handshake and wait in the engine's). It opens them at a
// given rate or all at once, prints one line when all are open, and holds
// them until stdin closes.
// Its output lines are flushed as they are printed (os.Stdout is not
// buffered), so a script can wait for them.
package main

import (
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"time"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:18800", "receiver address")
	n := flag.Int("n", 1000, "connections to open")
	over := flag.Duration("over", 0, "open them evenly over this long (0: as fast as possible)")
	mode := flag.String("mode", "mixed", "what each says: silent (nothing), proposal (a valid proposal, then nothing), or mixed (every other one)")
	chunk := flag.Int("chunk", 4<<20, "chunk size the proposals ask for")
	mark := flag.Int("mark", 0, "also print a line once this many are open")
	flag.Parse()
	if *mode != "silent" && *mode != "proposal" && *mode != "mixed" {
		fmt.Fprintf(os.Stderr, "flood: -mode %q: want silent, proposal or mixed\n", *mode)
		os.Exit(2)
	}
	proposal, _ := conn.NewParams(*chunk, 8).MarshalBinary()
	var conns []net.Conn
	refused := 0
	start := time.Now()
	for i := range *n {
		if *over > 0 {
			time.Sleep(time.Until(start.Add(*over * time.Duration(i) / time.Duration(*n))))
		}
		c, err := net.Dial("tcp", *addr)
		if err != nil {
			refused++
			continue
		}
		if *mode == "proposal" || *mode == "mixed" && i%2 == 1 {
			if _, err := c.Write(proposal); err != nil {
				refused++
			}
		}
		conns = append(conns, c)
		if i+1 == *mark {
			fmt.Printf("flood: %d open\n", *mark)
		}
	}
	fmt.Printf("flood: %d connections open (%d refused at connect) in %.1f s\n", len(conns), refused, time.Since(start).Seconds())
	_, _ = io.Copy(io.Discard, os.Stdin)
	for _, c := range conns {
		c.Close()
	}
}
