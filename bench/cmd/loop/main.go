// Command loop is the steady-state workload of the airlock benchmark: a
// static Go program that runs one kind of operation N times and prints the
// nanoseconds per operation, so start-up cost is left out of the number.
//
//	loop getpid|stat|open|cpu N
//
// getpid is the cheapest syscall (the seccomp filter's per-call cost shows
// most), stat walks a path (mount namespace lookups), open+close also passes
// Landlock's file hooks, and cpu makes no syscalls at all.
package main

import (
	"fmt"
	"os"
	"strconv"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: loop getpid|stat|open|cpu N")
		os.Exit(2)
	}
	n, err := strconv.Atoi(os.Args[2])
	if err != nil || n <= 0 {
		fmt.Fprintf(os.Stderr, "loop: N %q: want a positive integer\n", os.Args[2])
		os.Exit(2)
	}
	op, ok := ops[os.Args[1]]
	if !ok {
		fmt.Fprintf(os.Stderr, "loop: unknown operation %q\n", os.Args[1])
		os.Exit(2)
	}
	start := time.Now()
	if err := op(n); err != nil {
		fmt.Fprintf(os.Stderr, "loop %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
	fmt.Printf("%.2f\n", float64(time.Since(start).Nanoseconds())/float64(n))
}

var ops = map[string]func(n int) error{
	"getpid": func(n int) error {
		for range n {
			// RawSyscall: no scheduler hooks, just the kernel entry and the filter.
			syscall.RawSyscall(syscall.SYS_GETPID, 0, 0, 0)
		}
		return nil
	},
	"stat": func(n int) error {
		var st syscall.Stat_t
		for range n {
			if err := syscall.Stat("/", &st); err != nil {
				return err
			}
		}
		return nil
	},
	"open": func(n int) error {
		for range n {
			// /dev/null exists in every contender's root and is readable there.
			fd, err := syscall.Open("/dev/null", syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
			if err != nil {
				return err
			}
			syscall.Close(fd)
		}
		return nil
	},
	"cpu": func(n int) error {
		x := uint64(88172645463325252)
		for range n {
			// xorshift64: cheap, serial, and not foldable by the compiler.
			x ^= x << 13
			x ^= x >> 7
			x ^= x << 17
		}
		if x == 0 { // never: xorshift64 does not reach 0; the test keeps the loop from being dropped
			return fmt.Errorf("xorshift64 reached 0")
		}
		return nil
	},
}
