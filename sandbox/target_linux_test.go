package sandbox

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/airtest"
	"github.com/airlock-sandbox/airlock/plan"
	"github.com/airlock-sandbox/airlock/policy"
	"github.com/airlock-sandbox/airlock/policy/budget"
)

// TestPlanHandedOverIsCompiled: on every backend, and for a policy with
// credentials, the plan the backend hands its control process is, byte
// for byte, the plan airlock explain --isolation prints (Cmd.Explain): no
// backend changes a plan once compiled. What a run makes for itself is
// taken from the plan handed over: the landlock backend's scratch folder
// name, the trust bundle's content (checked on its own: the host's roots,
// then a certificate), and, for the landlock backend as root, the uid and
// gid its init runs the commands as, picked at launch from the grants'
// owners.
func TestPlanHandedOverIsCompiled(t *testing.T) {
	// Reachable by the unprivileged uid the landlock and gVisor backends
	// run as when the test is root.
	grant, err := os.MkdirTemp("", "airlock-planfinal-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(grant) })
	out := filepath.Join(grant, "out")
	if err := os.Mkdir(out, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(grant, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(out, 0o777); err != nil {
		t.Fatal(err)
	}
	root := func(bins ...string) func(*testing.T) {
		return func(t *testing.T) {
			airtest.RequireRoot(t)
			for _, b := range bins {
				airtest.RequireBinary(t, b)
			}
		}
	}
	for _, tc := range []struct {
		name, iso string
		creds     bool
		require   func(*testing.T)
	}{
		{"namespaces", IsolationNamespaces, false, func(t *testing.T) { airtest.RequireUserNS(t); airtest.RequireLandlockABI(t, 4) }},
		{"namespaces-credentials", IsolationNamespaces, true, func(t *testing.T) { airtest.RequireUserNS(t); airtest.RequireLandlockABI(t, 4) }},
		{"landlock", IsolationLandlock, false, func(t *testing.T) { airtest.RequireLandlockABI(t, plan.NoNamespacesMinLandlock) }},
		{"oci-credentials", IsolationOCI, true, root("/usr/sbin/runc")},
		{"gvisor-credentials", IsolationGVisor, true, root("/usr/bin/runsc")},
		{"microvm-credentials", IsolationMicroVM, true, root("/usr/bin/qemu-system-x86_64")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.require(t)
			spec := policy.Spec{FSRead: []string{grant}, FSWrite: []string{out}, NetHosts: []string{"example.com"},
				AllowDowngrade: []string{"staged_writes"}, Budget: budget.Limits{Wall: 60 * time.Second}}
			if os.Geteuid() != 0 {
				spec.AllowDowngrade = append(spec.AllowDowngrade, airtest.RootlessDowngrades()...)
			}
			if tc.creds {
				spec.Credentials = []policy.Credential{{Host: "example.com", Header: "Authorization", Env: "AIRLOCK_TEST_TOKEN"}}
			}
			p, err := policy.New(spec)
			if err != nil {
				t.Fatal(err)
			}
			cfg := Config{Policy: p, Isolation: tc.iso, LookupEnv: func(string) (string, bool) { return "Bearer t", true }}
			if tc.iso == IsolationMicroVM {
				if m, _ := filepath.Glob("/lib/modules/*/kernel/fs/9p/9p.ko"); len(m) == 0 {
					airtest.SkipOrFail(t, "no guest kernel with the 9p modules (/lib/modules/*/kernel/fs/9p/9p.ko): apt-get install linux-image-amd64")
				}
				cfg.Executable = staticInit(t) // the guest's initramfs needs a static init
			}
			var mu sync.Mutex
			var sent [][]byte
			cfg.handedOver = func(pl *plan.Plan) {
				raw, err := pl.MarshalBinary()
				if err != nil {
					t.Errorf("encode the plan handed over: %v", err)
				}
				mu.Lock()
				sent = append(sent, raw)
				mu.Unlock()
			}
			cmd := &Cmd{Config: cfg, Args: []string{"/bin/true"}, CommandIsGranted: true}
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			rep, err := cmd.Run(ctx)
			if err != nil || rep.ExitCode != 0 {
				t.Fatalf("run: %v exit %d error %q", err, rep.ExitCode, rep.Error)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(sent) != 1 {
				t.Fatalf("the backend handed over %d plans, want 1", len(sent))
			}
			var got plan.Plan
			if err := got.UnmarshalBinary(sent[0]); err != nil {
				t.Fatal(err)
			}

			want, err := cmd.Explain() // what airlock explain --isolation prints
			if err != nil {
				t.Fatal(err)
			}
			if tc.iso == IsolationLandlock {
				// The run's scratch folder has a random name.
				if want, err = cfg.compile(cmd.request(plan.Target{Backend: plan.BackendLandlock, Scratch: got.Scratch})); err != nil {
					t.Fatal(err)
				}
			}
			for i, m := range want.Mounts {
				if m.Target != plan.CABundlePath {
					continue
				}
				// The trust bundle's content is the run's: the host's
				// roots, then the CA it made.
				j := slices.IndexFunc(got.Mounts, func(m plan.Mount) bool { return m.Target == plan.CABundlePath })
				if !tc.creds || j < 0 {
					t.Fatalf("a trust bundle: explained %v, handed over %v, want both %v", true, j >= 0, tc.creds)
				}
				data := got.Mounts[j].Data
				plain, err := cmd.Plan() // the environment before the bundle's variables
				if err != nil {
					t.Fatal(err)
				}
				base, err := trustBase(plain.Env)
				if err != nil {
					t.Fatal(err)
				}
				if !strings.HasPrefix(data, string(base)+"\n") || !strings.HasSuffix(data, "-----END CERTIFICATE-----\n") {
					t.Errorf("the trust bundle is not the host's roots then a certificate: %d bytes, ends %q", len(data), data[max(0, len(data)-40):])
				}
				want.Mounts[i].Data = data
			}
			if tc.iso == IsolationLandlock {
				want.IDMap.HostUID, want.IDMap.HostGID = got.IDMap.HostUID, got.IDMap.HostGID
			}
			// Without a pids cgroup (a normal user's run), the launch adds
			// RLIMIT_NPROC for the accepted max_pids downgrade: the host's
			// cgroups decide it, which the compile cannot see.
			want.Rlimits = append(want.Rlimits, downgradeRlimits(want.Limits, rep.Enforcement.Downgrades)...)
			wantRaw, err := want.MarshalBinary()
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(sent[0], wantRaw) {
				t.Errorf("the plan handed over differs from the plan compiled for %s:\n%s\ncompiled:\n%s", tc.iso, got.String(), want.String())
			}
		})
	}
}

// staticInit builds cmd/airlock-init statically, for the microVM's guest.
func staticInit(t *testing.T) string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		airtest.SkipOrFail(t, "the go command is not on PATH, needed to build airlock-init: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "airlock-init")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := exec.CommandContext(ctx, goTool, "build", "-o", bin, "../cmd/airlock-init")
	c.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := c.CombinedOutput(); err != nil {
		t.Fatalf("CGO_ENABLED=0 go build -o %s ../cmd/airlock-init: %v\n%s", bin, err, b)
	}
	return bin
}

// TestPoolLearnStopsAtTrustBundle: the steps a pool's next inits mount
// ahead end before a plan's trust bundle, which holds that run's own CA.
func TestPoolLearnStopsAtTrustBundle(t *testing.T) {
	var st poolState
	tmp := plan.Mount{Kind: plan.KindTmpfs, Target: "/tmp", Writable: true, Size: 1 << 20, Origin: plan.OriginSandbox}
	hosts := plan.Mount{Kind: plan.KindFile, Target: "/etc/hosts", Data: "127.0.0.1 localhost\n", Origin: plan.OriginSandbox}
	bundle := plan.Mount{Kind: plan.KindFile, Target: plan.CABundlePath, Data: "ROOTS\nCA\n", Origin: plan.OriginSandbox}
	st.learn(&plan.Plan{Mounts: []plan.Mount{tmp, hosts, bundle}})
	if !slices.Equal(st.ahead.steps, []plan.Mount{tmp, hosts}) {
		t.Errorf("steps mounted ahead = %+v, want /tmp and /etc/hosts, not the trust bundle", st.ahead.steps)
	}
}
