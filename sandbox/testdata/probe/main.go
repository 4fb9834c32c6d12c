// Command probe makes the raw system calls its arguments describe and prints
// one line per call, "name errno", where errno is 0 when the call succeeded.
// The sandbox tests build it with CGO_ENABLED=0 and run it inside airlock to
// show that the seccomp filter refuses each call; the same specs drive a
// Python runner, so both probe exactly the same calls.
//
// Each argument is "name:number:arg,arg,..." with up to six args. An arg is
// an integer (decimal, 0x hex, or negative), "buf" (a pointer to 4 KiB of
// zeroes), "str=TEXT" (a pointer to TEXT with a NUL after it) or "pid" (the
// caller's pid). Probes run in order; the program always exits 0 once every
// spec parsed.
package main

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"unsafe"
)

func main() {
	for _, spec := range os.Args[1:] {
		name, errno, err := probe(spec)
		if err != nil {
			fmt.Fprintf(os.Stderr, "probe: %v\n", err)
			os.Exit(2)
		}
		fmt.Printf("%s %d\n", name, errno)
	}
}

func probe(spec string) (string, uintptr, error) {
	f := strings.SplitN(spec, ":", 3)
	if len(f) != 3 {
		return "", 0, fmt.Errorf("spec %q: want name:number:args", spec)
	}
	nr, err := strconv.ParseUint(f[1], 0, 64)
	if err != nil {
		return "", 0, fmt.Errorf("spec %q: number: %v", spec, err)
	}
	var args [6]uintptr
	var keep [][]byte // the memory args point to, alive until the call returns
	if f[2] != "" {
		toks := strings.Split(f[2], ",")
		if len(toks) > 6 {
			return "", 0, fmt.Errorf("spec %q: %d args, at most 6", spec, len(toks))
		}
		for i, tok := range toks {
			switch {
			case tok == "buf":
				b := make([]byte, 4096)
				keep = append(keep, b)
				args[i] = uintptr(unsafe.Pointer(&b[0]))
			case strings.HasPrefix(tok, "str="):
				b := append([]byte(strings.TrimPrefix(tok, "str=")), 0)
				keep = append(keep, b)
				args[i] = uintptr(unsafe.Pointer(&b[0]))
			case tok == "pid":
				args[i] = uintptr(os.Getpid())
			default:
				v, err := strconv.ParseInt(tok, 0, 64)
				if err != nil {
					return "", 0, fmt.Errorf("spec %q: arg %q: %v", spec, tok, err)
				}
				args[i] = uintptr(v)
			}
		}
	}
	_, _, errno := syscall.Syscall6(uintptr(nr), args[0], args[1], args[2], args[3], args[4], args[5])
	runtime.KeepAlive(keep)
	return f[0], uintptr(errno), nil
}
