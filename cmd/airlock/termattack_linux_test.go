package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/airtest"
	"github.com/airlock-sandbox/airlock/internal/enforce/fsaudit"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// The hostile bytes of the attack: erase the line, return the carriage,
// print a forged verdict on a fresh line, set the window title (OSC 0),
// write the clipboard (OSC 52), an 8-bit CSI (U+009B, UTF-8-encoded) that
// some terminals obey, and a right-to-left override.
const (
	forged      = airtest.Forged
	evilHost    = "\x1b[2K\r\n" + forged + "\n\x1b]0;pwned\x07\x1b]52;c;cHduZWQ=\x07\u009b31m\u202e"
	evilHostEsc = `\x1b[2K\r\n` + forged + `\n\x1b]0;pwned\x07\x1b]52;c;cHduZWQ=\x07\u009b31m\u202e`
	// evilDir is shorter: it becomes a path component, so no "/".
	evilDir    = "\x1b[2K\r" + forged + "\x1b]0;pwned\x07"
	evilDirEsc = `\x1b[2K\r` + forged + `\x1b]0;pwned\x07`
)

// socksScript asks the in-sandbox SOCKS5 proxy (ALL_PROXY) for evilHost
// and prints the reply code; its own output is plain ASCII.
const socksScript = `import socket, struct
host = HOST
s = socket.create_connection(("127.0.0.1", 1080), timeout=10)
s.sendall(b"\x05\x01\x00")
assert s.recv(2) == b"\x05\x00"
s.sendall(b"\x05\x01\x00\x03" + bytes([len(host)]) + host + struct.pack(">H", 443))
print("socks reply", s.recv(10)[1])
`

// mknodScript makes a directory named evilDir and asks for a device node
// in it: Landlock refuses make_char and its audit record names the
// directory, which fs-audit turns into a denial.
const mknodScript = `import os
d = b"/tmp/" + NAME
os.mkdir(d)
try:
    os.mknod(d + b"/n", 0o600 | 0o020000, os.makedev(1, 3))
except OSError as e:
    print("mknod errno", e.errno)
`

// TestAttackTerminalInjection runs `airlock run` inside a real
// pseudo-terminal, as an operator would, while the sandboxed code asks
// the egress proxy for a host name made of terminal control sequences.
// Everything the terminal receives must be airlock's own plain lines: no
// ESC, CR, BEL, OSC or C1 control and no bidi override from the sandbox,
// the forged verdict never at the start of a line, and the genuine denial
// present with the host escaped.
func TestAttackTerminalInjection(t *testing.T) {
	airtest.RequireUserNS(t)
	airtest.RequireLandlockABI(t, 4)
	airtest.RequireBinary(t, "/usr/bin/python3")
	socks := []string{"run", "--net-host", "example.com:443", "--max-wall", "20s", "--", "/usr/bin/python3", "-c", strings.Replace(socksScript, "HOST", pyBytes(evilHost), 1)}
	wantSOCKS := "airlock: denied connect [" + evilHostEsc + "]:443 (net_hosts): "

	t.Run("socks-NO_COLOR", func(t *testing.T) {
		out := runInPTY(t, []string{"NO_COLOR=1"}, socks...)
		checkTerminal(t, out, false, wantSOCKS, "socks reply 2")
	})
	t.Run("socks-color", func(t *testing.T) {
		out := runInPTY(t, nil, socks...)
		checkTerminal(t, out, true, wantSOCKS, "socks reply 2")
	})
	t.Run("fs-audit-dir-name", func(t *testing.T) {
		airtest.RequireRoot(t)
		if err := fsaudit.Available(); err != nil {
			airtest.SkipOrFail(t, "Landlock audit records unavailable: %v", err)
		}
		out := runInPTY(t, []string{"NO_COLOR=1"},
			"run", "--fs-audit", "--max-wall", "20s", "--", "/usr/bin/python3", "-c", strings.Replace(mknodScript, "NAME", pyBytes(evilDir), 1))
		checkTerminal(t, out, false, "airlock: denied mknod /tmp/"+evilDirEsc+" (): ", "mknod errno 13")
	})
	t.Run("json", func(t *testing.T) {
		// --json prints only the report: JSON escapes C0 itself; C1 and
		// U+2028/2029 must be escaped too, with the same decoded value.
		out := runInPTY(t, nil, append([]string{"run", "--json"}, socks[1:]...)...)
		w := strings.ReplaceAll(out, "\r\n", "\n")
		airtest.CheckNoControls(t, w)
		var rep sandbox.Report
		if err := json.Unmarshal([]byte(w), &rep); err != nil {
			t.Fatalf("airlock run --json under a pty: not one JSON report: %v\n%q", err, w)
		}
		found := false
		for _, d := range rep.Denials {
			found = found || d.Target == "["+evilHost+"]:443"
		}
		if !found {
			t.Errorf("--json report lacks the denial of the hostile host with its exact bytes; denials: %+v", rep.Denials)
		}
	})
}

// checkTerminal checks what the terminal received from one `airlock run`.
// The pty's line discipline turns every \n written into \r\n (ONLCR); the
// inverse is exact, so any \r left was written by airlock.
func checkTerminal(t *testing.T, out string, color bool, wantPrefix, wantOutput string) {
	t.Helper()
	w := strings.ReplaceAll(out, "\r\n", "\n")
	if color {
		// The summary's own SGR codes, and nothing else, are allowed.
		plain := w
		for _, sgr := range []string{sgrRed, sgrYellow, sgrCyan, sgrReset} {
			plain = strings.ReplaceAll(plain, sgr, "")
		}
		if plain == w {
			t.Errorf("stderr is a terminal and NO_COLOR is unset, but the summary has no colour: the test cannot tell airlock's SGR codes apart\n%q", w)
		}
		w = plain
	}
	airtest.CheckNoControls(t, w)
	var lines []string
	for _, line := range strings.Split(w, "\n") {
		if strings.HasPrefix(line, forged) {
			t.Errorf("the terminal shows the forged line %q at the start of a line", line)
		}
		if strings.HasPrefix(line, "airlock: denied") {
			lines = append(lines, line)
		}
	}
	if !strings.Contains(w, wantOutput+"\n") {
		t.Errorf("the command's own output %q is missing: the attack did not run as planned\n%q", wantOutput, w)
	}
	for _, line := range lines {
		if strings.HasPrefix(line, wantPrefix) {
			return
		}
	}
	t.Errorf("no denial line starts with the escaped target %q; denial lines:\n%q\nterminal:\n%q", wantPrefix, lines, w)
}

// runInPTY runs the airlock binary with its stdin, stdout and stderr on
// the slave of a new pseudo-terminal that is its controlling terminal,
// and returns every byte the master received until the last slave closed.
func runInPTY(t *testing.T, env []string, args ...string) string {
	t.Helper()
	master, slave, err := openTestPTY()
	if err != nil {
		airtest.SkipOrFail(t, "no pseudo-terminal to test with: %v", err)
		return "" // not reached: SkipOrFail ends the test
	}
	defer master.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, airlockBin, rootless(args)...)
	cmd.Dir = t.TempDir()
	cmd.Env = append(withoutEnv(os.Environ(), "NO_COLOR"), append([]string{"TERM=xterm-256color"}, env...)...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		slave.Close()
		t.Fatalf("start %s under a pty: %v", airlockBin, err)
	}
	slave.Close() // the child holds it now; the master sees EIO once it is gone
	var buf bytes.Buffer
	read := make(chan error, 1)
	go func() {
		_, err := io.Copy(&buf, io.LimitReader(master, 1<<20))
		read <- err
	}()
	werr := cmd.Wait()
	var ee *exec.ExitError
	if ctx.Err() != nil {
		t.Fatalf("airlock %q under a pty did not finish within 60s", args)
	} else if werr != nil && !errors.As(werr, &ee) {
		t.Fatalf("airlock %q under a pty: %v", args, werr)
	}
	select {
	case err := <-read:
		if err != nil && !errors.Is(err, syscall.EIO) {
			t.Fatalf("read the pty master: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("airlock exited but the pty master saw no end of output within 10s (a process still holds the terminal)")
	}
	t.Logf("terminal received (exit %d):\n%q", cmd.ProcessState.ExitCode(), buf.String())
	return buf.String()
}

// openTestPTY allocates a pseudo-terminal pair as sandbox/pty_linux.go
// does (pty(7)), leaving the line discipline at its defaults (ONLCR on),
// as a terminal emulator does.
func openTestPTY() (master, slave *os.File, err error) {
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("open /dev/ptmx: %w", err)
	}
	fd := int(m.Fd())
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		m.Close()
		return nil, nil, fmt.Errorf("unlock: %w", err)
	}
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	if err != nil {
		m.Close()
		return nil, nil, fmt.Errorf("pty number: %w", err)
	}
	s, err := os.OpenFile(filepath.Join("/dev/pts", strconv.Itoa(n)), os.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		m.Close()
		return nil, nil, fmt.Errorf("open slave: %w", err)
	}
	return m, s, nil
}

// pyBytes returns s as a Python bytes literal, every byte escaped, so
// the script's source stays plain ASCII.
func pyBytes(s string) string {
	var b strings.Builder
	b.WriteString(`b"`)
	for i := 0; i < len(s); i++ {
		fmt.Fprintf(&b, `\x%02x`, s[i])
	}
	b.WriteString(`"`)
	return b.String()
}

// withoutEnv returns env without the variable name.
func withoutEnv(env []string, name string) []string {
	var out []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, name+"=") {
			out = append(out, kv)
		}
	}
	return out
}

// TestAttackCLIEscapes drives the binary's other printers with hostile
// text from the host: `airlock explain` prints the values of the host's
// environment variables a policy passes, and `airlock policy check` echoes
// the file name it was given in its error.
func TestAttackCLIEscapes(t *testing.T) {
	t.Setenv("AIRLOCK_TEST_HOSTILE", hostile)
	dir := t.TempDir()
	t.Run("explain-env-value", func(t *testing.T) {
		r := airlock(t, dir, "explain", "--env", "AIRLOCK_TEST_HOSTILE", "--", "/bin/true")
		if r.code != 0 {
			t.Fatalf("airlock explain: exit %d\n%s", r.code, r.stderr)
		}
		airtest.CheckNoControls(t, r.stdout)
		if want := `AIRLOCK_TEST_HOSTILE=\x1b[2K\r\n` + forged + `\n\x1b]0;pwned\x07`; !strings.Contains(r.stdout, want) {
			t.Errorf("airlock explain does not show the value escaped (%q):\n%s", want, r.stdout)
		}
	})
	t.Run("policy-check-file-name", func(t *testing.T) {
		r := airlock(t, dir, "policy", "check", hostile+".yaml")
		if r.code != 1 {
			t.Fatalf("airlock policy check: exit %d, want 1\n%s", r.code, r.stderr)
		}
		airtest.CheckNoControls(t, r.stderr)
		for _, line := range strings.Split(r.stderr, "\n") {
			if strings.HasPrefix(line, forged) {
				t.Errorf("stderr shows the forged line %q at the start of a line", line)
			}
		}
		if want := `\x1b[2K\r\n` + forged; !strings.HasPrefix(r.stderr, want) {
			t.Errorf("airlock policy check stderr = %q, want it to start with the escaped name %q", r.stderr, want)
		}
	})
}
