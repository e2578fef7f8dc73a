// Command flood opens many connections to an rdmarecv over TCP and holds
// them, to measure what a connect flood costs a receiver (bench/flood.sh):
// silent ones (connect, say nothing), and ones that send a valid proposal
// and then say nothing (they pass the transport's handshake and wait in
// the engine's). It prints one line when all are open and holds them until
// stdin closes.
package main

import (
	"flag"
	"fmt"
	"io"
	"net"
	"os"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:18800", "receiver address")
	n := flag.Int("n", 1000, "connections to open")
	chunk := flag.Int("chunk", 4<<20, "chunk size the proposals ask for")
	flag.Parse()
	proposal, _ := conn.NewParams(*chunk, 8).MarshalBinary()
	var conns []net.Conn
	refused := 0
	for i := range *n {
		c, err := net.Dial("tcp", *addr)
		if err != nil {
			refused++
			continue
		}
		if i%2 == 1 {
			if _, err := c.Write(proposal); err != nil {
				refused++
			}
		}
		conns = append(conns, c)
	}
	fmt.Printf("flood: %d connections open (%d refused at connect)\n", len(conns), refused)
	_, _ = io.Copy(io.Discard, os.Stdin)
	for _, c := range conns {
		c.Close()
	}
}
