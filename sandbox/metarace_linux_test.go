package sandbox_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/policy"
	"github.com/airlock-sandbox/airlock/policy/budget"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// The metadata broker's races: a broker that checked a path or an fd and
// then let the kernel act on the target's own call would act on whatever
// another thread put there meanwhile. Each race runs a chmod loop against
// a second thread that swaps what the call names between a file inside
// the fs_write grant and a canary outside it; the canary must stay as it
// was, whatever the interleaving.

// raceScript races, for a bounded number of rounds each (the mode has no
// set-id bit, so the chmods of the file inside the grant succeed): the path in the
// call's own memory, a symlink in the grant swapped with a file, and the
// fd number swapped with dup2.
const raceScript = `
import ctypes, os, sys, threading
W, C = sys.argv[1], sys.argv[2]
ROUNDS = 1000
sys.setswitchinterval(1e-5)  # the racer and the caller take turns often
libc = ctypes.CDLL(None, use_errno=True)
NR = {"x86_64": 452, "aarch64": 452}[os.uname().machine]  # fchmodat2
inside = os.path.join(W, "i" * (len(C) - len(W) - 1))
open(inside, "w").write("x")
assert len(inside) == len(C)
buf = ctypes.create_string_buffer(inside.encode(), len(inside) + 1)
stop = False
changed = 0

def flip_path():
    a, b = inside.encode(), C.encode()
    while not stop:
        ctypes.memmove(buf, b, len(b))
        ctypes.memmove(buf, a, len(a))
def swap_link():
    l, tmp, reg = os.path.join(W, "target"), os.path.join(W, "tmp"), os.path.join(W, "reg")
    while not stop:
        try:
            os.symlink(C, tmp); os.rename(tmp, l)
            open(reg, "w").close(); os.rename(reg, l)
        except OSError:
            pass
fd_in = os.open(inside, os.O_RDONLY)
fd_out = os.open(C, os.O_RDONLY)
N = 100
def swap_fd():
    while not stop:
        os.dup2(fd_out, N); os.dup2(fd_in, N)

for name, racer, attempt in [
    ("path", flip_path, lambda: libc.syscall(NR, -100, buf, 0o777, 0)),
    ("symlink", swap_link, lambda: libc.syscall(NR, -100, os.path.join(W, "target").encode(), 0o777, 0)),
    ("fd", swap_fd, lambda: libc.syscall(91 if os.uname().machine == "x86_64" else 52, N, 0o777)),
]:
    stop = False
    th = threading.Thread(target=racer)
    th.start()
    ok = 0
    for _ in range(ROUNDS):
        if attempt() == 0:
            ok += 1
    stop = True
    th.join()
    print("RACE", name, "succeeded", ok, "of", ROUNDS, flush=True)
print("DONE")
`

// metadataRaces runs raceScript on a backend against a canary outside the
// fs_write grant, and fails t if the canary changed.
func metadataRaces(t *testing.T, isolation string) {
	t.Helper()
	writer := os.Geteuid()
	owners := []int{writer}
	if writer == 0 {
		writer = metaWriter
		owners = append(owners, writer)
	}
	mt := newMetaTree(t, writer, owners...)
	spec := policy.Spec{FSRead: []string{mt.readable}, FSWrite: []string{mt.w}, AllowDowngrade: []string{"staged_writes"},
		Budget: budget.Limits{Wall: 50 * time.Second}} // a broker built with -race on a busy machine is slow
	for _, c := range mt.canaries {
		if !strings.HasPrefix(filepath.Base(c.Path), "bin-") || !strings.HasPrefix(c.Path, mt.readable) {
			continue
		}
		t.Run(filepath.Base(c.Path), func(t *testing.T) {
			before := readMeta(t, c.Path)
			rep := runIn(t, isolation, spec, "/usr/bin/python3", "-c", raceScript, mt.w, c.Path)
			wantExit(t, rep, 0)
			if !strings.Contains(rep.Stdout, "DONE") {
				t.Fatalf("the race script did not finish:\n%s\n%s", rep.Stdout, rep.Stderr)
			}
			t.Logf("%s", strings.TrimSpace(rep.Stdout))
			if isolation == sandbox.IsolationLandlock && strings.Contains(rep.Stdout, "succeeded 0 of") {
				// The chmods of the file inside the grant must get through
				// some of the time, or the race raced nothing.
				t.Errorf("a race never reached the file inside the grant:\n%s", rep.Stdout)
			}
			if after := readMeta(t, c.Path); fmt.Sprint(after) != fmt.Sprint(before) {
				t.Fatalf("%s backend: a race changed the canary %s outside the grant:\n    before %+v\n    after  %+v\n%s", isolation, c.Path, before, after, rep.Stdout)
			}
		})
	}
}

// TestUnsharedAttackMetadataRaces: the landlock backend, as whoever runs
// the test.
func TestUnsharedAttackMetadataRaces(t *testing.T) {
	requireUnshared(t)
	metadataRaces(t, sandbox.IsolationLandlock)
}

// TestUnsharedAttackMetadataRacesUser: the same races, run by an
// unprivileged user against the user's own file.
func TestUnsharedAttackMetadataRacesUser(t *testing.T) {
	requireUnshared(t)
	if asUnprivileged(t, metaUser) {
		metadataRaces(t, sandbox.IsolationLandlock)
	}
}
