package oci_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/airlock-sandbox/airlock/export/oci"
	"github.com/airlock-sandbox/airlock/internal/airtest"
	"github.com/airlock-sandbox/airlock/plan"
	"github.com/airlock-sandbox/airlock/policy"
)

// fakeHost is a Debian-like merged-/usr host (as in plan's tests).
type fakeHost struct{ env map[string]string }

func (fakeHost) Lstat(p string) (bool, bool, string, error) {
	links := map[string]string{"/bin": "usr/bin", "/sbin": "usr/sbin", "/lib": "usr/lib", "/lib64": "usr/lib64", "/etc/localtime": "/usr/share/zoneinfo/Etc/UTC"}
	if l, ok := links[p]; ok {
		return true, false, l, nil
	}
	switch p {
	case "/usr/lib", "/usr/lib64", "/usr/local/lib", "/usr/share", "/etc/ssl", "/etc/alternatives":
		return true, true, "", nil
	case "/etc/ld.so.cache":
		return true, false, "", nil
	}
	return false, false, "", nil
}

func (fakeHost) LookTool(name string) (string, string, error) {
	switch name {
	case "python3", "/usr/bin/python3":
		return "/usr/bin/python3", "/usr/bin/python3.11", nil
	case "sh":
		return "/usr/bin/sh", "/usr/bin/dash", nil
	}
	return "", "", errors.New("not found")
}

func (fakeHost) Loader() []string { return []string{"/lib64/ld-linux-x86-64.so.2"} }

func (h fakeHost) Env(n string) (string, bool) { v, ok := h.env[n]; return v, ok }

// fixture is the policy and plan every golden test exports.
func fixture(t *testing.T) (*policy.Policy, *plan.Plan) {
	t.Helper()
	p, err := policy.New(policy.Spec{
		FSRead: []string{"/data"}, FSWrite: []string{"/data/out"}, NetHosts: []string{"pypi.org", "*.pythonhosted.org:443"},
		AllowedTools: []string{"python3"}, Env: []string{"LANG", "MPLBACKEND=Agg"},
	})
	if err != nil {
		t.Fatal(err)
	}
	pl, err := plan.Compile(p, plan.Request{Argv: []string{"python3", "job.py"}}, fakeHost{env: map[string]string{"LANG": "C.UTF-8", "AWS_SECRET": "x"}})
	if err != nil {
		t.Fatal(err)
	}
	return p, pl
}

func export(t *testing.T) (*oci.Bundle, []byte) {
	t.Helper()
	p, pl := fixture(t)
	b, err := oci.Config(pl, p, oci.Options{BundleDir: "/var/lib/airlock/bundle", Arch: "amd64"})
	if err != nil {
		t.Fatalf("Config = %v", err)
	}
	js, err := json.MarshalIndent(b.Spec, "", "\t")
	if err != nil {
		t.Fatal(err)
	}
	return b, js
}

func TestConfigGolden(t *testing.T) {
	b, js := export(t)
	airtest.Golden(t, "config.json", js)
	var files strings.Builder
	for _, f := range b.Files {
		switch {
		case f.Link != "":
			fmt.Fprintf(&files, "%s -> %s\n", f.Path, f.Link)
		case f.Dir:
			fmt.Fprintf(&files, "%s/\n", f.Path)
		default:
			fmt.Fprintf(&files, "%s (%d bytes)\n", f.Path, len(f.Data))
		}
	}
	airtest.Golden(t, "files.txt", []byte(files.String()))
}

// decodeStrict decodes config.json as a runtime would, refusing any field
// the runtime-spec types do not know.
func decodeStrict(t *testing.T, js []byte) *specs.Spec {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	var s specs.Spec
	if err := dec.Decode(&s); err != nil {
		t.Fatalf("decode config.json strictly: %v", err)
	}
	return &s
}

func TestConfigInvariants(t *testing.T) {
	_, js := export(t)
	s := decodeStrict(t, js)
	p, _ := fixture(t)

	t.Run("process", func(t *testing.T) {
		pr := s.Process
		if pr == nil || !pr.NoNewPrivileges || pr.User.UID != 0 || pr.Terminal {
			t.Fatalf("process = %+v, want uid 0 inside, noNewPrivileges, no terminal", pr)
		}
		c := pr.Capabilities
		if c == nil {
			t.Fatal("capabilities missing: a runtime would keep its default set")
		}
		if n := len(c.Bounding) + len(c.Effective) + len(c.Inheritable) + len(c.Permitted) + len(c.Ambient); n != 0 {
			t.Errorf("capabilities = %+v, want every set empty", c)
		}
		if !strings.Contains(string(js), `"capabilities": {}`) {
			t.Error(`config.json does not spell "capabilities": {}`)
		}
		for _, e := range pr.Env {
			if strings.HasPrefix(e, "AWS_SECRET=") {
				t.Errorf("env %q was not granted", e)
			}
		}
		var types []string
		for _, r := range pr.Rlimits {
			types = append(types, r.Type)
			if want := r.Soft + map[bool]uint64{true: 1}[r.Type == "RLIMIT_CPU"]; r.Hard != want {
				t.Errorf("rlimit %s soft %d hard %d, want hard %d (SIGXCPU a second before SIGKILL)", r.Type, r.Soft, r.Hard, want)
			}
		}
		for _, want := range []string{"RLIMIT_CORE", "RLIMIT_NOFILE", "RLIMIT_FSIZE", "RLIMIT_CPU"} {
			if !slices.Contains(types, want) {
				t.Errorf("rlimits %v lack %s", types, want)
			}
		}
	})

	t.Run("identity-and-namespaces", func(t *testing.T) {
		if !s.Root.Readonly {
			t.Error("root is writable")
		}
		for _, m := range append(s.Linux.UIDMappings, s.Linux.GIDMappings...) {
			if m.HostID == 0 || m.Size != 1 || m.ContainerID != 0 {
				t.Errorf("id mapping %+v, want 0 inside to one unprivileged host id", m)
			}
		}
		var ns []string
		for _, n := range s.Linux.Namespaces {
			if n.Path != "" {
				t.Errorf("namespace %s joins %s, want a new one", n.Type, n.Path)
			}
			ns = append(ns, string(n.Type))
		}
		slices.Sort(ns)
		if want := []string{"cgroup", "ipc", "mount", "network", "pid", "user", "uts"}; !slices.Equal(ns, want) {
			t.Errorf("namespaces %v, want %v", ns, want)
		}
	})

	t.Run("mounts", func(t *testing.T) {
		byDst := map[string]specs.Mount{}
		for _, m := range s.Mounts {
			byDst[m.Destination] = m
			if strings.HasPrefix(m.Source, "/root") || strings.HasPrefix(m.Source, "/home") || m.Source == "/usr/bin" || m.Source == "/var" {
				t.Errorf("mount %+v exposes a host path the base never contains", m)
			}
			if m.Type == "bind" {
				if !slices.Contains(m.Options, "nosuid") {
					t.Errorf("bind %s options %v, want nosuid", m.Destination, m.Options)
				}
				// A recursive bind of a folder makes every mount below it
				// nosuid and, when the bind is, read-only.
				if slices.Contains(m.Options, "rbind") && slices.Contains(m.Options, "rnoexec") &&
					(!slices.Contains(m.Options, "rnosuid") || slices.Contains(m.Options, "ro") != slices.Contains(m.Options, "rro")) {
					t.Errorf("rbind %s options %v, want its flags recursive too", m.Destination, m.Options)
				}
				rw := slices.Contains(m.Options, "rw")
				if rw == slices.Contains(m.Options, "ro") {
					t.Errorf("bind %s options %v, want exactly one of ro, rw", m.Destination, m.Options)
				}
				if rw && !p.CanWrite(m.Destination) && !strings.HasPrefix(m.Destination, "/dev/") {
					t.Errorf("bind %s is writable without an fs_write grant", m.Destination)
				}
				if rw && !slices.Contains(m.Options, "noexec") {
					t.Errorf("writable bind %s is executable", m.Destination)
				}
			}
		}
		for dst, want := range map[string]string{"/data": "ro", "/data/out": "rw", "/tmp": "size=67108864", "/etc/passwd": "ro", "/dev/null": "rw", "/usr/bin/python3": "ro"} {
			if m, ok := byDst[dst]; !ok || !slices.Contains(m.Options, want) {
				t.Errorf("mount %s = %+v, want option %s", dst, m, want)
			}
		}
		for _, dst := range []string{"/proc", "/dev"} {
			if _, ok := byDst[dst]; !ok {
				t.Errorf("no mount at %s", dst)
			}
		}
		if m := byDst["/usr/bin/python3"]; slices.Contains(m.Options, "noexec") {
			t.Errorf("the command is mounted noexec: %v", m.Options)
		}
	})

	t.Run("resources", func(t *testing.T) {
		r := s.Linux.Resources
		lim := p.Budget()
		if r == nil || r.Memory == nil || *r.Memory.Limit != lim.Memory || *r.Memory.Swap != lim.Memory {
			t.Fatalf("memory = %+v, want limit = swap = %d", r.Memory, lim.Memory)
		}
		if r.Pids == nil || *r.Pids.Limit != lim.Pids {
			t.Errorf("pids = %+v, want %d", r.Pids, lim.Pids)
		}
		for _, p := range []string{"/proc/kcore", "/proc/kallsyms", "/proc/kmsg", "/proc/asound", "/proc/sysrq-trigger"} {
			if !slices.Contains(s.Linux.MaskedPaths, p) {
				t.Errorf("masked %v lacks %s", s.Linux.MaskedPaths, p)
			}
		}
		if !slices.Contains(s.Linux.ReadonlyPaths, "/proc/sys") {
			t.Errorf("readonly %v lacks /proc/sys", s.Linux.ReadonlyPaths)
		}
	})

	t.Run("seccomp", func(t *testing.T) {
		sc := s.Linux.Seccomp
		if sc == nil || sc.DefaultAction != specs.ActErrno || sc.DefaultErrnoRet == nil || *sc.DefaultErrnoRet != 1 {
			t.Fatalf("seccomp default = %+v, want SCMP_ACT_ERRNO with EPERM", sc)
		}
		if !slices.Equal(sc.Architectures, []specs.Arch{specs.ArchX86_64}) {
			t.Errorf("architectures %v, want only the native one", sc.Architectures)
		}
		for _, e := range sc.Syscalls {
			if e.Action != specs.ActAllow {
				continue
			}
			for _, n := range e.Names {
				switch n {
				case "unshare", "setns", "mount", "ptrace", "io_uring_setup", "bpf", "keyctl", "memfd_create", "execveat", "userfaultfd", "perf_event_open", "clone3":
					t.Errorf("seccomp allows %s", n)
				}
			}
			seen := map[uint]bool{}
			for _, a := range e.Args {
				if seen[a.Index] {
					t.Errorf("entry %v has two conditions on argument %d: runc would OR them", e.Names, a.Index)
				}
				seen[a.Index] = true
			}
		}
	})
}

func TestConfigRefusals(t *testing.T) {
	p, pl := fixture(t)
	tests := []struct {
		name   string
		mutate func(*plan.Plan)
		opts   oci.Options
	}{
		{"unknown-rlimit", func(pl *plan.Plan) { pl.Rlimits = append(pl.Rlimits, plan.Rlimit{Resource: "rtprio"}) }, oci.Options{}},
		{"unknown-mount-kind", func(pl *plan.Plan) { pl.Mounts = append(pl.Mounts, plan.Mount{Kind: "devicemapper", Target: "/x"}) }, oci.Options{}},
		{"unknown-arch", func(*plan.Plan) {}, oci.Options{Arch: "riscv64"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cp := *pl
			cp.Rlimits = slices.Clone(pl.Rlimits)
			cp.Mounts = slices.Clone(pl.Mounts)
			tt.mutate(&cp)
			if b, err := oci.Config(&cp, p, tt.opts); err == nil {
				t.Fatalf("Config = %+v, want an error", b.Spec)
			}
		})
	}
}
