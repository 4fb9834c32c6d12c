package plan

import "github.com/airlock-sandbox/airlock/plan/spec"

// The plan's types, their methods and its binary form are defined in
// plan/spec, which imports no policy package, so that the sandbox's init
// decodes and applies a plan without linking the policy parser. Here they
// keep their names: plan.Plan is spec.Plan, and so on.

// Plan is everything nsinit needs, in order (spec.Plan).
type Plan = spec.Plan

// Kind says what a Mount step creates (spec.Kind).
type Kind = spec.Kind

// Mount kinds (spec.KindBind and the rest).
const (
	KindBind       = spec.KindBind
	KindTmpfs      = spec.KindTmpfs
	KindProc       = spec.KindProc
	KindFile       = spec.KindFile
	KindSymlink    = spec.KindSymlink
	KindDir        = spec.KindDir
	KindStage      = spec.KindStage
	KindOverlay    = spec.KindOverlay
	KindStagedFile = spec.KindStagedFile
	KindReadonly   = spec.KindReadonly
	KindHide       = spec.KindHide
)

// Origin says why a step exists, for explain and audit (spec.Origin).
type Origin = spec.Origin

// Origins (spec.OriginBase and the rest).
const (
	OriginBase    = spec.OriginBase
	OriginFSRead  = spec.OriginFSRead
	OriginFSWrite = spec.OriginFSWrite
	OriginTool    = spec.OriginTool
	OriginCommand = spec.OriginCommand
	OriginSandbox = spec.OriginSandbox
)

// Mount is one step of building the root filesystem (spec.Mount).
type Mount = spec.Mount

// MountFlags are the mount attributes a bind step gets (spec.MountFlags).
type MountFlags = spec.MountFlags

// Access bits for Landlock rules (spec.Access).
type Access = spec.Access

// Landlock rights per path.
const (
	Read    = spec.Read
	Write   = spec.Write
	Execute = spec.Execute
)

// Rule is one Landlock path rule (spec.Rule).
type Rule = spec.Rule

// Rlimit is one resource limit (spec.Rlimit).
type Rlimit = spec.Rlimit

// Limits is the budget the runtime enforces around the command
// (spec.Limits).
type Limits = spec.Limits

// Ports of the egress proxy and of airlock's transparent egress
// listeners inside the sandbox's network namespace (spec.HTTPProxyPort
// and the rest).
const (
	HTTPProxyPort  = spec.HTTPProxyPort
	SOCKSProxyPort = spec.SOCKSProxyPort
	TunnelPort     = spec.TunnelPort
	DNSPort        = spec.DNSPort
)

// CABundlePath is where the sandbox finds the roots it trusts when the
// proxy terminates TLS to add credentials (spec.CABundlePath).
const CABundlePath = spec.CABundlePath

// NoNamespacesMinLandlock is the lowest Landlock ABI the backend without
// namespaces runs on (spec.NoNamespacesMinLandlock).
const NoNamespacesMinLandlock = spec.NoNamespacesMinLandlock

// Namespace names a kind of Linux namespace the sandbox gets a new one of
// (spec.Namespace).
type Namespace = spec.Namespace

// The namespaces a sandbox can be given (spec.NamespaceUser and the rest).
const (
	NamespaceUser   = spec.NamespaceUser
	NamespaceMount  = spec.NamespaceMount
	NamespacePID    = spec.NamespacePID
	NamespaceNet    = spec.NamespaceNet
	NamespaceIPC    = spec.NamespaceIPC
	NamespaceUTS    = spec.NamespaceUTS
	NamespaceCgroup = spec.NamespaceCgroup
)

// DefaultNamespaces returns the namespaces every sandbox gets, in the
// order explain lists them (spec.DefaultNamespaces).
func DefaultNamespaces() []Namespace { return spec.DefaultNamespaces() }

// IDMap says who uid and gid 0 inside the sandbox are on the host
// (spec.IDMap).
type IDMap = spec.IDMap

// DefaultIDMap returns the id mapping every sandbox gets
// (spec.DefaultIDMap).
func DefaultIDMap() IDMap { return spec.DefaultIDMap() }

// Seccomp is the syscall filter as plain data (spec.Seccomp).
type Seccomp = spec.Seccomp

// Syscall gives the rules for one syscall (spec.Syscall).
type Syscall = spec.Syscall

// SyscallGroup is a named set of syscalls with the reason for it
// (spec.SyscallGroup).
type SyscallGroup = spec.SyscallGroup

// SyscallRule returns Action when all its conditions hold
// (spec.SyscallRule).
type SyscallRule = spec.SyscallRule

// ArgCond holds when (args[Arg] & Mask) == Value (spec.ArgCond).
type ArgCond = spec.ArgCond

// Action is a seccomp filter return value (spec.Action).
type Action = spec.Action

// The actions the airlock filter uses (spec.ActAllow and the rest).
const (
	ActAllow       = spec.ActAllow
	ActKillProcess = spec.ActKillProcess
	ActEPERM       = spec.ActEPERM
	ActENOSYS      = spec.ActENOSYS
	ActEOPNOTSUPP  = spec.ActEOPNOTSUPP
	ActNotify      = spec.ActNotify
)
