// Package nsinit is the sandbox's init: the re-executed child that runs as
// pid 1 in the new user, mount, pid, net, ipc, uts and cgroup namespaces.
// It applies the plan in order — network, mounts, pivot_root, Landlock,
// capabilities, no_new_privs, seccomp — and only then starts commands, one
// per exec request, reaps every process and reports each exit. Every irreversible restriction
// happens here, never in the supervisor. If any step fails, the command is
// never started (fail closed).
//
// It is the only enforce package that imports its siblings; it never
// imports net/http, egress, server or mcp.
package nsinit

import (
	"errors"

	"github.com/airlock-sandbox/airlock/internal/wire"
)

// Arg0 is argv[0] of the re-executed init; sandbox.Init recognizes it.
const Arg0 = "airlock-nsinit"

// NewNetArg is the init's argv[1] when it was cloned into a network
// namespace of its own (which holds only lo, down): it sets lo up before
// its plan comes. Without it the init touches no network until the plan
// says it has a namespace (the backend without namespaces shares the
// host's).
const NewNetArg = "netns"

// PremountArg is among the init's arguments when the supervisor will send
// "premount" first, before the plan: a warm init of a root supervisor's
// Pool (sandbox.Pool) mounts the steps its last taker's plan began with
// while it waits, and a plan that begins with exactly those steps starts
// from there.
const PremountArg = "premount"

// File descriptors the supervisor passes to the init.
const (
	PlanFD    = 3 // pipe: the plan (plan.Plan.MarshalBinary), then EOF
	ControlFD = 4 // SOCK_SEQPACKET socket: Messages both ways
)

// The control protocol, between the supervisor (sandbox, outside) and a
// control process (this init inside the sandbox, or the OCI launcher) over
// one SOCK_SEQPACKET socket: one Message per packet (internal/wire), fds
// beside it as SCM_RIGHTS.
//
//	supervisor                              control process
//	   | ---- premount [bind clones] -----------> |  (a warm init with PremountArg)
//	   | <--- premounted (steps mounted) -------- |  a root holding those steps
//	   | ---- plan (binary on PlanFD, then EOF) -> |  (init only)
//	   | ---- go [idmapped bind clones] ---------> |  set up network, mounts
//	   | <--- listeners [http, socks] ------------ |  (when the plan has a proxy)
//	   | <--- mounts [stage, grant roots...] ----- |  the file API's roots
//	   | <--- ready (landlock ABI) --------------- |  every restriction in place
//	   |        or error (stage, error), exit 125  |
//	   | ---- exec id [stdin, stdout, stderr] ---> |  fork + execve argv
//	   | <--- started id pid --------------------- |
//	   | ---- kill pid ---------------------------> |  SIGKILL the exec's group
//	   | <--- exit id code signal cpu rss -------- |  reaped, wait4 rusage
//	   |        ... more execs, concurrently ...   |
//	   | ---- (closes its end) -----------------> |  the control process exits;
//	                                               |  its pid namespace dies
//
// A supervisor that wants the sandbox gone sooner SIGKILLs the control
// process, pid 1 of the sandbox's pid namespace, and the kernel kills
// everything in it.

// Kind names a control message.
type Kind string

// The control messages, in the order of the diagram above.
const (
	MsgPremount   Kind = "premount"
	MsgPremounted Kind = "premounted"
	MsgGo         Kind = "go"
	MsgListeners  Kind = "listeners"
	MsgMounts     Kind = "mounts"
	MsgReady      Kind = "ready"
	MsgError      Kind = "error"
	MsgExec       Kind = "exec"
	MsgStarted    Kind = "started"
	MsgKill       Kind = "kill"
	MsgExit       Kind = "exit"
)

// Message is one control message; fds travel beside it (SCM_RIGHTS).
type Message struct {
	Type     Kind   `json:"type"`
	Pid      int    `json:"pid,omitempty"`
	Code     int    `json:"code,omitempty"`
	Signal   int    `json:"signal,omitempty"`
	Stage    string `json:"stage,omitempty"`
	Error    string `json:"error,omitempty"`
	IDMaps   int    `json:"idmaps,omitempty"`   // go: number of idmapped grant fds attached
	Landlock int    `json:"landlock,omitempty"` // ready: the Landlock ABI enforced, 0 = none
	// ProcShared (ready) says /proc is the container's, bound read-only,
	// because the kernel refused a fresh one (plan.ProcFallback).
	ProcShared bool `json:"proc_shared,omitempty"`
	// HostnameKept (ready) says sethostname was refused (a container's
	// seccomp profile): the sandbox's UTS namespace has the host's name.
	HostnameKept bool `json:"hostname_kept,omitempty"`
	// exit: CPU time and peak resident size (bytes) of the command and the
	// descendants it waited for.
	CPUMS  int64 `json:"cpu_ms,omitempty"`
	MaxRSS int64 `json:"max_rss,omitempty"`
	// Staged says the first fd of a "mounts" message is the stage's root;
	// the others are the grant roots in plan order (plan.Mount.Grant).
	Staged bool `json:"staged,omitempty"`

	// exec carries a command with stdin, stdout and stderr attached;
	// started, exit and kill name it by ID (kill by its Pid).
	ID   string   `json:"id,omitempty"`
	Argv []string `json:"argv,omitempty"`
	Env  []string `json:"env,omitempty"`
	Cwd  string   `json:"cwd,omitempty"`
	// PTY makes the exec's stdin (a pty slave) its controlling terminal.
	PTY bool `json:"pty,omitempty"`
	// Premount (premount) is a plan (plan.Plan.MarshalBinary) holding only
	// the steps to mount ahead and ProcFallback; the bind clones travel
	// beside it, in step order. Premounted is how many steps the init
	// mounted (premounted; 0 when it mounted none, Error says why) and
	// how many of them the plan begins with (go; 0: start over).
	Premount   string `json:"premount,omitempty"`
	Premounted int    `json:"premounted,omitempty"`
}

// maxMessage bounds one control message (an exec's argv and env).
const maxMessage = 128 << 10

// messageLayout is the shape of Message on the wire (internal/wire),
// pinned by TestMessageLayout; its checksum heads every message, so a
// control process of another airlock build is refused by name.
const messageLayout = "Message{Type string; Pid int; Code int; Signal int; Stage string; Error string; IDMaps int; Landlock int; " +
	"ProcShared bool; HostnameKept bool; CPUMS int64; MaxRSS int64; Staged bool; ID string; Argv []string; Env []string; Cwd string; PTY bool; " +
	"Premount string; Premounted int}"

var messageTag = wire.Tag("airlock-control", messageLayout)

// errMessageBuild refuses a message of another airlock build.
var errMessageBuild = errors.New("control message from an airlock build whose protocol differs: airlock and airlock-init must come from the same build (rebuild both)")

// marshal encodes m (internal/wire: no reflection, which a fresh init
// would pay for on its first message).
func (m *Message) marshal() []byte {
	e := &wire.Encoder{}
	e.String(messageTag)
	e.String(string(m.Type))
	for _, v := range []int{m.Pid, m.Code, m.Signal} {
		e.Int(int64(v))
	}
	e.String(m.Stage)
	e.String(m.Error)
	e.Int(int64(m.IDMaps))
	e.Int(int64(m.Landlock))
	e.Bool(m.ProcShared)
	e.Bool(m.HostnameKept)
	e.Int(m.CPUMS)
	e.Int(m.MaxRSS)
	e.Bool(m.Staged)
	e.String(m.ID)
	e.Strings(m.Argv)
	e.Strings(m.Env)
	e.String(m.Cwd)
	e.Bool(m.PTY)
	e.String(m.Premount)
	e.Int(int64(m.Premounted))
	return e.Bytes()
}

// unmarshal decodes what marshal encoded.
func (m *Message) unmarshal(b []byte) error {
	d := wire.NewDecoder(b)
	if d.String() != messageTag {
		return errMessageBuild
	}
	var q Message
	q.Type = Kind(d.String())
	q.Pid, q.Code, q.Signal = int(d.Int()), int(d.Int()), int(d.Int())
	q.Stage = d.String()
	q.Error = d.String()
	q.IDMaps = int(d.Int())
	q.Landlock = int(d.Int())
	q.ProcShared = d.Bool()
	q.HostnameKept = d.Bool()
	q.CPUMS = d.Int()
	q.MaxRSS = d.Int()
	q.Staged = d.Bool()
	q.ID = d.String()
	q.Argv = d.Strings()
	q.Env = d.Strings()
	q.Cwd = d.String()
	q.PTY = d.Bool()
	q.Premount = d.String()
	q.Premounted = int(d.Int())
	if err := d.Finish(); err != nil {
		return err
	}
	*m = q
	return nil
}
