package nsinit

import (
	"errors"
	"fmt"
	"reflect"
	"runtime"
	"slices"
	"sort"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/export/oci"
	"github.com/airlock-sandbox/airlock/internal/enforce/mount"
	"github.com/airlock-sandbox/airlock/internal/enforce/namespace"
	"github.com/airlock-sandbox/airlock/plan"
	"github.com/airlock-sandbox/airlock/policy"
)

// The parity test: the OCI bundle made from a plan and what this init
// applies for the same plan agree, fact by fact. Both read the plan, so a
// fact that one backend derives on its own (a namespace, a masked path, a
// mount flag, a limit) shows up here as a row that differs.

// parityHost is a merged-/usr host with a folder and a file granted to
// read, a folder and a file granted to write, a git repository (whose
// hooks are protected) and a secret (fs_deny) inside the grants.
type parityHost struct{}

func (parityHost) Lstat(p string) (bool, bool, string, error) {
	switch p {
	case "/bin", "/lib", "/lib64", "/sbin":
		return true, false, "usr" + p, nil
	case "/usr/lib", "/usr/lib64", "/usr/local/lib", "/etc/ssl", "/data", "/work", "/work/.git", "/work/.git/hooks":
		return true, true, "", nil
	case "/etc/ld.so.cache", "/data/notes.txt", "/work/todo.txt", "/data/secret.key":
		return true, false, "", nil
	}
	return false, false, "", nil
}

func (parityHost) LookTool(name string) (string, string, error) {
	switch name {
	case "python3":
		return "/usr/bin/python3", "/usr/bin/python3.11", nil
	case "sh":
		return "/usr/bin/sh", "/usr/bin/dash", nil
	}
	return "", "", errors.New("not found")
}

func (parityHost) Loader() []string          { return []string{"/lib64/ld-linux-x86-64.so.2"} }
func (parityHost) Env(string) (string, bool) { return "", false }

func parityPlan(t *testing.T) (*policy.Policy, *plan.Plan) {
	t.Helper()
	p, err := policy.New(policy.Spec{
		FSRead: []string{"/data", "/data/notes.txt"}, FSWrite: []string{"/work", "/work/todo.txt"},
		FSDeny: []string{"/data/secret.key"}, NetHosts: []string{"pypi.org"}, AllowedTools: []string{"python3"},
	})
	if err != nil {
		t.Fatal(err)
	}
	pl, err := plan.Compile(p, plan.Request{Argv: []string{"sh", "-c", "true"}, CommandIsGranted: true}, parityHost{})
	if err != nil {
		t.Fatal(err)
	}
	// An OCI runtime has no connect broker: the bundle is the plan
	// without transparent egress, as the OCI backend and export run it.
	plan.WithoutTransparentEgress(pl)
	kinds := map[plan.Kind]bool{}
	for _, m := range pl.Mounts {
		kinds[m.Kind] = true
	}
	for _, k := range []plan.Kind{plan.KindBind, plan.KindOverlay, plan.KindStagedFile, plan.KindReadonly, plan.KindHide, plan.KindTmpfs, plan.KindProc} {
		if !kinds[k] {
			t.Fatalf("the parity plan has no %s step: the comparison would not cover it", k)
		}
	}
	return p, pl
}

// flags are the mount attributes either side gives one step.
type flags struct{ RO, NoSuid, NoDev, NoExec, Recursive bool }

func (f flags) String() string {
	return fmt.Sprintf("%+v", struct{ RO, NoSuid, NoDev, NoExec, Recursive bool }(f))
}

// initFlags is what this init's mount code sets for m, from the functions
// it calls (mount.CloneAttr for clones, mount.MountFlags for the rest).
// It reports false for a step that is not a mount of its own here.
func initFlags(t *testing.T, m plan.Mount) (flags, bool) {
	t.Helper()
	switch m.Kind {
	case plan.KindBind:
		attr, err := mount.CloneAttr(m)
		if err != nil {
			t.Fatalf("CloneAttr(%s): %v", m.Target, err)
		}
		return flags{attr&unix.MOUNT_ATTR_RDONLY != 0, attr&unix.MOUNT_ATTR_NOSUID != 0, attr&unix.MOUNT_ATTR_NODEV != 0,
			attr&unix.MOUNT_ATTR_NOEXEC != 0, m.Recursive}, true
	case plan.KindOverlay, plan.KindStagedFile, plan.KindReadonly:
		ms := mount.MountFlags(m)
		if m.Kind == plan.KindReadonly {
			ms |= unix.MS_RDONLY // PlaceNarrowing
		}
		// An overlay shows no mounts of its lower layer; a staged file's
		// copy and a narrowing are bound without their submounts.
		return flags{ms&unix.MS_RDONLY != 0, ms&unix.MS_NOSUID != 0, ms&unix.MS_NODEV != 0, ms&unix.MS_NOEXEC != 0,
			m.Recursive && m.Kind == plan.KindReadonly}, true
	}
	return flags{}, false
}

// ociFlags reads the same attributes from a runtime-spec mount. A recursive
// bind of a folder must carry each flag recursively too (rro, rnosuid,
// ...), or runc leaves the mounts below with their host flags.
func ociFlags(m specs.Mount, file bool) (flags, []string) {
	has := func(o string) bool { return slices.Contains(m.Options, o) }
	var bad []string
	f := flags{RO: has("ro"), NoSuid: has("nosuid"), NoDev: has("nodev"), NoExec: has("noexec"), Recursive: has("rbind")}
	if m.Type == "overlay" {
		f.Recursive = false
	}
	if f.Recursive && !file {
		for _, x := range []struct {
			on  bool
			rec string
		}{{f.RO, "rro"}, {f.NoSuid, "rnosuid"}, {f.NoDev, "rnodev"}, {f.NoExec, "rnoexec"}} {
			if x.on != has(x.rec) {
				bad = append(bad, fmt.Sprintf("mount %s options %v: %s must go with the flag it makes recursive", m.Destination, m.Options, x.rec))
			}
		}
	}
	return f, bad
}

// ociCloneFlags maps OCI namespace types back to clone flags.
func ociCloneFlags(t *testing.T, ns []specs.LinuxNamespace) uintptr {
	t.Helper()
	bits := map[specs.LinuxNamespaceType]uintptr{
		specs.UserNamespace: unix.CLONE_NEWUSER, specs.MountNamespace: unix.CLONE_NEWNS, specs.PIDNamespace: unix.CLONE_NEWPID,
		specs.NetworkNamespace: unix.CLONE_NEWNET, specs.IPCNamespace: unix.CLONE_NEWIPC, specs.UTSNamespace: unix.CLONE_NEWUTS,
		specs.CgroupNamespace: unix.CLONE_NEWCGROUP,
	}
	var f uintptr
	for _, n := range ns {
		if n.Path != "" {
			t.Errorf("namespace %s joins %s: the init always gets new ones", n.Type, n.Path)
		}
		b, ok := bits[n.Type]
		if !ok {
			t.Errorf("namespace %s has no clone flag", n.Type)
		}
		f |= b
	}
	return f
}

// initRlimits is what applyRlimits asks setrlimit for, by OCI name.
func initRlimits(t *testing.T, rs []plan.Rlimit) map[string][2]uint64 {
	t.Helper()
	names := map[int]string{unix.RLIMIT_CORE: "RLIMIT_CORE", unix.RLIMIT_NOFILE: "RLIMIT_NOFILE", unix.RLIMIT_FSIZE: "RLIMIT_FSIZE",
		unix.RLIMIT_CPU: "RLIMIT_CPU", unix.RLIMIT_NPROC: "RLIMIT_NPROC", unix.RLIMIT_AS: "RLIMIT_AS"}
	out := map[string][2]uint64{}
	for _, r := range rs {
		res, lim, err := rlimit(r)
		if err != nil {
			t.Fatal(err)
		}
		out[names[res]] = [2]uint64{lim.Cur, lim.Max}
	}
	return out
}

// syscallNames lists the syscalls that have rules of their own.
func syscallNames(s plan.Seccomp) []string {
	var out []string
	for _, sc := range s.Syscalls {
		out = append(out, sc.Name)
	}
	sort.Strings(out)
	return out
}

func ociSyscallNames(sc *specs.LinuxSeccomp) []string {
	seen := map[string]bool{}
	for _, e := range sc.Syscalls {
		for _, n := range e.Names {
			seen[n] = true
		}
	}
	out := make([]string, 0, len(seen))
	for n := range seen {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// actionOf names an OCI action as the plan does.
func actionOf(a specs.LinuxSeccompAction, errno *uint) plan.Action {
	switch {
	case a == specs.ActAllow:
		return plan.ActAllow
	case a == specs.ActKillProcess:
		return plan.ActKillProcess
	case a == specs.ActErrno && errno == nil:
		return plan.ActEPERM
	case a == specs.ActErrno:
		var act plan.Action
		if err := act.UnmarshalText([]byte(fmt.Sprintf("errno(%d)", *errno))); err == nil {
			return act
		}
	}
	return 0
}

// ociDecides answers one syscall as libseccomp does with an OCI section:
// a matching entry, else the default.
func ociDecides(sc *specs.LinuxSeccomp, name string, args [6]uint64) plan.Action {
	for _, e := range sc.Syscalls {
		if !slices.Contains(e.Names, name) {
			continue
		}
		ok := true
		for _, c := range e.Args {
			switch c.Op {
			case specs.OpEqualTo:
				ok = ok && args[c.Index] == c.Value
			case specs.OpMaskedEqual:
				ok = ok && args[c.Index]&c.Value == c.ValueTwo
			default:
				ok = false
			}
		}
		if ok {
			return actionOf(e.Action, e.ErrnoRet)
		}
	}
	return actionOf(sc.DefaultAction, sc.DefaultErrnoRet)
}

// planDecides is the profile's first-match meaning, which Build compiles
// (the seccomp package checks its programs against the same model).
func planDecides(s plan.Seccomp, name string, args [6]uint64) plan.Action {
	for _, sc := range s.Syscalls {
		if sc.Name != name {
			continue
		}
	rules:
		for _, r := range sc.Rules {
			for _, c := range r.Conds {
				if !c.Holds(args) {
					continue rules
				}
			}
			return r.Action
		}
	}
	return s.Default
}

func TestOCIParity(t *testing.T) {
	p, pl := parityPlan(t)
	for _, stageDir := range []string{"", "/var/lib/airlock/stage"} {
		t.Run(map[string]string{"": "runtime-alone", "/var/lib/airlock/stage": "supervised"}[stageDir], func(t *testing.T) {
			b, err := oci.Config(pl, p, oci.Options{BundleDir: "/b", Arch: runtime.GOARCH, StageDir: stageDir})
			if err != nil {
				t.Fatal(err)
			}
			s := b.Spec
			cloneFlags, err := namespace.CloneFlags(pl.Namespaces)
			if err != nil {
				t.Fatal(err)
			}
			caps := s.Process.Capabilities
			res := s.Linux.Resources
			idm := pl.IDMap
			rows := []struct {
				name           string
				initSide, spec any
			}{
				{"namespaces", cloneFlags, ociCloneFlags(t, s.Linux.Namespaces)},
				{"uid-map", []specs.LinuxIDMapping{{ContainerID: 0, HostID: oci.DefaultHostID, Size: idm.Size}}, s.Linux.UIDMappings},
				{"gid-map", []specs.LinuxIDMapping{{ContainerID: 0, HostID: oci.DefaultHostID, Size: idm.Size}}, s.Linux.GIDMappings},
				{"default-host-id-in-root-range", true, oci.DefaultHostID >= idm.RootFirst && oci.DefaultHostID < idm.RootFirst+idm.RootCount},
				{"masked-paths", pl.MaskedPaths, s.Linux.MaskedPaths},
				// The runtime makes /dev as a tmpfs of its own, which the export
				// makes read-only; the init's /dev is a folder of its read-only root.
				{"readonly-paths", append(slices.Clone(pl.ReadonlyPaths), "/dev"), s.Linux.ReadonlyPaths},
				{"capabilities-kept", len(pl.Capabilities), len(caps.Bounding) + len(caps.Effective) + len(caps.Inheritable) + len(caps.Permitted) + len(caps.Ambient)},
				{"no-new-privileges", pl.NoNewPrivileges, s.Process.NoNewPrivileges},
				{"rlimits", initRlimits(t, pl.Rlimits), func() map[string][2]uint64 {
					m := map[string][2]uint64{}
					for _, r := range s.Process.Rlimits {
						m[r.Type] = [2]uint64{r.Soft, r.Hard}
					}
					return m
				}()},
				{"seccomp-default", pl.Seccomp.Default, actionOf(s.Linux.Seccomp.DefaultAction, s.Linux.Seccomp.DefaultErrnoRet)},
				{"seccomp-syscalls-with-rules", syscallNames(pl.Seccomp), ociSyscallNames(s.Linux.Seccomp)},
				{"cgroup-memory", pl.Limits.Memory, *res.Memory.Limit},
				{"cgroup-memory-no-swap", pl.Limits.Memory, *res.Memory.Swap},
				{"cgroup-pids", pl.Limits.Pids, *res.Pids.Limit},
				{"hostname", pl.Hostname, s.Hostname},
				{"argv", pl.Argv, s.Process.Args},
				{"env", pl.Env, s.Process.Env},
				{"cwd", pl.Cwd, s.Process.Cwd},
			}
			for _, r := range rows {
				t.Run(r.name, func(t *testing.T) {
					if !reflect.DeepEqual(r.initSide, r.spec) {
						t.Errorf("init applies %v, the OCI spec says %v", r.initSide, r.spec)
					}
				})
			}
			t.Run("seccomp-decisions", func(t *testing.T) {
				args := [][6]uint64{{}, {1, 1}, {2, 1, 6}, {10, 2, 17}, {2, 3, 1}, {16, 3}, {0, 0x5412}, {0, 0x541c}, {0, 0x5401},
					{0x10000000 | 17}, {17}, {0x3d0f00}, {0x8}, {0x40000}, {0xffffffff}, {^uint64(0), ^uint64(0), ^uint64(0)}}
				names := syscallNames(pl.Seccomp)
				for _, g := range pl.Seccomp.Refused {
					names = append(names, g.Names...)
				}
				for _, name := range names {
					for _, a := range args {
						if got, want := ociDecides(s.Linux.Seccomp, name, a), planDecides(pl.Seccomp, name, a); got != want {
							t.Errorf("%s%#x: the OCI section answers %v, the plan's profile %v", name, a, got, want)
						}
					}
				}
			})
			t.Run("mounts", func(t *testing.T) {
				byDst := map[string]specs.Mount{}
				for _, m := range s.Mounts {
					byDst[m.Destination] = m
				}
				checked := 0
				for _, m := range pl.Mounts {
					want, ok := initFlags(t, m)
					if !ok {
						continue
					}
					om, ok := byDst[m.Target]
					if !ok {
						t.Errorf("%s %s: no OCI mount", m.Kind, m.Target)
						continue
					}
					if stageDir == "" && (m.Kind == plan.KindOverlay || m.Kind == plan.KindStagedFile) {
						// Without a supervisor the grant is the host folder
						// itself, read-write: a bind with the plan's flags.
						f := m.Flags()
						want = flags{f.ReadOnly, f.NoSuid, f.NoDev, f.NoExec, f.Recursive}
					}
					got, bad := ociFlags(om, m.File)
					for _, msg := range bad {
						t.Error(msg)
					}
					if m.File {
						got.Recursive, want.Recursive = false, false // nothing can be mounted below a file
					}
					checked++
					if got != want {
						t.Errorf("%s %s: init %v, OCI %v (options %v)", m.Kind, m.Target, want, got, om.Options)
					}
				}
				if checked < 12 {
					t.Errorf("compared %d mounts; the plan should give more", checked)
				}
				// The steps the init mounts with fixed flags: the size of
				// /tmp comes from the plan, and a hidden path is empty and
				// read-only either way. Synthesized files are binds in a
				// bundle but files in the init's read-only root tmpfs.
				for _, m := range pl.Mounts {
					om := byDst[m.Target]
					switch m.Kind {
					case plan.KindTmpfs:
						if want := fmt.Sprintf("size=%d", m.Size); !slices.Contains(om.Options, want) {
							t.Errorf("tmpfs %s: OCI options %v lack %s", m.Target, om.Options, want)
						}
					case plan.KindHide:
						if got, _ := ociFlags(om, !m.Dir); got != (flags{RO: true, NoSuid: true, NoDev: true, NoExec: true}) {
							t.Errorf("hidden %s: OCI %v (options %v), want empty and read-only", m.Target, got, om.Options)
						}
					}
				}
			})
		})
	}
}

// TestOCIParityCatchesDrift feeds the comparison a spec with one fact
// changed at a time, so that a check that can no longer fail is noticed.
func TestOCIParityCatchesDrift(t *testing.T) {
	p, pl := parityPlan(t)
	b, err := oci.Config(pl, p, oci.Options{Arch: runtime.GOARCH})
	if err != nil {
		t.Fatal(err)
	}
	s := b.Spec
	if f := ociCloneFlags(t, s.Linux.Namespaces[1:]); f == unix.CLONE_NEWUSER|unix.CLONE_NEWNS|unix.CLONE_NEWPID|unix.CLONE_NEWNET|unix.CLONE_NEWIPC|unix.CLONE_NEWUTS|unix.CLONE_NEWCGROUP {
		t.Error("a missing namespace went unnoticed")
	}
	for _, m := range s.Mounts {
		if m.Destination != "/data" {
			continue
		}
		m.Options = slices.DeleteFunc(slices.Clone(m.Options), func(o string) bool { return o == "rro" })
		if _, bad := ociFlags(m, false); len(bad) == 0 {
			t.Error("an rbind without rro went unnoticed: a mount below the grant would stay writable")
		}
		m.Options = slices.DeleteFunc(slices.Clone(m.Options), func(o string) bool { return strings.HasPrefix(o, "r") })
		if got, _ := ociFlags(m, false); got != (flags{NoSuid: true, NoDev: true, NoExec: true}) {
			t.Errorf("ociFlags without ro and rbind = %v, want only nosuid, nodev, noexec", got)
		}
	}
	sc := *s.Linux.Seccomp
	sc.Syscalls = slices.DeleteFunc(slices.Clone(sc.Syscalls), func(e specs.LinuxSyscall) bool { return slices.Contains(e.Names, "ioctl") })
	if ociDecides(&sc, "ioctl", [6]uint64{0, 0x5401}) == planDecides(pl.Seccomp, "ioctl", [6]uint64{0, 0x5401}) {
		t.Error("a dropped ioctl rule went unnoticed")
	}
}
