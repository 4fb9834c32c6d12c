package sandbox

import (
	"encoding/json"

	"github.com/airlock-sandbox/airlock/audit"
	"github.com/airlock-sandbox/airlock/internal/writeback"
	"github.com/airlock-sandbox/airlock/policy"
)

// Report is the result of one run: what the agent gets back (DESIGN §4).
// Its JSON form is the `--json` output, the API's and MCP's result.
type Report struct {
	ExitCode        int     `json:"exit_code"`
	Signal          *int    `json:"signal"`
	HaltedBy        *string `json:"halted_by"`
	DurationMS      int64   `json:"duration_ms"`
	Stdout          string  `json:"stdout"`
	Stderr          string  `json:"stderr"`
	StdoutTruncated bool    `json:"stdout_truncated"`
	StderrTruncated bool    `json:"stderr_truncated"`
	Usage           Usage   `json:"usage"`
	// Denials lists the distinct refused operations, in the order they
	// first happened, each counting its repeats: at most
	// audit.DefaultMaxDistinct, plus the first of up to
	// audit.MaxExtraKinds further kinds. DenialCounts counts them all.
	Denials      []Denial     `json:"denials"`
	DenialCounts DenialCounts `json:"denial_counts"`
	// Error explains exit code 125 (airlock refused or failed; nothing ran)
	// and 126/127; empty otherwise.
	Error string `json:"error,omitempty"`
	// Enforcement lists what was actually enforced on this host, and any
	// downgrade the policy accepted.
	Enforcement Enforcement `json:"enforcement"`
	// Writes says what the copy back of the staged fs_write grants did:
	// written, removed, refused (protected paths) and failed entries. Nil
	// when the run had no fs_write grant or never started.
	Writes *Writes `json:"writes,omitempty"`
	// Operator is advice for the operator, who writes the policy: the
	// policy changes that would allow what was denied or halted. Each one
	// widens the policy, so it is never meant for the sandboxed program,
	// which may be an agent steered by an injected instruction: airlock
	// serve and airlock mcp leave it out of what they return unless the
	// operator starts them with --agent-advice. Nil when there is none.
	Operator *Operator `json:"operator,omitempty"`
}

// Operator is the part of a report meant for the operator only.
type Operator struct {
	// Suggestions are the policy changes that would allow the run's
	// denials, in their order, then its halt; denials no policy change
	// would allow (a symlink out of a grant, a device) have none.
	Suggestions []OperatorSuggestion `json:"suggestions"`
}

// OperatorSuggestion is the policy change that would allow one denial or
// halt of a run, which Layer, Op, Target and Rule name as in Denials.
type OperatorSuggestion struct {
	Layer  string `json:"layer"`
	Op     string `json:"op,omitempty"`
	Target string `json:"target,omitempty"`
	Rule   string `json:"rule"`
	// Suggestion is the change as text, such as `add "pypi.org:443" to
	// net_hosts`; policy.ParseSuggestion reads it.
	Suggestion string `json:"suggestion"`
	// Changes is the same change as data, to apply with
	// (*policy.Policy).Apply.
	Changes []policy.Change `json:"changes"`
}

// Writes is what the copy back of a run's staged fs_write grants did.
type Writes = writeback.Result

// WriteEntry is one path the copy back refused or failed on.
type WriteEntry = writeback.Entry

// Usage is what the run consumed.
type Usage struct {
	CPUMS          int64 `json:"cpu_ms"`
	MaxMemoryBytes int64 `json:"max_memory_bytes"`
	Ops            int64 `json:"ops"`
	OutputBytes    int64 `json:"output_bytes"`
	// WriteBytes is what the run added to its fs_write grants (max_write).
	WriteBytes int64 `json:"write_bytes"`
}

// Denial is one refused operation, naming the grant that would allow it.
// Denials with the same layer, op, target and rule are one Denial with a
// Count; the message is the first one's. Target, Message and Hint are cut
// at audit.MaxTargetBytes, MaxMessageBytes and MaxSuggestionBytes with a
// marker such as "…[+2048 bytes]". The policy change that would allow it
// is not here but in Report.Operator, which is the operator's.
type Denial struct {
	Layer   string `json:"layer"`
	Op      string `json:"op"`
	Target  string `json:"target"`
	Rule    string `json:"rule"`
	Message string `json:"message"`
	// Hint says what the program can do instead within its grants (use
	// the real path, run the file through its interpreter); it never
	// widens the policy. Empty when there is nothing to add.
	Hint  string `json:"hint,omitempty"`
	Count int64  `json:"count"` // how many times it happened, at least 1
}

// DenialCounts counts every denial of a run, itemized in Denials or not.
type DenialCounts struct {
	Total int64 `json:"total"`
	// ByLayer splits Total by layer (fs, net, exec, budget, kernel, tool);
	// layers without denials are absent.
	ByLayer map[string]int64 `json:"by_layer"`
	// Dropped is how many of Total are not itemized in Denials because it
	// already held the most distinct denials a report keeps.
	Dropped int64 `json:"dropped"`
}

// Enforcement says which layers held during the run.
type Enforcement struct {
	Namespaces bool     `json:"namespaces"`
	Landlock   int      `json:"landlock_abi"` // 0 = not enforced (only with allow_downgrade: landlock)
	Seccomp    bool     `json:"seccomp"`
	Cgroup     string   `json:"cgroup,omitempty"` // "v1", "v2", "hybrid", or "" when not used
	Downgrades []string `json:"downgrades,omitempty"`
	// FSDenials says whether filesystem denials can be reported on this host.
	FSDenials string `json:"fs_denials"`
}

// MarshalJSON writes ByLayer as an object even when it is nil.
func (c DenialCounts) MarshalJSON() ([]byte, error) {
	type plain DenialCounts // without this method
	if c.ByLayer == nil {
		c.ByLayer = map[string]int64{}
	}
	return json.Marshal(plain(c))
}

// denialsFrom converts a DenialLog's summary to the report's form; the
// list is never nil.
func denialsFrom(s audit.Summary) ([]Denial, DenialCounts) {
	ds := make([]Denial, 0, len(s.Denials))
	for _, t := range s.Denials {
		ds = append(ds, Denial{Layer: t.Layer, Op: t.Op, Target: t.Target, Rule: t.Rule, Message: t.Message, Hint: t.Hint, Count: t.Count})
	}
	return ds, countsFrom(s.Counts)
}

// setDenials fills the report's denials from a DenialLog's summary, and
// puts their suggestions first in Operator.
func (r *Report) setDenials(s audit.Summary) {
	r.Denials, r.DenialCounts = denialsFrom(s)
	var ops []OperatorSuggestion
	for _, t := range s.Denials {
		if o, ok := operatorSuggestion(t.Event); ok {
			ops = append(ops, o)
		}
	}
	if len(ops) == 0 {
		return
	}
	if r.Operator == nil {
		r.Operator = &Operator{}
	}
	r.Operator.Suggestions = append(ops, r.Operator.Suggestions...)
}

// addSuggestion appends the suggestion of a halt or denial event.
func (r *Report) addSuggestion(e audit.Event) {
	if o, ok := operatorSuggestion(e); ok {
		if r.Operator == nil {
			r.Operator = &Operator{}
		}
		r.Operator.Suggestions = append(r.Operator.Suggestions, o)
	}
}

// operatorSuggestion reads the suggestion of e. A suggestion that does not
// parse (one cut by the denial log's bounds) is left out: it would not work.
func operatorSuggestion(e audit.Event) (OperatorSuggestion, bool) {
	if e.Suggestion == "" {
		return OperatorSuggestion{}, false
	}
	s, err := policy.ParseSuggestion(e.Suggestion)
	if err != nil {
		return OperatorSuggestion{}, false
	}
	return OperatorSuggestion{Layer: e.Layer, Op: e.Op, Target: e.Target, Rule: e.Rule, Suggestion: e.Suggestion, Changes: s.Changes}, true
}

func countsFrom(c audit.Counts) DenialCounts {
	return DenialCounts{Total: c.Total, ByLayer: c.ByLayer, Dropped: c.Dropped}
}
