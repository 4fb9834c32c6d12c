package spec

import (
	"errors"
	"time"

	"github.com/airlock-sandbox/airlock/internal/wire"
	"github.com/airlock-sandbox/airlock/policy/downgrade"
)

// The plan travels from the supervisor to the sandbox's init in
// internal/wire's binary form: every field, in declaration order, with no
// reflection (a cold JSON decode cost the init 1.5 ms of every start).
// JSON stays the plan's form for people and tools (explain, golden files).
//
// wireLayout is the shape the encoding follows, field by field. A test
// (TestWireLayout) derives it from the types (wiretest.Layout) and fails
// until it matches, so a field added to Plan cannot be left out of the
// encoding unnoticed. Its checksum heads every encoded plan: an init from
// an airlock build whose Plan has another shape refuses the plan by name
// instead of misreading it.
const wireLayout = "Plan{Namespaces []string; IDMap IDMap{Size uint32; RootFirst uint32; RootCount uint32; HostUID uint32; HostGID uint32}; " +
	"Argv []string; Env []string; Cwd string; Hostname string; " +
	"Mounts []Mount{Kind string; Source string; Target string; Writable bool; Exec bool; Size int64; Data string; IDMap bool; Origin string; Optional bool; Stage int; Dir bool; Why string; Devices bool; File bool; Recursive bool}; " +
	"Rules []Rule{Path string; Access uint8; Origin string}; Proxy bool; Transparent bool; NetHosts []string; Credentials []string; " +
	"Rootfs string; RootfsImage string; RequireLandlock bool; ProcFallback bool; NoNamespaces bool; Scratch string; " +
	"Rlimits []Rlimit{Resource string; Value uint64; Hard uint64; Why string}; Tools []string; Protected []string; Session bool; PTY bool; " +
	"Limits Limits{Memory int64; Pids int64; CPU int64; Wall int64; Output int64; Ops int64; Write int64; Scratch int64; Downgrades []string}; " +
	"MaskedPaths []string; ReadonlyPaths []string; Capabilities []string; NoNewPrivileges bool; " +
	"Seccomp Seccomp{Default uint32; Syscalls []Syscall{Name string; Group string; Why string; Rules []SyscallRule{Action uint32; Conds []ArgCond{Arg int; Mask uint64; Value uint64}}}; " +
	"Refused []SyscallGroup{Name string; Why string; Names []string}}}"

// wireMagic heads an encoded plan.
var wireMagic = wire.Tag("airlock-plan", wireLayout)

// errWireBuild is the refusal of a plan encoded by another airlock build.
var errWireBuild = errors.New("plan: the plan was encoded by an airlock build whose plan has another shape: airlock and airlock-init must come from the same build (rebuild both, e.g. go build ./cmd/airlock ./cmd/airlock-init)")

// MarshalBinary encodes p for the sandbox's init.
func (p *Plan) MarshalBinary() ([]byte, error) {
	e := &wire.Encoder{}
	e.String(wireMagic)
	e.Strings(namespacesToStrings(p.Namespaces))
	m := p.IDMap
	for _, v := range []uint32{m.Size, m.RootFirst, m.RootCount, m.HostUID, m.HostGID} {
		e.Uint(uint64(v))
	}
	e.Strings(p.Argv)
	e.Strings(p.Env)
	e.String(p.Cwd)
	e.String(p.Hostname)
	e.Uint(uint64(len(p.Mounts)))
	for _, m := range p.Mounts {
		e.String(string(m.Kind))
		e.String(m.Source)
		e.String(m.Target)
		e.Bool(m.Writable)
		e.Bool(m.Exec)
		e.Int(m.Size)
		e.String(m.Data)
		e.Bool(m.IDMap)
		e.String(string(m.Origin))
		e.Bool(m.Optional)
		e.Int(int64(m.Stage))
		e.Bool(m.Dir)
		e.String(m.Why)
		e.Bool(m.Devices)
		e.Bool(m.File)
		e.Bool(m.Recursive)
	}
	e.Uint(uint64(len(p.Rules)))
	for _, r := range p.Rules {
		e.String(r.Path)
		e.Uint(uint64(r.Access))
		e.String(string(r.Origin))
	}
	e.Bool(p.Proxy)
	e.Bool(p.Transparent)
	e.Strings(p.NetHosts)
	e.Strings(p.Credentials)
	e.String(p.Rootfs)
	e.String(p.RootfsImage)
	e.Bool(p.RequireLandlock)
	e.Bool(p.ProcFallback)
	e.Bool(p.NoNamespaces)
	e.String(p.Scratch)
	e.Uint(uint64(len(p.Rlimits)))
	for _, r := range p.Rlimits {
		e.String(r.Resource)
		e.Uint(r.Value)
		e.Uint(r.Hard)
		e.String(r.Why)
	}
	e.Strings(p.Tools)
	e.Strings(p.Protected)
	e.Bool(p.Session)
	e.Bool(p.PTY)
	l := p.Limits
	for _, v := range []int64{l.Memory, l.Pids, int64(l.CPU), int64(l.Wall), l.Output, l.Ops, l.Write, l.Scratch} {
		e.Int(v)
	}
	e.Strings(downgradesToStrings(l.Downgrades))
	e.Strings(p.MaskedPaths)
	e.Strings(p.ReadonlyPaths)
	e.Strings(p.Capabilities)
	e.Bool(p.NoNewPrivileges)
	s := p.Seccomp
	e.Uint(uint64(s.Default))
	e.Uint(uint64(len(s.Syscalls)))
	for _, sc := range s.Syscalls {
		e.String(sc.Name)
		e.String(sc.Group)
		e.String(sc.Why)
		e.Uint(uint64(len(sc.Rules)))
		for _, r := range sc.Rules {
			e.Uint(uint64(r.Action))
			e.Uint(uint64(len(r.Conds)))
			for _, c := range r.Conds {
				e.Int(int64(c.Arg))
				e.Uint(c.Mask)
				e.Uint(c.Value)
			}
		}
	}
	e.Uint(uint64(len(s.Refused)))
	for _, g := range s.Refused {
		e.String(g.Name)
		e.String(g.Why)
		e.Strings(g.Names)
	}
	return e.Bytes(), nil
}

// UnmarshalBinary decodes what MarshalBinary encoded into p. Empty lists
// come back nil. On error p is left unchanged.
func (p *Plan) UnmarshalBinary(b []byte) error {
	d := wire.NewDecoder(b)
	if d.String() != wireMagic {
		return errWireBuild
	}
	var q Plan
	q.Namespaces = stringsToNamespaces(d.Strings())
	u32 := d.Uint32
	q.IDMap = IDMap{Size: u32(), RootFirst: u32(), RootCount: u32(), HostUID: u32(), HostGID: u32()}
	q.Argv = d.Strings()
	q.Env = d.Strings()
	q.Cwd = d.String()
	q.Hostname = d.String()
	if n := d.Count(); n > 0 {
		q.Mounts = make([]Mount, n)
		for i := range q.Mounts {
			m := &q.Mounts[i]
			m.Kind = Kind(d.String())
			m.Source = d.String()
			m.Target = d.String()
			m.Writable = d.Bool()
			m.Exec = d.Bool()
			m.Size = d.Int()
			m.Data = d.String()
			m.IDMap = d.Bool()
			m.Origin = Origin(d.String())
			m.Optional = d.Bool()
			m.Stage = int(d.Int())
			m.Dir = d.Bool()
			m.Why = d.String()
			m.Devices = d.Bool()
			m.File = d.Bool()
			m.Recursive = d.Bool()
		}
	}
	if n := d.Count(); n > 0 {
		q.Rules = make([]Rule, n)
		for i := range q.Rules {
			q.Rules[i] = Rule{Path: d.String(), Access: Access(d.Uint()), Origin: Origin(d.String())}
		}
	}
	q.Proxy = d.Bool()
	q.Transparent = d.Bool()
	q.NetHosts = d.Strings()
	q.Credentials = d.Strings()
	q.Rootfs = d.String()
	q.RootfsImage = d.String()
	q.RequireLandlock = d.Bool()
	q.ProcFallback = d.Bool()
	q.NoNamespaces = d.Bool()
	q.Scratch = d.String()
	if n := d.Count(); n > 0 {
		q.Rlimits = make([]Rlimit, n)
		for i := range q.Rlimits {
			q.Rlimits[i] = Rlimit{Resource: d.String(), Value: d.Uint(), Hard: d.Uint(), Why: d.String()}
		}
	}
	q.Tools = d.Strings()
	q.Protected = d.Strings()
	q.Session = d.Bool()
	q.PTY = d.Bool()
	q.Limits = Limits{Memory: d.Int(), Pids: d.Int(), CPU: time.Duration(d.Int()), Wall: time.Duration(d.Int()),
		Output: d.Int(), Ops: d.Int(), Write: d.Int(), Scratch: d.Int()}
	q.Limits.Downgrades = stringsToDowngrades(d.Strings())
	q.MaskedPaths = d.Strings()
	q.ReadonlyPaths = d.Strings()
	q.Capabilities = d.Strings()
	q.NoNewPrivileges = d.Bool()
	q.Seccomp.Default = Action(u32())
	if n := d.Count(); n > 0 {
		q.Seccomp.Syscalls = make([]Syscall, n)
		for i := range q.Seccomp.Syscalls {
			sc := &q.Seccomp.Syscalls[i]
			sc.Name, sc.Group, sc.Why = d.String(), d.String(), d.String()
			if n := d.Count(); n > 0 {
				sc.Rules = make([]SyscallRule, n)
				for j := range sc.Rules {
					r := &sc.Rules[j]
					r.Action = Action(u32())
					if n := d.Count(); n > 0 {
						r.Conds = make([]ArgCond, n)
						for k := range r.Conds {
							r.Conds[k] = ArgCond{Arg: int(d.Int()), Mask: d.Uint(), Value: d.Uint()}
						}
					}
				}
			}
		}
	}
	if n := d.Count(); n > 0 {
		q.Seccomp.Refused = make([]SyscallGroup, n)
		for i := range q.Seccomp.Refused {
			q.Seccomp.Refused[i] = SyscallGroup{Name: d.String(), Why: d.String(), Names: d.Strings()}
		}
	}
	if err := d.Finish(); err != nil {
		return err
	}
	*p = q
	return nil
}

func namespacesToStrings(ns []Namespace) []string {
	out := make([]string, len(ns))
	for i, n := range ns {
		out[i] = string(n)
	}
	return out
}

func stringsToNamespaces(ss []string) []Namespace {
	if ss == nil {
		return nil
	}
	out := make([]Namespace, len(ss))
	for i, s := range ss {
		out[i] = Namespace(s)
	}
	return out
}

func downgradesToStrings(ds []downgrade.Layer) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = string(d)
	}
	return out
}

func stringsToDowngrades(ss []string) []downgrade.Layer {
	if ss == nil {
		return nil
	}
	out := make([]downgrade.Layer, len(ss))
	for i, s := range ss {
		out[i] = downgrade.Layer(s)
	}
	return out
}
