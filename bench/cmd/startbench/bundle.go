package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/airlock-sandbox/airlock/plan"
)

// bundleCache makes one OCI bundle per command line. All bundles share one
// read-only root directory that holds only mount points and symlinks.
type bundleCache struct {
	work    string
	rootfs  string
	seccomp bool // include the seccomp section; false after runc refused it

	mu      sync.Mutex
	bundles map[string]string // guarded by mu: argv joined by NUL → bundle dir
}

func newBundleCache(work string) (*bundleCache, error) {
	bc := &bundleCache{work: work, rootfs: filepath.Join(work, "oci-rootfs"), seccomp: true, bundles: map[string]string{}}
	if err := writeEtc(work); err != nil {
		return nil, err
	}
	for _, d := range []string{"proc", "dev", "tmp", "usr/bin", "usr/sbin", "etc"} {
		if err := os.MkdirAll(filepath.Join(bc.rootfs, d), 0o755); err != nil {
			return nil, err
		}
	}
	links := map[string]string{"bin": "usr/bin", "sbin": "usr/sbin", "lib": "usr/lib", "lib64": "usr/lib64",
		"etc/localtime": "/usr/share/zoneinfo/Etc/UTC"}
	for name, target := range links {
		os.Remove(filepath.Join(bc.rootfs, name))
		if err := os.Symlink(target, filepath.Join(bc.rootfs, name)); err != nil {
			return nil, err
		}
	}
	for _, p := range systemBase {
		if err := bc.mountpoint(p, p); err != nil {
			return nil, err
		}
	}
	for name := range synthesized {
		if err := bc.mountpoint(filepath.Join(work, "etc", name), "/etc/"+name); err != nil {
			return nil, err
		}
	}
	return bc, nil
}

// mountpoint creates dst inside the root as a directory or an empty file,
// like src.
func (bc *bundleCache) mountpoint(src, dst string) error {
	fi, err := os.Stat(src)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return err
	}
	p := filepath.Join(bc.rootfs, dst)
	if fi.IsDir() {
		return os.MkdirAll(p, 0o755)
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	return f.Close()
}

func (bc *bundleCache) get(argv []string) (string, error) {
	key := strings.Join(argv, "\x00")
	bc.mu.Lock()
	defer bc.mu.Unlock()
	if dir, ok := bc.bundles[key]; ok {
		return dir, nil
	}
	visible, real, err := binPaths(argv[0])
	if err != nil {
		return "", err
	}
	if err := bc.mountpoint(real, visible); err != nil {
		return "", err
	}
	dir := filepath.Join(bc.work, "oci-bundles", fmt.Sprintf("b%d", len(bc.bundles)))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	cfg := bc.config(append([]string{visible}, argv[1:]...), real, visible)
	data, err := json.MarshalIndent(cfg, "", " ")
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), data, 0o644); err != nil {
		return "", err
	}
	bc.bundles[key] = dir
	return dir, nil
}

type obj = map[string]any

func (bc *bundleCache) config(args []string, real, visible string) obj {
	roBind := func(src, dst string) obj {
		return obj{"destination": dst, "type": "bind", "source": src,
			"options": []string{"rbind", "ro", "nosuid", "nodev"}}
	}
	mounts := []obj{
		{"destination": "/proc", "type": "proc", "source": "proc"},
		{"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
		{"destination": "/tmp", "type": "tmpfs", "source": "tmpfs", "options": []string{"nosuid", "nodev", "noexec", "mode=1777", "size=67108864"}},
	}
	for _, p := range systemBase {
		if exists(p) {
			mounts = append(mounts, roBind(p, p))
		}
	}
	for name := range synthesized {
		mounts = append(mounts, roBind(filepath.Join(bc.work, "etc", name), "/etc/"+name))
	}
	mounts = append(mounts, roBind(real, visible))
	linux := obj{
		"namespaces": []obj{{"type": "user"}, {"type": "pid"}, {"type": "network"}, {"type": "ipc"},
			{"type": "uts"}, {"type": "mount"}, {"type": "cgroup"}},
		"uidMappings": []obj{{"containerID": 0, "hostID": 100000, "size": 65536}},
		"gidMappings": []obj{{"containerID": 0, "hostID": 100000, "size": 65536}},
		"resources":   obj{"pids": obj{"limit": 64}, "memory": obj{"limit": 512 << 20}},
		"maskedPaths": []string{"/proc/kcore", "/proc/keys", "/proc/timer_list", "/proc/sched_debug"},
		"readonlyPaths": []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys",
			"/proc/sysrq-trigger"},
	}
	if bc.seccomp {
		linux["seccomp"] = ociSeccomp()
	}
	return obj{
		"ociVersion": "1.0.2-dev",
		"process": obj{
			"terminal": false, "user": obj{"uid": 0, "gid": 0}, "args": args,
			"env": []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/tmp", "LANG=C.UTF-8", "TMPDIR=/tmp"},
			"cwd": "/tmp", "capabilities": obj{"bounding": []string{}, "effective": []string{},
				"permitted": []string{}, "inheritable": []string{}, "ambient": []string{}},
			"rlimits":         []obj{{"type": "RLIMIT_NOFILE", "hard": 1024, "soft": 1024}},
			"noNewPrivileges": true,
		},
		"root":     obj{"path": bc.rootfs, "readonly": true},
		"hostname": "sandbox",
		"mounts":   mounts,
		"linux":    linux,
	}
}

// ociSeccomp turns airlock's plan.DefaultSeccomp into an OCI seccomp
// section. OCI has no rule order, so the ioctl deny rules (TIOCSTI,
// TIOCLINUX) are dropped and ioctl is allowed outright; everything else
// maps one to one (conditions become SCMP_CMP_MASKED_EQ).
func ociSeccomp() obj {
	var rules []obj
	for _, sc := range plan.DefaultSeccomp().Syscalls {
		for _, r := range sc.Rules {
			rule := obj{"names": []string{sc.Name}}
			switch {
			case r.Action == plan.ActAllow:
				rule["action"] = "SCMP_ACT_ALLOW"
			case r.Action == plan.ActENOSYS:
				rule["action"], rule["errnoRet"] = "SCMP_ACT_ERRNO", 38
			default:
				continue // EPERM is the default action
			}
			var args []obj
			for _, c := range r.Conds {
				args = append(args, obj{"index": c.Arg, "value": c.Mask, "valueTwo": c.Value, "op": "SCMP_CMP_MASKED_EQ"})
			}
			if args != nil {
				rule["args"] = args
			}
			rules = append(rules, rule)
		}
	}
	return obj{"defaultAction": "SCMP_ACT_ERRNO", "defaultErrnoRet": 1,
		"architectures": []string{"SCMP_ARCH_X86_64"}, "syscalls": rules}
}
