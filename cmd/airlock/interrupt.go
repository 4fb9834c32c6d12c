package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
)

// interrupt turns SIGINT, SIGTERM and SIGHUP into the cancellation of a run:
// the sandbox is torn down the way a blown budget tears it down, the report
// says halted_by "interrupted", and airlock exits 128+N like a shell whose
// command died of signal N (130, 143, 129). Later signals during the
// teardown are absorbed, so nothing is left half torn down.
type interrupt struct {
	ctx    context.Context
	stop   func()
	signal atomic.Int32 // the first signal received, 0 until then
}

func newInterrupt() *interrupt {
	ctx, cancel := context.WithCancelCause(context.Background())
	ch := make(chan os.Signal, 4)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	done := make(chan struct{})
	in := &interrupt{ctx: ctx}
	go func() {
		for {
			select {
			case s := <-ch:
				sig := s.(syscall.Signal)
				if in.signal.CompareAndSwap(0, int32(sig)) {
					cancel(fmt.Errorf("airlock received %s", sigName(sig)))
				}
			case <-done:
				return
			}
		}
	}()
	in.stop = func() {
		signal.Stop(ch)
		close(done)
		cancel(nil)
	}
	return in
}

// exitCode is 128+N for the signal received, or 0 when none was.
func (in *interrupt) exitCode() int {
	if s := in.signal.Load(); s != 0 {
		return 128 + int(s)
	}
	return 0
}

func sigName(s syscall.Signal) string {
	switch s {
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGHUP:
		return "SIGHUP"
	}
	return s.String()
}
