// Package audit carries observation events: every allow, deny, budget halt
// and exit that an enforcement layer decides. Sinks receive them; the JSONL
// writer keeps them for operators, the DenialLog keeps a bounded summary of
// the denials for reports, and the Recorder keeps everything for tests. It
// imports only policy/... and the standard library, so every layer can emit
// events without pulling in the others. It stops silent refusals: a
// decision that is not recorded cannot be explained to the agent. And it
// stops the sandbox from growing the supervisor's memory by being denied:
// what a report keeps is bounded (see DenialLog), however many denials the
// sandboxed code provokes.
package audit

import (
	"encoding/json"
	"io"
	"sync"
	"time"
)

// Kind says what sort of decision an Event records.
type Kind string

// Event kinds.
const (
	Allow Kind = "allow"
	Deny  Kind = "deny"
	Halt  Kind = "halt"
	Exit  Kind = "exit"
	Info  Kind = "info" // a downgrade accepted by the policy, a layer's status
)

// Layer names the enforcement layer that made a decision.
const (
	LayerFS     = "fs"
	LayerNet    = "net"
	LayerExec   = "exec"
	LayerBudget = "budget"
	LayerKernel = "kernel"
	LayerTool   = "tool"
)

// The egress proxy's upstream connections, as Info events on the net
// layer: the metrics count them by these ops (dial events carry
// DurationMS), and an EgressErrorLog keeps the failures for the report.
// A failure is not a denial: the policy granted the destination, and the
// destination (or the way to it) failed.
const (
	OpDial           = "dial"            // an allowed destination's connection opened
	OpDialFailed     = "dial_failed"     // every checked address refused or timed out
	OpResolveFailed  = "resolve_failed"  // a granted name had no address
	OpUpstreamFailed = "upstream_failed" // a connected upstream failed (TLS, no answer)
)

// Event is one decision. Fields that do not apply are empty.
type Event struct {
	Time    time.Time `json:"time"`
	Kind    Kind      `json:"kind"`
	Layer   string    `json:"layer"`             // fs, net, exec, budget, kernel, tool
	Op      string    `json:"op,omitempty"`      // open, write, connect, exec, fetch ...
	Target  string    `json:"target,omitempty"`  // canonical path, host:port, tool
	Rule    string    `json:"rule,omitempty"`    // the grant: fs_read, net_hosts, max_wall ...
	Message string    `json:"message,omitempty"` // human explanation
	// Suggestion is the smallest policy change that would allow it
	// (policy.Suggestion's text), for the operator: it widens the policy,
	// so the API and MCP servers keep it from the agent unless told not to.
	Suggestion string `json:"suggestion,omitempty"`
	// Hint says what the program can do instead within its grants; it
	// never widens the policy and may be shown to the agent.
	Hint string `json:"hint,omitempty"`
	// Run is the id of the run or session the event belongs to (a
	// session's is its API and MCP id), so that one audit file can hold
	// many; empty from code that runs outside a sandbox.
	Run string `json:"run,omitempty"`
	// Exec is the id of the exec an exit event ends, within a session.
	Exec string `json:"exec,omitempty"`
	// DurationMS is how long the operation took, in milliseconds: on the
	// egress proxy's dial events, from its decision to the upstream
	// connection (or the failure).
	DurationMS float64 `json:"duration_ms,omitempty"`
}

// Sink receives events. Emit must be safe for concurrent use and must not
// block for long; it has no error because a decision is never undone by a
// failing log.
type Sink interface {
	Emit(Event)
}

// Discard is a Sink that drops every event.
var Discard Sink = discard{}

type discard struct{}

func (discard) Emit(Event) {}

// Recorder keeps every event in memory, without bound: it is for tests and
// short, trusted sequences of events. Reports use a DenialLog. The zero
// Recorder is ready to use.
type Recorder struct {
	mu     sync.Mutex
	events []Event // guarded by mu
}

// Emit appends e.
func (r *Recorder) Emit(e Event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

// Events returns a copy of the events so far, oldest first.
func (r *Recorder) Events() []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Event(nil), r.events...)
}

// Denials returns the events of kind Deny.
func (r *Recorder) Denials() []Event {
	var out []Event
	for _, e := range r.Events() {
		if e.Kind == Deny {
			out = append(out, e)
		}
	}
	return out
}

// JSONL writes one JSON object per line to W. Write errors are counted,
// not returned (see Sink); Err reports the first.
type JSONL struct {
	mu  sync.Mutex
	w   io.Writer // guarded by mu
	err error     // guarded by mu
}

// NewJSONL returns a sink writing to w.
func NewJSONL(w io.Writer) *JSONL { return &JSONL{w: w} }

// Emit writes e as one line.
func (j *JSONL) Emit(e Event) {
	b, err := json.Marshal(e)
	j.mu.Lock()
	defer j.mu.Unlock()
	if err == nil {
		_, err = j.w.Write(append(b, '\n'))
	}
	if err != nil && j.err == nil {
		j.err = err
	}
}

// Err returns the first error met while writing, if any.
func (j *JSONL) Err() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.err
}

// Tee sends every event to each of its sinks in order.
type Tee []Sink

// Emit forwards e to every sink.
func (t Tee) Emit(e Event) {
	for _, s := range t {
		if s != nil {
			s.Emit(e)
		}
	}
}
