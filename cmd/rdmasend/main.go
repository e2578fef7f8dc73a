// Command rdmasend streams its standard input to an rdmarecv on another host
// over RDMA (InfiniBand, RoCE, iWARP) or TCP. Run `rdmasend --help`.
package main

import (
	"os"

	"github.com/rdmapipe/rdmapipe/internal/sendrecv"
)

func main() {
	os.Exit(sendrecv.Send(os.Args))
}
