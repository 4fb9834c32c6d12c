package mcp

import (
	"time"

	"github.com/airlock-sandbox/airlock/policy"
)

// The tool names, as the model sees them.
const (
	ToolRun         = "run"
	ToolReadFile    = "read_file"
	ToolWriteFile   = "write_file"
	ToolListFiles   = "list_files"
	ToolSessionInfo = "session_info"
)

// Report is the result of one run, as in DESIGN §4 and `airlock run
// --json`. Its fields are those of sandbox.Report; Session.Exec returns it
// encoded.
type Report struct {
	ExitCode        int          `json:"exit_code"`
	Signal          *int         `json:"signal" jsonschema:"the signal that killed the program, or null"`
	HaltedBy        *string      `json:"halted_by" jsonschema:"the budget that halted the run (max_wall, max_output_bytes, max_cpu, max_memory, max_pids, max_ops), or null"`
	DurationMS      int64        `json:"duration_ms"`
	Stdout          string       `json:"stdout"`
	Stderr          string       `json:"stderr"`
	StdoutTruncated bool         `json:"stdout_truncated"`
	StderrTruncated bool         `json:"stderr_truncated"`
	Usage           Usage        `json:"usage"`
	Denials         []Denial     `json:"denials" jsonschema:"the distinct operations refused during the run (at most 66), each naming the grant that would allow it and counting its repeats"`
	DenialCounts    DenialCounts `json:"denial_counts" jsonschema:"every denial of the run, itemized in denials or not"`
	Error           string       `json:"error,omitempty" jsonschema:"why nothing ran (exit codes 125, 126, 127)"`
	Enforcement     Enforcement  `json:"enforcement"`
	Writes          *Writes      `json:"writes,omitempty" jsonschema:"what the copy back of fs_write grants did when the run ended: refused (protected) and failed paths are listed"`
	Operator        *Operator    `json:"operator,omitempty" jsonschema:"advice for the operator who writes the policy, present only when the operator started airlock mcp with --agent-advice"`
}

// Operator is advice for the operator: the policy changes that would allow
// what was denied. Each widens the policy, so the server leaves it out of
// tool results unless Config.AgentAdvice is set. Its fields are those of
// sandbox.Operator.
type Operator struct {
	Suggestions []OperatorSuggestion `json:"suggestions"`
}

// OperatorSuggestion is the policy change that would allow one denial or
// halt. Its fields are those of sandbox.OperatorSuggestion.
type OperatorSuggestion struct {
	Layer      string          `json:"layer"`
	Op         string          `json:"op,omitempty"`
	Target     string          `json:"target,omitempty"`
	Rule       string          `json:"rule"`
	Suggestion string          `json:"suggestion" jsonschema:"the change as text, e.g. add \"pypi.org:443\" to net_hosts"`
	Changes    []policy.Change `json:"changes"`
}

// Usage is what a run or session consumed.
type Usage struct {
	CPUMS          int64 `json:"cpu_ms"`
	MaxMemoryBytes int64 `json:"max_memory_bytes"`
	Ops            int64 `json:"ops"`
	OutputBytes    int64 `json:"output_bytes"`
	WriteBytes     int64 `json:"write_bytes"` // added to fs_write grants (max_write)
}

// Denial is a refused operation, naming the grant that would allow it.
type Denial struct {
	Layer   string `json:"layer" jsonschema:"fs, net, exec, budget, tool or kernel"`
	Op      string `json:"op"`
	Target  string `json:"target"`
	Rule    string `json:"rule" jsonschema:"the grant or budget: fs_read, fs_write, net_hosts, allowed_tools, max_ops ..."`
	Message string `json:"message"`
	Hint    string `json:"hint,omitempty" jsonschema:"what can be done instead within the grants"`
	Count   int64  `json:"count,omitempty" jsonschema:"in a report: how many times it happened"`

	// fix is the policy change that would allow it, for the operator.
	fix policy.Suggestion
}

// DenialCounts counts every denial of a run, itemized or not.
type DenialCounts struct {
	Total   int64            `json:"total"`
	ByLayer map[string]int64 `json:"by_layer" jsonschema:"total split by layer"`
	Dropped int64            `json:"dropped" jsonschema:"denials counted in total but not itemized, because denials was full"`
}

// Enforcement says which layers held during a run.
type Enforcement struct {
	Namespaces bool     `json:"namespaces"`
	Landlock   int      `json:"landlock_abi"`
	Seccomp    bool     `json:"seccomp"`
	Cgroup     string   `json:"cgroup,omitempty"`
	Downgrades []string `json:"downgrades,omitempty"`
	FSDenials  string   `json:"fs_denials"`
}

// RunInput is the arguments of run: exactly one of Command or Code.
type RunInput struct {
	Command        []string `json:"command,omitempty" jsonschema:"the command line to run, e.g. [\"python3\", \"job.py\"]; command[0] must be in allowed_tools; give this or code"`
	Code           string   `json:"code,omitempty" jsonschema:"source code to run instead of a command; needs language"`
	Language       string   `json:"language,omitempty" jsonschema:"the language of code: python, sh or bash; its interpreter must be in allowed_tools"`
	Stdin          string   `json:"stdin,omitempty" jsonschema:"text given to the program on standard input; empty means none"`
	TimeoutSeconds float64  `json:"timeout_seconds,omitempty" jsonschema:"stop the program after this many seconds (it is reported with halted_by max_wall); 0 means until the session's deadline"`
}

// RunOutput is the structured result of run: the report of DESIGN §4, and
// Denied when the command was refused before anything started (the report
// then has exit code 127 and the same denial in denials).
type RunOutput struct {
	Report
	Denied *Denial `json:"denied,omitempty" jsonschema:"set when the command was refused before it started"`
}

// ReadFileInput is the arguments of read_file.
type ReadFileInput struct {
	Path string `json:"path" jsonschema:"the file to read: absolute, or relative to the workspace"`
}

// ReadFileOutput is the result of read_file: the content, or Denied.
type ReadFileOutput struct {
	Path     string    `json:"path,omitempty" jsonschema:"the path as given"`
	Content  string    `json:"content,omitempty" jsonschema:"the file's content; base64 when encoding says so"`
	Encoding string    `json:"encoding,omitempty" jsonschema:"base64 when the file is not UTF-8 text, else absent"`
	Size     int       `json:"size,omitempty" jsonschema:"the file's size in bytes"`
	Denied   *Denial   `json:"denied,omitempty" jsonschema:"set when the read was refused"`
	Operator *Operator `json:"operator,omitempty" jsonschema:"advice for the operator, present only with --agent-advice"`
}

// WriteFileInput is the arguments of write_file.
type WriteFileInput struct {
	Path     string `json:"path" jsonschema:"the file to create or replace: absolute, or relative to the workspace; it must be inside fs_write"`
	Content  string `json:"content" jsonschema:"the new content"`
	Encoding string `json:"encoding,omitempty" jsonschema:"base64 when content is base64-encoded bytes; absent for text"`
}

// WriteFileOutput is the result of write_file.
type WriteFileOutput struct {
	Path     string    `json:"path,omitempty" jsonschema:"the path as given"`
	Bytes    int       `json:"bytes,omitempty" jsonschema:"bytes written"`
	Denied   *Denial   `json:"denied,omitempty" jsonschema:"set when the write was refused"`
	Operator *Operator `json:"operator,omitempty" jsonschema:"advice for the operator, present only with --agent-advice"`
}

// ListFilesInput is the arguments of list_files.
type ListFilesInput struct {
	Path string `json:"path,omitempty" jsonschema:"the directory to list: absolute, or relative to the workspace; empty means the workspace"`
}

// FileEntry is one directory entry. Symlinks are listed as themselves.
type FileEntry struct {
	Name string `json:"name"`
	Dir  bool   `json:"dir,omitempty"`
	Size int64  `json:"size"`
	Mode string `json:"mode" jsonschema:"type and permission bits, e.g. -rw-r--r--"`
}

// ListFilesOutput is the result of list_files.
type ListFilesOutput struct {
	Path     string      `json:"path,omitempty" jsonschema:"the directory listed"`
	Entries  []FileEntry `json:"entries,omitempty" jsonschema:"the entries, sorted by name"`
	Denied   *Denial     `json:"denied,omitempty" jsonschema:"set when the listing was refused"`
	Operator *Operator   `json:"operator,omitempty" jsonschema:"advice for the operator, present only with --agent-advice"`
}

// SessionInfoInput is the (empty) arguments of session_info.
type SessionInfoInput struct{}

// SessionInfoOutput is what the policy grants and what has been used.
type SessionInfoOutput struct {
	Started      bool       `json:"started" jsonschema:"whether this MCP session's sandbox is running; it starts at the first other tool call"`
	ID           string     `json:"id,omitempty" jsonschema:"the sandbox session's id"`
	Workspace    string     `json:"workspace,omitempty" jsonschema:"the working directory of run and base of relative paths (the first fs_write grant)"`
	FSRead       []string   `json:"fs_read" jsonschema:"paths that may be read"`
	FSWrite      []string   `json:"fs_write" jsonschema:"paths that may be read and written"`
	NetHosts     []string   `json:"net_hosts" jsonschema:"hosts reachable through the proxy; nothing else is"`
	AllowedTools []string   `json:"allowed_tools" jsonschema:"executables that run may start"`
	Languages    []string   `json:"languages" jsonschema:"values of language that run accepts with this policy"`
	Env          []string   `json:"env" jsonschema:"environment variables set or passed in"`
	Budget       BudgetInfo `json:"budget"`
	Usage        *UsageInfo `json:"usage,omitempty" jsonschema:"what the session has used; absent before it started"`
	Deadline     *time.Time `json:"deadline,omitempty" jsonschema:"when the session ends (max_wall from its start)"`
	Downgrades   []string   `json:"allow_downgrade,omitempty" jsonschema:"layers the policy accepts running without"`
}

// BudgetInfo is the policy's budget as written in a policy file.
type BudgetInfo struct {
	MaxWall        string `json:"max_wall" jsonschema:"the session's lifetime; each run may also set timeout_seconds"`
	MaxOutputBytes string `json:"max_output_bytes" jsonschema:"stdout+stderr kept per run; beyond it the run is halted"`
	MaxOps         int64  `json:"max_ops" jsonschema:"tool calls, execs and egress requests for the whole session"`
	MaxMemory      string `json:"max_memory"`
	MaxCPU         string `json:"max_cpu"`
	MaxPids        int64  `json:"max_pids"`
	MaxScratch     string `json:"max_scratch" jsonschema:"size of /tmp"`
	MaxWrite       string `json:"max_write" jsonschema:"bytes the session may add to its fs_write grants; they reach the host when the session ends"`
}

// UsageInfo is what a session has used so far.
type UsageInfo struct {
	Ops         int64   `json:"ops"`
	OpsLeft     int64   `json:"ops_left"`
	OutputBytes int64   `json:"output_bytes"`
	CPUMS       int64   `json:"cpu_ms"`
	Execs       int     `json:"execs"`
	SecondsLeft float64 `json:"seconds_left"`
	HaltedBy    string  `json:"halted_by,omitempty" jsonschema:"the budget that ended the session, if any"`
}

// Writes is what the copy back of a run's staged fs_write grants did.
type Writes struct {
	Complete     bool         `json:"complete"`
	Files        int          `json:"files"`
	Bytes        int64        `json:"bytes"`
	Dirs         int          `json:"dirs"`
	Symlinks     int          `json:"symlinks"`
	Removed      int          `json:"removed"`
	ModesDropped int          `json:"modes_dropped,omitempty"`
	Refused      []WriteEntry `json:"refused,omitempty"`
	RefusedTotal int          `json:"refused_total,omitempty"`
	Failed       []WriteEntry `json:"failed,omitempty"`
	FailedTotal  int          `json:"failed_total,omitempty"`
	Moved        []string     `json:"moved,omitempty"`
}

// WriteEntry is one path the copy back refused or failed on.
type WriteEntry struct {
	Path   string `json:"path"`
	Reason string `json:"reason"`
}
