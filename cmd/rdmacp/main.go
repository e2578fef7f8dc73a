// Command rdmacp copies files and directories to another host over RDMA
// (or TCP), with the receiving side started through ssh. Run `rdmacp --help`.
package main

import (
	"os"

	"github.com/rdmapipe/rdmapipe/internal/cp"
)

func main() {
	os.Exit(cp.Main(os.Args))
}
