// Command rdmarecv receives a stream from rdmasend and writes it to its
// standard output. Run `rdmarecv --help`.
package main

import (
	"os"

	"github.com/rdmapipe/rdmapipe/internal/sendrecv"
)

func main() {
	os.Exit(sendrecv.Recv(os.Args))
}
