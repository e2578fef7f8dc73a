package rdma

/*
#include <stdlib.h>
#include "verbs.h"
*/
import "C"

import (
	"fmt"
	"sync"
	"unsafe"
)

// The package loads librdmacm and libibverbs with dlopen (dl.c) the first
// time a stream, a listener or a diagnostic needs them, instead of linking
// them: a process that streams over TCP, or runs on a host without RDMA
// devices, never maps them (that saved about 1 ms of every start).

// The sonames of the libraries, as rdma-core installs them.
const (
	verbsLib = "libibverbs.so.1"
	cmLib    = "librdmacm.so.1"
)

var (
	loadOnce sync.Once
	loadErr  error
)

// load opens the verbs libraries once; every call returns the first
// call's result.
func load() error {
	loadOnce.Do(func() { loadErr = loadLibs(verbsLib, cmLib) })
	return loadErr
}

// loadLibs opens verbs and cm (sonames or paths) and resolves every
// function this package calls from them.
func loadLibs(verbs, cm string) error {
	v, c := C.CString(verbs), C.CString(cm)
	defer C.free(unsafe.Pointer(v))
	defer C.free(unsafe.Pointer(c))
	var msg [512]C.char
	if C.rp_load(v, c, &msg[0], C.int(len(msg))) != 0 {
		return fmt.Errorf("cannot load the RDMA libraries (%s): install %s and %s (rdma-core; Debian/Ubuntu: apt install libibverbs1 librdmacm1)", C.GoString(&msg[0]), verbs, cm)
	}
	return nil
}
