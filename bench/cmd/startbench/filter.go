package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// airlockFilters returns the seccomp filters airlock installs, as the
// kernel holds them: it starts `airlock run -- sleep`, waits for the
// sandboxed sleep, and reads each of its filters with
// PTRACE_SECCOMP_GET_FILTER (root, CONFIG_CHECKPOINT_RESTORE). The result
// is the cBPF programs, oldest first, as struct sock_filter arrays, the
// form bubblewrap's --add-seccomp-fd reads. Taking them from a running
// sandbox, not from a copy of airlock's filter builder, keeps the
// benchmark on the product's public surface and makes bubblewrap run the
// very filter airlock applies.
func airlockFilters(ctx context.Context, airlockBin string) ([][]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, airlockBin, "run", "--", sleep, "60")
	cmd.Env = cleanEnv
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	var waitErr error
	exited := make(chan struct{}) // closed when airlock run has been waited for
	go func() { waitErr = cmd.Wait(); close(exited) }()
	pid := 0
	defer func() {
		if pid > 0 {
			unix.Kill(pid, unix.SIGKILL) // the sandbox ends with its command
		} else {
			cmd.Process.Kill()
		}
		<-exited // bounded by ctx, which kills airlock run
	}()

	pid, err = waitSandboxed(ctx, cmd.Process.Pid, filepath.Base(sleep), exited)
	if err != nil {
		cmd.Process.Kill()
		<-exited // out is complete only now
		return nil, fmt.Errorf("%w (airlock run: %v: %q)", err, waitErr, strings.TrimSpace(out.String()))
	}
	n, err := statusField(pid, "Seccomp_filters")
	if err != nil {
		return nil, err
	}
	return readFilters(pid, n)
}

// waitSandboxed polls for a descendant of root running comm under a
// seccomp filter (after its execve: the filter is installed before it).
func waitSandboxed(ctx context.Context, root int, comm string, exited <-chan struct{}) (int, error) {
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		for _, pid := range descendants(root) {
			c, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
			if strings.TrimSpace(string(c)) != comm {
				continue
			}
			if mode, err := statusField(pid, "Seccomp"); err == nil && mode == 2 {
				return pid, nil
			}
		}
		select {
		case <-exited:
			return 0, errors.New("airlock run exited before its command was seen")
		case <-ctx.Done():
			return 0, fmt.Errorf("no sandboxed %s under airlock run: %w", comm, ctx.Err())
		case <-tick.C:
		}
	}
}

// descendants lists the processes below root, read from /proc.
func descendants(root int) []int {
	ents, _ := os.ReadDir("/proc")
	children := map[int][]int{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(stat[i+1:]))
		if len(f) < 2 {
			continue
		}
		if ppid, err := strconv.Atoi(f[1]); err == nil {
			children[ppid] = append(children[ppid], pid)
		}
	}
	var out []int
	for queue := children[root]; len(queue) > 0; queue = queue[1:] {
		out = append(out, queue[0])
		queue = append(queue, children[queue[0]]...)
	}
	return out
}

// statusField returns a numeric field of /proc/PID/status.
func statusField(pid int, name string) (int, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && k == name {
			return strconv.Atoi(strings.TrimSpace(v))
		}
	}
	return 0, fmt.Errorf("/proc/%d/status has no %s field: the kernel needs CONFIG_SECCOMP_FILTER", pid, name)
}

// readFilters seizes pid, reads its n filters and lets it go. ptrace
// requests must come from the thread that attached, so all of it runs on
// one locked thread, which exits with the goroutine.
func readFilters(pid, n int) ([][]byte, error) {
	if n < 1 {
		return nil, fmt.Errorf("sandboxed process %d has no seccomp filter", pid)
	}
	type result struct {
		progs [][]byte
		err   error
	}
	res := make(chan result, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread was a tracer
		progs, err := seize(pid, func() ([][]byte, error) {
			progs := make([][]byte, n)
			for i := range n {
				// Index 0 is the newest filter; return them oldest first,
				// the order they were installed in.
				p, err := getFilter(pid, n-1-i)
				if err != nil {
					return nil, err
				}
				progs[i] = p
			}
			return progs, nil
		})
		res <- result{progs, err}
	}()
	r := <-res
	return r.progs, r.err
}

// seize stops pid without a signal (PTRACE_SEIZE, PTRACE_INTERRUPT), runs
// fn and detaches.
func seize(pid int, fn func() ([][]byte, error)) ([][]byte, error) {
	if err := unix.PtraceSeize(pid); err != nil {
		return nil, fmt.Errorf("ptrace seize %d: %w (needs root)", pid, err)
	}
	defer unix.PtraceDetach(pid)
	if err := unix.PtraceInterrupt(pid); err != nil {
		return nil, fmt.Errorf("ptrace interrupt %d: %w", pid, err)
	}
	var ws unix.WaitStatus
	for {
		_, err := unix.Wait4(pid, &ws, unix.WALL, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("wait for %d to stop: %w", pid, err)
		}
		if ws.Stopped() {
			break
		}
		if ws.Exited() || ws.Signaled() {
			return nil, fmt.Errorf("process %d ended before its filter was read", pid)
		}
	}
	return fn()
}

// getFilter reads filter index of pid: one call for the length, one for
// the instructions (8 bytes each, native byte order: struct sock_filter).
func getFilter(pid, index int) ([]byte, error) {
	n, _, errno := unix.Syscall6(unix.SYS_PTRACE, unix.PTRACE_SECCOMP_GET_FILTER, uintptr(pid), uintptr(index), 0, 0, 0)
	if errno != 0 {
		return nil, fmt.Errorf("PTRACE_SECCOMP_GET_FILTER %d of process %d: %w (the kernel needs CONFIG_CHECKPOINT_RESTORE)", index, pid, errno)
	}
	prog := make([]unix.SockFilter, n)
	if n > 0 {
		got, _, errno := unix.Syscall6(unix.SYS_PTRACE, unix.PTRACE_SECCOMP_GET_FILTER, uintptr(pid), uintptr(index), uintptr(unsafe.Pointer(&prog[0])), 0, 0)
		if errno != 0 {
			return nil, fmt.Errorf("PTRACE_SECCOMP_GET_FILTER %d of process %d: %w", index, pid, errno)
		}
		if int(got) != len(prog) {
			return nil, fmt.Errorf("filter %d of process %d changed length while read (%d, then %d instructions)", index, pid, n, got)
		}
	}
	var b bytes.Buffer
	if err := binary.Write(&b, binary.NativeEndian, prog); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}
