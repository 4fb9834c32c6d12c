package policy

import (
	"bytes"
	"encoding/json"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/airlock-sandbox/airlock/policy/hostspec"
)

// fileJSON is the canonical JSON form of a policy file. Field order is the
// order of topKeys.
type fileJSON struct {
	Version        int          `json:"version"`
	FSRead         []string     `json:"fs_read,omitempty"`
	FSWrite        []string     `json:"fs_write,omitempty"`
	FSDeny         []string     `json:"fs_deny,omitempty"`
	FSProtect      []string     `json:"fs_protect,omitempty"`
	FSUnprotect    []string     `json:"fs_unprotect,omitempty"`
	NetHosts       []string     `json:"net_hosts,omitempty"`
	AllowedTools   []string     `json:"allowed_tools,omitempty"`
	Env            []string     `json:"env,omitempty"`
	Credentials    []Credential `json:"credentials,omitempty"`
	Budget         budgetJSON   `json:"budget"`
	AllowDowngrade []string     `json:"allow_downgrade,omitempty"`
	Rootfs         string       `json:"rootfs,omitempty"`
}

// budgetJSON writes every budget; field order is the order of budgetKeys.
type budgetJSON struct {
	MaxWall        string `json:"max_wall"`
	MaxOutputBytes string `json:"max_output_bytes"`
	MaxOps         int64  `json:"max_ops"`
	MaxMemory      string `json:"max_memory"`
	MaxCPU         string `json:"max_cpu"`
	MaxPids        int64  `json:"max_pids"`
	MaxScratch     string `json:"max_scratch"`
	MaxWrite       string `json:"max_write"`
}

// MarshalJSON returns p as a canonical policy file in JSON: absolute paths,
// normalized hosts, sorted grants, empty lists left out and the complete
// budget written with units ("30s", "1MiB"). Parse of the result is Equal
// to p. Every budget is written, so in the result each one counts as set by
// the file (flags may then lower it, not raise it).
func (p *Policy) MarshalJSON() ([]byte, error) {
	l := p.limits
	f := fileJSON{
		Version:      Version,
		FSRead:       p.written(p.fsRead),
		FSWrite:      p.written(p.fsWrite),
		FSDeny:       p.fsDeny,
		FSProtect:    p.fsProtect,
		FSUnprotect:  p.fsUnprotect,
		NetHosts:     hostStrings(p.netHosts),
		AllowedTools: p.tools,
		Env:          envStrings(p.env),
		Credentials:  p.credentials,
		Budget: budgetJSON{
			MaxWall:        formatDuration(l.Wall),
			MaxOutputBytes: FormatSize(l.OutputBytes),
			MaxOps:         l.Ops,
			MaxMemory:      FormatSize(l.Memory),
			MaxCPU:         formatDuration(l.CPU),
			MaxPids:        l.Pids,
			MaxScratch:     FormatSize(l.Scratch),
			MaxWrite:       FormatSize(l.Write),
		},
	}
	for _, d := range p.downgrades {
		f.AllowDowngrade = append(f.AllowDowngrade, string(d))
	}
	f.Rootfs = p.rootfs
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(f); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

func hostStrings(hs []hostspec.Pattern) []string {
	var s []string
	for _, h := range hs {
		s = append(s, h.String())
	}
	return s
}

func envStrings(env []EnvVar) []string {
	var s []string
	for _, e := range env {
		if e.HasValue {
			s = append(s, e.Name+"="+e.Value)
		} else {
			s = append(s, e.Name)
		}
	}
	return s
}

// Equal reports whether a and b grant exactly the same things with the same
// budget and downgrades. It ignores where the policies came from and which
// budgets were written out rather than defaulted. Two nil policies are equal.
func Equal(a, b *Policy) bool {
	if a == nil || b == nil {
		return a == b
	}
	return slices.Equal(a.fsRead, b.fsRead) &&
		slices.Equal(a.fsWrite, b.fsWrite) &&
		slices.Equal(a.fsDeny, b.fsDeny) &&
		slices.Equal(a.fsProtect, b.fsProtect) &&
		slices.Equal(a.fsUnprotect, b.fsUnprotect) &&
		slices.Equal(hostStrings(a.netHosts), hostStrings(b.netHosts)) &&
		slices.Equal(a.tools, b.tools) &&
		slices.Equal(a.env, b.env) &&
		slices.Equal(a.credentials, b.credentials) &&
		a.limits == b.limits &&
		slices.Equal(a.downgrades, b.downgrades) &&
		a.rootfs == b.rootfs &&
		maps.Equal(a.placed, b.placed)
}

// Summary describes p in one line: how many entries each grant has, then
// the budget, then any accepted downgrades. For example:
//
//	ok: 2 fs_read, 1 fs_write, 3 net_hosts, 1 allowed_tools, 0 env; budget max_wall=30s max_output_bytes=1MiB max_ops=1000 max_memory=512MiB max_cpu=30s max_pids=64 max_scratch=64MiB
func (p *Policy) Summary() string {
	var b strings.Builder
	b.WriteString("ok: ")
	for i, c := range []struct {
		n   int
		cap Capability
	}{{len(p.fsRead), FSRead}, {len(p.fsWrite), FSWrite}, {len(p.netHosts), NetHosts}, {len(p.tools), AllowedTools}, {len(p.env), Env}} {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(strconv.Itoa(c.n) + " " + c.cap.String())
	}
	b.WriteString("; budget")
	for _, k := range budgetKeys {
		b.WriteString(" " + string(k) + "=" + formatLimit(k, limitValue(p.limits, k)))
	}
	if len(p.downgrades) > 0 {
		b.WriteString("; allow_downgrade")
		for _, d := range p.downgrades {
			b.WriteString(" " + string(d))
		}
	}
	if p.rootfs != "" {
		b.WriteString("; rootfs " + p.rootfs)
	}
	return b.String()
}
