package doctor

import (
	"fmt"
	"strings"

	"github.com/airlock-sandbox/airlock/internal/enforce/cgroup"
	"github.com/airlock-sandbox/airlock/plan"
)

// Facts are the raw results of probing one host. Evaluate turns them into
// a Report; tests build Facts by hand to describe hosts they do not have.
// The zero Facts describes a host with nothing: every layer is refused.
type Facts struct {
	// Kernel is the uname(2) release, e.g. "6.18.4"; "" when unknown.
	Kernel string

	// Root reports whether airlock runs as root on the host (CAP_SYS_ADMIN
	// in the initial user namespace): the privileged path.
	Root bool
	// ContainerRoot reports euid 0 without that capability: root in a
	// container, which takes the unprivileged path.
	ContainerRoot bool

	// Proc is nil when a fresh procfs could be mounted in a new user,
	// mount and pid namespace (the sandbox's own /proc); else why not.
	// Probed only when UserNS is nil.
	Proc error

	// UserNS is the outcome of creating a process in the namespaces every
	// sandbox gets (user, mount, pid, net, ipc, uts, cgroup) as this user.
	// Nil means it worked.
	UserNS error

	// UnprivilegedUserNS is the outcome of an unprivileged user creating a
	// user namespace. Nil means it worked. For a non-root caller it is the
	// same as UserNS.
	UnprivilegedUserNS error

	// AppArmor is AppArmor's restriction on unprivileged user namespaces
	// (Ubuntu 23.10 and later) and the profile this process runs under.
	// The zero AppArmor is a host without the restriction.
	AppArmor AppArmor

	// LandlockABI is the kernel's Landlock ABI version; 0 when Landlock is
	// absent, with the reason in LandlockErr.
	LandlockABI int
	LandlockErr error

	// Seccomp is nil when seccomp filter mode offers every action the
	// airlock filter returns.
	Seccomp error

	// ConnectBroker is nil when this process may read another's connect
	// the way the landlock backend's connect broker does (pidfd_getfd,
	// process_vm_readv); a container runtime's default seccomp profile
	// refuses pidfd_getfd.
	ConnectBroker error

	// Cgroup is the layout cgroup.Detect found; CgroupErr is its error.
	Cgroup    cgroup.Host
	CgroupErr error

	// CgroupWritable maps memory and pids to nil when the supervisor may
	// create a group in that controller's hierarchy, or to the reason it
	// may not. A controller absent from the map was not checked: it is
	// treated as unusable.
	CgroupWritable map[string]error

	// Audit says whether the kernel audit log can be read.
	Audit Audit

	// IDMap is nil when a detached mount of a temporary directory could be
	// idmapped through a fresh user namespace. Only a root supervisor
	// idmaps grants; for others it is not probed.
	IDMap error

	// GVisor is where runsc is and the platform isolation gvisor runs it
	// on, or why it is unavailable.
	GVisor GVisor

	// MicroVM is what --isolation microvm would boot, and whether KVM
	// runs a guest here. The zero value: not probed.
	MicroVM MicroVM
}

// MicroVM is what doctor found for the microVM backend.
type MicroVM struct {
	// QEMU and Kernel are the VMM and the guest kernel's release; Err is
	// why the backend is unavailable (nil when both are there).
	QEMU, Kernel string
	Err          error
	// KVM is nil when a one-instruction guest ran on /dev/kvm, else why
	// not. The backend runs under software emulation (TCG) either way.
	KVM error
}

// GVisor is what doctor found of gVisor's runsc.
type GVisor struct {
	Bin, Platform string
	Err           error // nil when runsc is installed
}

// Audit is the state of the kernel audit subsystem as airlock sees it.
type Audit struct {
	// Err is the error from opening a NETLINK_AUDIT socket or asking
	// AUDIT_GET; nil means the status fields are valid.
	Err error
	// Enabled is the kernel's audit_enabled: 0 off, 1 on, 2 on and locked.
	Enabled uint32
	// DaemonPID is the pid of the registered audit daemon, 0 for none.
	DaemonPID uint32
	// Collector is fsaudit.Available: nil when a run can read Landlock
	// denial records here (Landlock ABI 7, audit, root on the host), else
	// why not. It is the authority on whether filesystem denials reach
	// the report.
	Collector error
}

// Check is the result of one probe.
type Check struct {
	// Name is the probe: kernel, root, userns, proc, apparmor, landlock,
	// seccomp, cgroup, audit or idmap.
	Name string `json:"name"`
	// OK reports whether the host offers what airlock wants from this probe.
	OK bool `json:"ok"`
	// Detail is what the probe found.
	Detail string `json:"detail"`
	// Consequence is what it means for a run; "" when nothing follows.
	Consequence string `json:"consequence,omitempty"`
}

// Verdict is what a run with the default policy does about one layer.
type Verdict string

// Verdicts.
const (
	// Enforced: the layer holds.
	Enforced Verdict = "enforced"
	// Refused: airlock refuses to start (exit 125) unless the policy lists
	// the layer's Downgrade under allow_downgrade.
	Refused Verdict = "refused"
	// Unavailable: the run goes ahead without it and the report says so.
	// Only observation (filesystem denial reporting) can be unavailable.
	Unavailable Verdict = "unavailable"
)

// Layer is the verdict for one enforcement layer of a default run.
type Layer struct {
	Name    string  `json:"name"`
	Verdict Verdict `json:"verdict"`
	Detail  string  `json:"detail"`
	// Downgrade is the allow_downgrade value that lets a run go ahead
	// without the layer; "" when nothing can.
	Downgrade string `json:"downgrade,omitempty"`
}

// Report is the doctor's answer for one host.
type Report struct {
	Checks []Check `json:"checks"`
	Layers []Layer `json:"layers"`
	// Refuses lists the runs airlock would refuse here (exit 125), each
	// with the reason; empty when it refuses nothing a policy may ask for.
	Refuses []string `json:"refuses"`
	// Enforceable reports whether a run with the default policy is fully
	// enforced here: no layer is Refused.
	Enforceable bool `json:"enforceable"`
}

// ExitCode is the status of `airlock doctor`: 0 when a default run is
// fully enforced, 1 when it is not.
func (r *Report) ExitCode() int {
	if r.Enforceable {
		return 0
	}
	return 1
}

// Evaluate turns probe results into checks and per-layer verdicts for a
// run with the default policy (no allow_downgrade).
func Evaluate(f Facts) Report {
	r := Report{Refuses: []string{}}
	check := func(name string, ok bool, detail, consequence string) {
		r.Checks = append(r.Checks, Check{Name: name, OK: ok, Detail: detail, Consequence: consequence})
	}
	layer := func(name string, v Verdict, detail, downgrade string) {
		r.Layers = append(r.Layers, Layer{Name: name, Verdict: v, Detail: detail, Downgrade: downgrade})
		if v == Refused {
			why := name + ": " + detail
			if downgrade != "" {
				why += fmt.Sprintf(" (unless allow_downgrade lists %s)", downgrade)
			}
			r.Refuses = append(r.Refuses, "every run: "+why)
		}
	}

	kernel := f.Kernel
	if kernel == "" {
		kernel = "unknown"
	}
	check("kernel", f.Kernel != "", "Linux "+kernel, "")
	switch {
	case f.Root:
		check("root", true, "running as root on the host (CAP_SYS_ADMIN in the initial user namespace)", "the sandbox runs as a random unprivileged uid; grants are idmapped so files keep your ownership")
	case f.ContainerRoot:
		check("root", true, "running as uid 0 without CAP_SYS_ADMIN in the initial user namespace (root in a container)", "the sandbox runs as this uid 0, without capabilities outside its namespaces; grants are not idmapped; cgroup limits need a delegated cgroup")
	default:
		check("root", true, "running unprivileged", "the sandbox runs as your uid; cgroup limits need a delegated cgroup v2 subtree")
	}

	// Namespaces.
	unpriv := "unprivileged users can create them too"
	if f.UnprivilegedUserNS != nil {
		unpriv = "unprivileged users cannot: " + f.UnprivilegedUserNS.Error()
	}
	apparmor, blocked := evaluateAppArmor(f)
	if f.UserNS == nil {
		ns := namespaceList(plan.DefaultNamespaces()) + " namespaces"
		check("userns", true, "created "+ns+"; "+unpriv, "")
		switch {
		case blocked != "":
			// The proc probe ran unshare(1), which AppArmor restricts too:
			// its result says nothing about the kernel's procfs rules.
		case f.Proc == nil:
			layer("namespaces", Enforced, ns, "")
			check("proc", true, "a new procfs mounts in the sandbox's namespaces", "")
			layer("proc", Enforced, "the sandbox's own /proc: only its processes", "")
		default:
			layer("namespaces", Enforced, ns, "")
			check("proc", false, f.Proc.Error(), "runs are refused unless the policy accepts allow_downgrade: proc, which shows the container's /proc read-only: its processes are listed (pid numbers and what ps shows, the numbers of their fds), not reachable")
			layer("proc", Refused, "the kernel refuses the sandbox a /proc of its own", "proc")
		}
	} else {
		fix := "every run is refused unless the policy accepts allow_downgrade: namespaces, which runs the landlock backend: Landlock and seccomp without namespaces (the host's files exist but are denied, its processes are listed but out of reach, every connect goes through airlock's proxy)"
		if f.LandlockABI < plan.NoNamespacesMinLandlock {
			fix = fmt.Sprintf("every run is refused: the sandbox is built from these namespaces, and the landlock backend that runs without them needs Landlock ABI %d (this kernel has %d)", plan.NoNamespacesMinLandlock, f.LandlockABI)
		}
		check("userns", false, f.UserNS.Error()+"; "+unpriv, fix)
	}
	r.Checks = append(r.Checks, apparmor)
	// gVisor is a choice (--isolation gvisor), not part of a default run:
	// its absence fails nothing.
	if g := f.GVisor; g.Err == nil && g.Bin != "" {
		check("gvisor", true, fmt.Sprintf("%s: --isolation gvisor runs on gVisor's %s platform (root only)", g.Bin, g.Platform), "")
	} else if g.Err != nil {
		check("gvisor", true, "--isolation gvisor is unavailable: "+g.Err.Error(), "")
	}
	// The microVM is a choice too.
	if m := f.MicroVM; m.Err != nil {
		check("microvm", true, "--isolation microvm is unavailable: "+m.Err.Error(), "")
	} else if m.QEMU != "" {
		kvm := "KVM: a one-instruction guest runs on /dev/kvm, but airlock does not use it: a full guest on KVM is untested (on nested VMs such as the development VM /dev/kvm passes this check and QEMU guests still hang)"
		if m.KVM != nil {
			kvm = "KVM is not usable: " + m.KVM.Error()
		}
		check("microvm", true, fmt.Sprintf("%s boots guest kernel %s: --isolation microvm runs under software emulation (TCG: seconds per boot; root only). %s", m.QEMU, m.Kernel, kvm), "")
	}
	switch {
	case blocked != "":
		layer("namespaces", Refused, blocked, "namespaces")
	case f.UserNS != nil && f.LandlockABI >= plan.NoNamespacesMinLandlock:
		layer("namespaces", Refused, "cannot create the sandbox's namespaces", "namespaces")
	case f.UserNS != nil:
		layer("namespaces", Refused, "cannot create the sandbox's namespaces", "")
	}

	// Landlock.
	if f.LandlockABI > 0 {
		detail := fmt.Sprintf("ABI %d", f.LandlockABI)
		if missing := landlockMissing(f.LandlockABI); missing != "" {
			check("landlock", true, detail+"; missing: "+missing, "these Landlock rights are left out; the mount and network namespaces still confine the run")
		} else {
			check("landlock", true, detail, "")
		}
		layer("landlock", Enforced, detail, "")
	} else {
		why := "Landlock unavailable"
		if f.LandlockErr != nil {
			why = f.LandlockErr.Error()
		}
		check("landlock", false, why, "runs are refused unless the policy accepts allow_downgrade: landlock (the mount namespace still hides the host)")
		layer("landlock", Refused, "the kernel has no Landlock", "landlock")
	}

	// seccomp.
	if f.Seccomp == nil {
		check("seccomp", true, "filter mode with kill_process, errno and allow actions", "")
		layer("seccomp", Enforced, "syscall allow-list", "")
	} else {
		check("seccomp", false, f.Seccomp.Error(), "every run is refused: the syscall filter cannot be installed")
		layer("seccomp", Refused, "seccomp filter mode unavailable", "")
	}
	if f.ConnectBroker == nil {
		check("broker", true, "pidfd_getfd and process_vm_readv work: the landlock backend's broker can answer every connect", "")
	} else {
		check("broker", false, f.ConnectBroker.Error(), "the landlock backend refuses policies with net_hosts (its broker could answer no connect, the egress proxy's included), and without net_hosts every connect is refused without a denial in the report; the namespace backend does not use the broker. Allow pidfd_open, pidfd_getfd and process_vm_readv in the seccomp profile airlock runs under")
	}

	evaluateCgroup(f, check, layer)
	layer("max_cpu", Enforced, "RLIMIT_CPU on the process tree", "")
	layer("other budgets", Enforced, "max_wall, max_output_bytes and max_ops by the supervisor and the egress proxy; max_scratch by the /tmp tmpfs size", "")
	evaluateAudit(f, check, layer)
	evaluateIDMap(f, check, &r)

	r.Enforceable = true
	for _, l := range r.Layers {
		if l.Verdict == Refused {
			r.Enforceable = false
		}
	}
	return r
}

// landlockMissing names what ABI abi lacks that airlock asks Landlock for.
func landlockMissing(abi int) string {
	var m []string
	for _, f := range []struct {
		abi  int
		what string
	}{
		{2, "rename and link across directories (refer, ABI 2)"},
		{3, "truncate (ABI 3)"},
		{4, "TCP connect rules (ABI 4)"},
		{5, "device ioctl (ABI 5)"},
		{6, "signal and abstract unix socket scoping (ABI 6)"},
		{7, "audit logging (ABI 7)"},
	} {
		if abi < f.abi {
			m = append(m, f.what)
		}
	}
	return strings.Join(m, ", ")
}

// evaluateCgroup judges max_memory and max_pids, which need a cgroup.
func evaluateCgroup(f Facts, check func(string, bool, string, string), layer func(string, Verdict, string, string)) {
	h := f.Cgroup
	var names []string
	for _, c := range []string{cgroup.Memory, cgroup.Pids, cgroup.CPU, cgroup.CPUAcct, cgroup.Freezer} {
		if dir, ok := h.Controllers[c]; ok {
			v := "v1"
			if dir == h.Unified {
				v = "v2"
			}
			names = append(names, c+" ("+v+")")
		}
	}
	version := h.Version
	if version == "" {
		version = "none"
	}
	detail := "version " + version
	if len(names) > 0 {
		detail += "; controllers: " + strings.Join(names, ", ")
	} else {
		detail += "; no usable controller"
	}
	if f.CgroupErr != nil {
		detail = f.CgroupErr.Error()
	}
	var missing []string
	for _, lim := range []struct{ name, controller string }{{"max_memory", cgroup.Memory}, {"max_pids", cgroup.Pids}} {
		dir, ok := h.Controllers[lim.controller]
		err, checked := f.CgroupWritable[lim.controller]
		switch {
		case f.CgroupErr != nil || !ok:
			missing = append(missing, lim.controller+" controller missing")
			layer(lim.name, Refused, "no "+lim.controller+" controller", lim.name)
		case !checked || err != nil:
			why := "not checked"
			if err != nil {
				why = err.Error()
			}
			missing = append(missing, lim.controller+" not writable: "+why)
			layer(lim.name, Refused, "cannot create a group under "+dir+": "+why, lim.name)
		default:
			layer(lim.name, Enforced, lim.controller+" controller at "+dir, "")
		}
	}
	if len(missing) == 0 {
		check("cgroup", true, detail, "")
		return
	}
	check("cgroup", false, detail+"; "+strings.Join(missing, "; "),
		"runs are refused unless the policy accepts allow_downgrade: max_memory, max_pids, max_cpu (run as root or delegate a cgroup v2 subtree)")
}

// evaluateAudit judges whether filesystem denials reach the report: the
// kernel must log Landlock denials (ABI 7) and airlock must read the log.
func evaluateAudit(f Facts, check func(string, bool, string, string), layer func(string, Verdict, string, string)) {
	a := f.Audit
	detail := "cannot read the audit status: "
	if a.Err != nil {
		detail += a.Err.Error()
	} else {
		detail = fmt.Sprintf("audit enabled=%d, audit daemon pid %d", a.Enabled, a.DaemonPID)
	}
	if a.Collector == nil {
		if a.Err == nil && a.Enabled == 0 {
			detail += "; audit is off: a run turns it on (host-wide) to read Landlock records"
		}
		check("audit", true, detail, "")
		layer("fs_denials", Enforced, "Landlock audit records are readable: with --fs-audit, filesystem denials are listed in the report", "")
		return
	}
	check("audit", false, detail+"; "+a.Collector.Error(),
		"filesystem denials are still enforced but cannot be listed in the report (report.enforcement.fs_denials says why)")
	layer("fs_denials", Unavailable, a.Collector.Error(), "fs_audit")
}

// evaluateIDMap judges runs with fs_read or fs_write grants, which a root
// supervisor idmaps; a default run has no grants, so it only adds to Refuses.
func evaluateIDMap(f Facts, check func(string, bool, string, string), r *Report) {
	switch {
	case !f.Root:
		check("idmap", true, "not used: without root the sandbox runs as your uid, so files it writes are yours", "")
	case f.IDMap == nil:
		check("idmap", true, "idmapped a detached mount of a temporary directory", "")
	default:
		check("idmap", false, f.IDMap.Error(), "runs with fs_read or fs_write grants are refused: their mounts cannot be idmapped")
		r.Refuses = append(r.Refuses, "runs with fs_read or fs_write grants: idmapped mounts fail: "+f.IDMap.Error())
	}
}

// namespaceList names ns as a list in prose: "user, mount and pid".
func namespaceList(ns []plan.Namespace) string {
	names := make([]string, len(ns))
	for i, n := range ns {
		names[i] = string(n)
	}
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}
