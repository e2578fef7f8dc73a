package rdma

/*
#include "verbs.h"
*/
import "C"

import (
	"context"
	"fmt"
)

// monitor fails the connection when rdma_cm reports that it ended, so that
// Poll returns promptly even when no work request is outstanding.
func (c *Conn) monitor() {
	defer close(c.life.monDone)
	for {
		ev, err := c.cm.next(context.Background())
		if err != nil {
			if !c.life.closing.Load() {
				c.fail(err.Error())
			}
			return
		}
		switch ev._type {
		case C.RDMA_CM_EVENT_DISCONNECTED:
			c.fail("peer disconnected")
		case C.RDMA_CM_EVENT_DEVICE_REMOVAL:
			c.fail("RDMA device removed")
		case C.RDMA_CM_EVENT_TIMEWAIT_EXIT, C.RDMA_CM_EVENT_ADDR_CHANGE, C.RDMA_CM_EVENT_ESTABLISHED:
		default:
			c.fail(fmt.Sprintf("unexpected %s (status %d)", eventName(&ev), ev.status))
		}
	}
}
