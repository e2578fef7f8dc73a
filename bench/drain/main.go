// Command drain reads its stdin to the end at most -rate bytes a second (0:
// as fast as it comes), as a slow consumer of a receiver's output would
// (bench/broadcast.sh's fleet), and discards it. At the end it prints one
// line: the bytes read, their XXH3 (hex), and the Unix time in seconds at
// which the last byte arrived (not the end of the input, which a relay
// gives only once the hosts after it confirmed).
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/zeebo/xxh3"
)

func main() {
	rate := flag.Float64("rate", 0, "bytes a second at most; 0: no limit")
	flag.Parse()
	if err := drain(os.Stdin, *rate); err != nil {
		fmt.Fprintln(os.Stderr, "drain:", err)
		os.Exit(1)
	}
}

// drain reads r to its end at rate bytes a second at most and prints what
// it read.
func drain(r io.Reader, rate float64) error {
	buf := make([]byte, 1<<20)
	if rate > 0 {
		buf = buf[:max(4096, min(len(buf), int(rate/50)))] // about 50 reads a second
	}
	h := xxh3.New()
	var n int64
	var start, last time.Time
	for {
		m, err := r.Read(buf)
		if m > 0 {
			last = time.Now()
			if n == 0 {
				start = last // the rate counts from the first byte
			}
			h.Write(buf[:m])
			n += int64(m)
			if rate > 0 {
				due := start.Add(time.Duration(float64(n) / rate * float64(time.Second)))
				time.Sleep(time.Until(due))
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
	}
	_, err := fmt.Printf("%d %016x %.6f\n", n, h.Sum64(), float64(last.UnixNano())/1e9)
	return err
}
