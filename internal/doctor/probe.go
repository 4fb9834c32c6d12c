package doctor

import (
	"github.com/airlock-sandbox/airlock/internal/enforce/cgroup"
	"github.com/airlock-sandbox/airlock/internal/enforce/connbroker"
	"github.com/airlock-sandbox/airlock/internal/enforce/landlock"
	"github.com/airlock-sandbox/airlock/internal/gvisor"
)

// Probes are the host inspections Run performs. Each nil field uses the
// real probe for this host; tests set fields to describe other hosts.
type Probes struct {
	// Kernel returns the uname(2) release.
	Kernel func() (string, error)
	// Root reports whether the process is root on the host (CAP_SYS_ADMIN
	// in the initial user namespace).
	Root func() bool
	// ContainerRoot reports euid 0 without that capability (root in a
	// container).
	ContainerRoot func() bool
	// Proc mounts a fresh procfs in a new user, mount and pid namespace.
	Proc func() error
	// UserNS creates a short-lived process in the sandbox's namespaces.
	UserNS func() error
	// UnprivilegedUserNS checks that an unprivileged user may create a
	// user namespace (as root: by running unshare(1) as nobody).
	UnprivilegedUserNS func() error
	// AppArmor reads AppArmor's user namespace restriction and this
	// process's AppArmor label and, where the restriction is set, mounts
	// in a new user namespace (AppArmor.Mount).
	AppArmor func() AppArmor
	// Landlock returns the kernel's Landlock ABI.
	Landlock func() (int, error)
	// Seccomp checks seccomp filter mode and the actions the filter uses.
	Seccomp func() error
	// ConnectBroker checks the calls the landlock backend's connect
	// broker needs (connbroker.Probe).
	ConnectBroker func() error
	// Cgroup detects the cgroup layout.
	Cgroup func() (cgroup.Host, error)
	// CgroupWritable checks that a group may be created in dir.
	CgroupWritable func(dir string) error
	// Audit reads the kernel audit status.
	Audit func() Audit
	// IDMap idmaps a detached mount of a temporary directory.
	IDMap func() error
	// GVisor finds runsc and the platform it would run on.
	GVisor func() GVisor
	// MicroVM finds QEMU and a guest kernel, and runs a guest on KVM.
	MicroVM func() MicroVM
}

// Gather runs the probes and returns what they found.
func Gather(p Probes) Facts {
	p = p.withDefaults()
	var f Facts
	if k, err := p.Kernel(); err == nil {
		f.Kernel = k
	}
	f.Root = p.Root()
	f.ContainerRoot = !f.Root && p.ContainerRoot()
	f.UserNS = p.UserNS()
	if f.UserNS == nil {
		f.Proc = p.Proc()
	}
	if f.Root {
		f.UnprivilegedUserNS = p.UnprivilegedUserNS()
	} else {
		f.UnprivilegedUserNS = f.UserNS
	}
	f.AppArmor = p.AppArmor()
	f.LandlockABI, f.LandlockErr = p.Landlock()
	if f.LandlockErr != nil {
		f.LandlockABI = 0
	}
	f.Seccomp = p.Seccomp()
	f.ConnectBroker = p.ConnectBroker()
	f.Cgroup, f.CgroupErr = p.Cgroup()
	if f.CgroupErr == nil {
		f.CgroupWritable = map[string]error{}
		for _, c := range []string{cgroup.Memory, cgroup.Pids} {
			if dir, ok := f.Cgroup.Controllers[c]; ok {
				f.CgroupWritable[c] = p.CgroupWritable(f.Cgroup.Self[dir])
			}
		}
	}
	f.Audit = p.Audit()
	if f.Root {
		f.IDMap = p.IDMap()
	}
	f.GVisor = p.GVisor()
	f.MicroVM = p.MicroVM()
	return f
}

// Run probes the host (through p; the zero Probes probes this one) and
// evaluates what a default run enforces here.
func Run(p Probes) Report {
	return Evaluate(Gather(p))
}

func (p Probes) withDefaults() Probes {
	if p.Kernel == nil {
		p.Kernel = kernelRelease
	}
	if p.Root == nil {
		p.Root = isRoot
	}
	if p.ContainerRoot == nil {
		p.ContainerRoot = isContainerRoot
	}
	if p.Proc == nil {
		p.Proc = probeProc
	}
	if p.UserNS == nil {
		p.UserNS = probeUserNS
	}
	if p.UnprivilegedUserNS == nil {
		p.UnprivilegedUserNS = probeUnprivilegedUserNS
	}
	if p.AppArmor == nil {
		p.AppArmor = probeAppArmor
	}
	if p.Landlock == nil {
		p.Landlock = landlock.ABI
	}
	if p.Seccomp == nil {
		p.Seccomp = probeSeccomp
	}
	if p.ConnectBroker == nil {
		p.ConnectBroker = connbroker.Probe
	}
	if p.Cgroup == nil {
		p.Cgroup = cgroup.Detect
	}
	if p.CgroupWritable == nil {
		p.CgroupWritable = probeWritable
	}
	if p.Audit == nil {
		p.Audit = probeAudit
	}
	if p.IDMap == nil {
		p.IDMap = probeIDMap
	}
	if p.GVisor == nil {
		p.GVisor = func() GVisor {
			bin, platform, err := gvisor.Find()
			return GVisor{Bin: bin, Platform: platform, Err: err}
		}
	}
	if p.MicroVM == nil {
		p.MicroVM = probeMicroVM
	}
	return p
}
