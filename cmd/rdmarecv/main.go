// Command rdmarecv receives a stream from rdmasend and writes it to its
// standard output. Run `rdmarecv --help`.
package main

import (
	"os"

	"github.com/rdmapipe/rdmapipe/internal/app"
)

func main() {
	os.Exit(app.Recv(os.Args))
}
