package transport

import (
	"context"
	"testing"
	"time"

	"github.com/rdmapipe/rdmapipe/pipe/conn"
	"github.com/rdmapipe/rdmapipe/pipe/transport/auto"
	"github.com/rdmapipe/rdmapipe/pipe/transport/rdma"
	"github.com/rdmapipe/rdmapipe/pipe/transport/tcp"
)

// TestDialer checks the dialer each name gives, with the options of the
// Config, and that rdma on a host without RDMA fails as conn.KindNoRDMA.
func TestDialer(t *testing.T) {
	t.Parallel()
	c := Config{HandshakeTimeout: 3 * time.Second, RDMA: rdma.Options{GIDIndex: -1}, Who: "test"}
	for _, name := range []string{"", "auto", "tcp", "rdma"} {
		c.Name = name
		switch d := c.Dialer().(type) {
		case tcp.Dialer:
			if name != "tcp" || d.HandshakeTimeout != c.HandshakeTimeout {
				t.Errorf("%q: %#v", name, d)
			}
		case *auto.Dialer:
			if name != "" && name != "auto" || d.TCP.HandshakeTimeout != c.HandshakeTimeout || d.RDMA != c.RDMA || d.Name != "test" {
				t.Errorf("%q: %#v", name, d)
			}
		case rdmaDialer:
			if name != "rdma" || d.Options != c.RDMA {
				t.Errorf("%q: %#v", name, d)
			}
			if rdma.Available() != nil {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				_, err := d.Dial(ctx, "127.0.0.1:1", conn.NewParams(4096, 4))
				cancel()
				if conn.KindOf(err) != conn.KindNoRDMA {
					t.Errorf("rdma without a device: %v, want kind %v", err, conn.KindNoRDMA)
				}
			}
		default:
			t.Errorf("%q: a %T", name, d)
		}
	}
}

// TestListen listens with each name on loopback (rdma only where a device
// is present) and checks that a failed listen returns a nil listener, not
// an interface holding a nil pointer.
func TestListen(t *testing.T) {
	t.Parallel()
	p := conn.NewParams(4096, 4)
	for _, name := range []string{"tcp", "auto", "rdma"} {
		l, err := Config{Name: name}.Listen(context.Background(), "127.0.0.1:0", p)
		if name == "rdma" && rdma.Available() != nil {
			if l != nil || conn.KindOf(err) != conn.KindNoRDMA {
				t.Errorf("rdma without a device: %v, %v; want no listener and kind %v", l, err, conn.KindNoRDMA)
			}
			continue
		}
		if err != nil || l == nil {
			t.Fatalf("%s: %v, %v", name, l, err)
		}
		l.Close()
		if l, err := (Config{Name: name}).Listen(context.Background(), "256.0.0.1:0", p); err == nil || l != nil {
			t.Errorf("%s on a bad address: %v, %v; want an error and a nil listener", name, l, err)
		}
	}
}
