package api

import "encoding/json"

// Report is the result of one run or exec: what the agent gets back
// (DESIGN §4). Its JSON form is `airlock run --json`, the HTTP API's exec
// result and the MCP run tool's structured result; schema/report.schema.json
// describes it, and a test in this package keeps the two equal.
type Report struct {
	// RunID is the run's or session's id, the run field of its audit
	// events; empty when nothing was started.
	RunID           string  `json:"run_id,omitempty"`
	ExitCode        int     `json:"exit_code"`
	Signal          *int    `json:"signal" jsonschema:"the signal that killed the program, or null"`
	HaltedBy        *string `json:"halted_by" jsonschema:"the budget that halted the run (max_wall, max_output_bytes, max_cpu, max_memory, max_pids, max_ops), or null"`
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
	Denials      []Denial     `json:"denials" jsonschema:"the distinct operations refused during the run (at most 66), each naming the grant that would allow it and counting its repeats"`
	DenialCounts DenialCounts `json:"denial_counts" jsonschema:"every denial of the run, itemized in denials or not"`
	// EgressErrors lists the granted destinations the egress proxy could
	// not reach (the name had no address, every address refused or timed
	// out, or the upstream failed after connecting: TLS, no answer), each
	// with its reason and how often: at most audit.MaxEgressErrors, in
	// the order they first happened. They are not denials: the policy
	// allowed them. EgressErrorsTotal counts them all. Empty when none.
	EgressErrors      []EgressError `json:"egress_errors,omitempty" jsonschema:"granted destinations the egress proxy could not reach, with the reason (at most 16)"`
	EgressErrorsTotal int64         `json:"egress_errors_total,omitempty" jsonschema:"every failure to reach a granted destination, itemized in egress_errors or not"`
	// Error explains exit code 125 (airlock refused or failed; nothing ran)
	// and 126/127; empty otherwise.
	Error string `json:"error,omitempty" jsonschema:"why nothing ran (exit codes 125, 126, 127)"`
	// Enforcement lists what was actually enforced on this host, and any
	// downgrade the policy accepted.
	Enforcement Enforcement `json:"enforcement"`
	// Writes says what the copy back of the staged fs_write grants did:
	// written, removed, refused (protected paths) and failed entries. Nil
	// when the run had no fs_write grant or never started, and in the
	// report of a session's exec (a session copies back when it ends).
	Writes *Writes `json:"writes,omitempty" jsonschema:"what the copy back of fs_write grants did when the run ended: refused (protected) and failed paths are listed"`
	// Operator is advice for the operator, who writes the policy: the
	// policy changes that would allow what was denied or halted. Each one
	// widens the policy, so it is never meant for the sandboxed program,
	// which may be an agent steered by an injected instruction: airlock
	// serve and airlock mcp set it to nil in what they return unless the
	// operator starts them with --agent-advice. Nil when there is none.
	Operator *Operator `json:"operator,omitempty" jsonschema:"advice for the operator who writes the policy, present only when the operator started airlock mcp with --agent-advice"`
}

// EgressError is one granted destination the egress proxy could not
// reach.
type EgressError struct {
	// Op says where it failed: resolve_failed (the name had no address),
	// dial_failed (every checked address refused or timed out) or
	// upstream_failed (connected, then TLS failed or no answer came).
	Op     string `json:"op"`
	Target string `json:"target"` // host:port as the program asked for it
	// Message is the first failure's reason (cut at 512 bytes).
	Message string `json:"message"`
	Count   int64  `json:"count"`
}

// Operator is the part of a report, or of an error, meant for the operator
// only.
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
	Suggestion string `json:"suggestion" jsonschema:"the change as text, e.g. add \"pypi.org:443\" to net_hosts"`
	// Changes is the same change as data: policy.Change values, to apply
	// with (*policy.Policy).Apply.
	Changes []Change `json:"changes"`
}

// Change is one edit of a policy file, the JSON form of policy.Change.
type Change struct {
	// Action is "add" or "remove" (an entry of a list) or "raise" (a
	// budget).
	Action string `json:"action"`
	// Key is the policy-file key: a list (fs_read, fs_write, fs_deny,
	// fs_protect, fs_unprotect, net_hosts, allowed_tools, env,
	// allow_downgrade) or a budget limit (max_wall, max_ops, ...).
	Key string `json:"key"`
	// Value is the list entry, or the new budget in policy-file syntax
	// ("1m", "2MiB", "2000").
	Value string `json:"value"`
}

// Usage is what a run, an exec or a session consumed.
type Usage struct {
	CPUMS          int64 `json:"cpu_ms"`
	MaxMemoryBytes int64 `json:"max_memory_bytes"`
	Ops            int64 `json:"ops"`
	OutputBytes    int64 `json:"output_bytes"`
	// WriteBytes is what the run added to its fs_write grants (max_write).
	WriteBytes int64 `json:"write_bytes"`
}

// Denial is one refused operation, naming the grant that would allow it.
// In a report, denials with the same layer, op, target and rule are one
// Denial with a Count; the message is the first one's. Target, Message and
// Hint are cut at audit.MaxTargetBytes, MaxMessageBytes and
// MaxSuggestionBytes with a marker such as "…[+2048 bytes]". The policy
// change that would allow it is not here but in Report.Operator (or
// Error.Operator), which is the operator's.
type Denial struct {
	Layer   string `json:"layer" jsonschema:"fs, net, exec, budget, tool or kernel"`
	Op      string `json:"op"`
	Target  string `json:"target"`
	Rule    string `json:"rule" jsonschema:"the grant or budget: fs_read, fs_write, net_hosts, allowed_tools, max_ops ..."`
	Message string `json:"message"`
	// Hint says what the program can do instead within its grants (use
	// the real path, run the file through its interpreter); it never
	// widens the policy. Empty when there is nothing to add.
	Hint string `json:"hint,omitempty" jsonschema:"what can be done instead within the grants"`
	// Count is how many times it happened: at least 1 in a report and in
	// a session's pending denials, so it is always present there; 0, and
	// absent from the JSON, in the denial of a single refused request
	// (Error.Denial, an MCP tool's denied).
	Count int64 `json:"count,omitempty" jsonschema:"in a report: how many times it happened"`
}

// DenialCounts counts every denial of a run, itemized in Denials or not.
type DenialCounts struct {
	Total int64 `json:"total"`
	// ByLayer splits Total by layer (fs, net, exec, budget, kernel, tool);
	// layers without denials are absent. Nil is sent as {}.
	ByLayer map[string]int64 `json:"by_layer" jsonschema:"total split by layer"`
	// Dropped is how many of Total are not itemized in Denials because it
	// already held the most distinct denials a report keeps.
	Dropped int64 `json:"dropped" jsonschema:"denials counted in total but not itemized, because denials was full"`
}

// MarshalJSON writes ByLayer as an object even when it is nil.
func (c DenialCounts) MarshalJSON() ([]byte, error) {
	type plain DenialCounts // without this method
	if c.ByLayer == nil {
		c.ByLayer = map[string]int64{}
	}
	return json.Marshal(plain(c))
}

// Enforcement says which layers held during the run.
type Enforcement struct {
	// Backend is the isolation that ran the sandbox: "namespaces"
	// (airlock's own init), "landlock" (the same init without namespaces:
	// Landlock, seccomp and the connect broker), "oci/runc" or "oci/crun".
	// Empty when nothing was started.
	Backend string `json:"backend,omitempty"`
	// Platform is how gVisor's sentry runs the workload under oci/runsc:
	// "gvisor/systrap", "gvisor/ptrace" or "gvisor/kvm"; under microvm,
	// the VMM and its accelerator: "qemu-microvm/tcg". Empty otherwise.
	Platform string `json:"platform,omitempty"`
	// GuestKernel is the guest kernel's release (uname -r) under the
	// microvm backend, whose Platform is "qemu-microvm/ACCELERATOR".
	GuestKernel string `json:"guest_kernel,omitempty"`
	Namespaces  bool   `json:"namespaces"`
	// Landlock is the Landlock ABI enforced; 0 means not enforced (only
	// with allow_downgrade: landlock).
	Landlock int  `json:"landlock_abi"`
	Seccomp  bool `json:"seccomp"`
	// Cgroup is "v1", "v2", "hybrid", or "" when no cgroup was used.
	Cgroup     string   `json:"cgroup,omitempty"`
	Downgrades []string `json:"downgrades,omitempty"`
	// Weaker says, for each downgrade taken, what the sandbox then does
	// not stop or hide, in a sentence.
	Weaker []string `json:"weaker,omitempty"`
	// FSDenials says whether filesystem denials can be reported on this
	// host.
	FSDenials string `json:"fs_denials"`
	// Egress is how the sandbox reaches granted hosts: "proxy" (through
	// airlock's proxy, by the proxy variables) or "proxy+transparent"
	// (also any TCP connect by name or granted address, through airlock's
	// DNS and connect broker). Empty when net_hosts grants nothing.
	Egress string `json:"egress,omitempty"`
	// Rootfs is the environment the sandbox ran in: the folder whose
	// system base and tools stood in for the host's (the policy's
	// rootfs). Empty for the host's own.
	Rootfs string `json:"rootfs,omitempty"`
	// RootfsDigest is the image's digest when Rootfs is an image (an OCI
	// layout or archive, a Docker archive), unpacked and checked by it.
	RootfsDigest string `json:"rootfs_digest,omitempty"`
}

// Writes is what the copy back of a run's staged fs_write grants did
// (internal/writeback makes it).
type Writes struct {
	// Complete is true when every change on the stage reached the host or
	// was refused by a rule; false when an error left part of it undone
	// (the host grant may then hold some of the changes and not others).
	Complete bool `json:"complete"`

	Files    int   `json:"files"`    // regular files written
	Bytes    int64 `json:"bytes"`    // bytes written to them
	Dirs     int   `json:"dirs"`     // folders created
	Symlinks int   `json:"symlinks"` // symlinks written
	Removed  int   `json:"removed"`  // entries removed (deleted inside the sandbox)
	// ModesDropped counts files and folders whose setuid, setgid or sticky
	// bit was dropped.
	ModesDropped int `json:"modes_dropped,omitempty"`

	Refused      []WriteEntry `json:"refused,omitempty"` // changes a rule kept off the host
	RefusedTotal int          `json:"refused_total,omitempty"`
	Failed       []WriteEntry `json:"failed,omitempty"` // changes an error kept off the host
	FailedTotal  int          `json:"failed_total,omitempty"`
	// Moved lists grants whose host path no longer led, at the end, to the
	// folder granted at the start (renamed or replaced on the host); their
	// writes went to the folder granted, wherever it is now.
	Moved []string `json:"moved,omitempty"`
}

// WriteEntry is one path the copy back refused or failed on.
type WriteEntry struct {
	Path   string `json:"path"`   // canonical host path
	Reason string `json:"reason"` // the rule or error
}
