// Package downgrade names the enforcement layers a policy may accept
// running without when the host lacks them (policy key "allow_downgrade").
// Anything a policy does not list makes a missing feature a refusal (exit
// 125), so no layer is dropped silently.
//
// The names live here, below package policy, so that the plan's data
// (plan/spec), which records the downgrades a run accepts, can name them
// without linking the policy parser: the sandbox's init decodes a plan on
// every start. It imports nothing.
package downgrade

// Layer names an enforcement layer the policy accepts running without
// when the host lacks it. policy.Downgrade is this type.
type Layer string

// The layers a policy may accept running without.
const (
	Landlock Layer = "landlock"   // run without Landlock (mount namespace still applies)
	Memory   Layer = "max_memory" // no memory controller: the memory is not bounded
	CPU      Layer = "max_cpu"    // no cpu controller: RLIMIT_CPU only
	Pids     Layer = "max_pids"   // no pids controller: RLIMIT_NPROC only
	FSAudit  Layer = "fs_audit"   // filesystem denials cannot be reported
	// Proc: where the kernel refuses the sandbox a /proc of its own
	// (inside a container that masks parts of its /proc), the container's
	// /proc read-only instead: the container's other processes are listed
	// there, under the container's pid numbers, and cannot be signalled,
	// traced or read beyond what ps shows.
	Proc Layer = "proc"
	// Namespaces: where user namespaces cannot be created (a container's
	// seccomp profile, user.max_user_namespaces=0, AppArmor's
	// restriction), the backend without namespaces: Landlock for files
	// and execution, seccomp, rlimits and cgroups where delegated, egress
	// forced through the proxy by seccomp user notification on connect.
	// Other processes are visible but cannot be signalled or traced,
	// files outside grants exist but are denied, there is no private
	// /tmp (a scratch folder instead) and no local servers.
	Namespaces Layer = "namespaces"
	// StagedWrites: without namespaces, fs_write folders are written in
	// place: max_write is not enforced and the protected paths inside them
	// (git hooks, shell rc files) cannot be kept read-only, since Landlock
	// only adds rights.
	StagedWrites Layer = "staged_writes"
)
