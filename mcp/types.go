package mcp

import (
	"time"

	"github.com/airlock-sandbox/airlock/api"
)

// The tool names, as the model sees them.
const (
	ToolRun         = "run"
	ToolReadFile    = "read_file"
	ToolWriteFile   = "write_file"
	ToolListFiles   = "list_files"
	ToolSessionInfo = "session_info"
	ToolExtend      = "extend_session"
)

// RunInput is the arguments of run: exactly one of Command or Code.
type RunInput struct {
	Command        []string `json:"command,omitempty" jsonschema:"the command line to run, e.g. [\"python3\", \"job.py\"]; command[0] must be in allowed_tools; give this or code"`
	Code           string   `json:"code,omitempty" jsonschema:"source code to run instead of a command; needs language"`
	Language       string   `json:"language,omitempty" jsonschema:"the language of code: python, sh or bash; its interpreter must be in allowed_tools"`
	Stdin          string   `json:"stdin,omitempty" jsonschema:"text given to the program on standard input; empty means none"`
	PTY            bool     `json:"pty,omitempty" jsonschema:"run the program on a pseudo-terminal (it sees a terminal; stdout and stderr arrive merged in stdout); default false"`
	TimeoutSeconds float64  `json:"timeout_seconds,omitempty" jsonschema:"stop the program after this many seconds (it is reported with halted_by max_wall); 0 means max_wall, which also caps it"`
}

// RunOutput is the structured result of run: the report of DESIGN §4, and
// Denied when the command was refused before anything started (the report
// then has exit code 127 and the same denial in denials).
type RunOutput struct {
	api.Report
	Denied *api.Denial `json:"denied,omitempty" jsonschema:"set when the command was refused before it started"`
}

// ReadFileInput is the arguments of read_file.
type ReadFileInput struct {
	Path string `json:"path" jsonschema:"the file to read: absolute, or relative to the workspace"`
}

// ReadFileOutput is the result of read_file: the content, or Denied.
type ReadFileOutput struct {
	Path     string        `json:"path,omitempty" jsonschema:"the path as given"`
	Content  string        `json:"content,omitempty" jsonschema:"the file's content; base64 when encoding says so"`
	Encoding string        `json:"encoding,omitempty" jsonschema:"base64 when the file is not UTF-8 text, else absent"`
	Size     int           `json:"size,omitempty" jsonschema:"the file's size in bytes"`
	Denied   *api.Denial   `json:"denied,omitempty" jsonschema:"set when the read was refused"`
	Operator *api.Operator `json:"operator,omitempty" jsonschema:"advice for the operator, present only with --agent-advice"`
}

// WriteFileInput is the arguments of write_file.
type WriteFileInput struct {
	Path     string `json:"path" jsonschema:"the file to create or replace: absolute, or relative to the workspace; it must be inside fs_write"`
	Content  string `json:"content" jsonschema:"the new content"`
	Encoding string `json:"encoding,omitempty" jsonschema:"base64 when content is base64-encoded bytes; absent for text"`
}

// WriteFileOutput is the result of write_file.
type WriteFileOutput struct {
	Path     string        `json:"path,omitempty" jsonschema:"the path as given"`
	Bytes    int           `json:"bytes,omitempty" jsonschema:"bytes written"`
	Denied   *api.Denial   `json:"denied,omitempty" jsonschema:"set when the write was refused"`
	Operator *api.Operator `json:"operator,omitempty" jsonschema:"advice for the operator, present only with --agent-advice"`
}

// ListFilesInput is the arguments of list_files.
type ListFilesInput struct {
	Path string `json:"path,omitempty" jsonschema:"the directory to list: absolute, or relative to the workspace; empty means the workspace"`
}

// FileEntry is one directory entry. Symlinks are listed as themselves.
type FileEntry struct {
	Name    string `json:"name"`
	Dir     bool   `json:"dir,omitempty"`
	Size    int64  `json:"size"`
	Mode    string `json:"mode" jsonschema:"type and permission bits, e.g. -rw-r--r--"`
	Escaped bool   `json:"escaped,omitempty" jsonschema:"the name has characters that are not printable UTF-8 and is shown escaped (\\x1b, \\u202e, \\xff); the file tools cannot name it"`
}

// ListFilesOutput is the result of list_files.
type ListFilesOutput struct {
	Path    string      `json:"path,omitempty" jsonschema:"the directory listed"`
	Entries []FileEntry `json:"entries,omitempty" jsonschema:"the entries, sorted by name"`
	// Truncated is set when the directory holds more than MaxListEntries.
	Truncated bool          `json:"truncated,omitempty" jsonschema:"the directory has more entries than a listing holds (1000); these are some of them"`
	Denied    *api.Denial   `json:"denied,omitempty" jsonschema:"set when the listing was refused"`
	Operator  *api.Operator `json:"operator,omitempty" jsonschema:"advice for the operator, present only with --agent-advice"`
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
	Deadline     *time.Time `json:"deadline,omitempty" jsonschema:"when the session ends unless extended (extend_session)"`
	MaxDeadline  *time.Time `json:"max_deadline,omitempty" jsonschema:"the latest end extend_session can give the session"`
	Downgrades   []string   `json:"allow_downgrade,omitempty" jsonschema:"layers the policy accepts running without"`
}

// BudgetInfo is the policy's budget as written in a policy file.
type BudgetInfo struct {
	MaxWall        string `json:"max_wall" jsonschema:"each run's deadline; a run may set a shorter timeout_seconds"`
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
	SecondsLeft float64 `json:"seconds_left" jsonschema:"until the session's end, unless extended"`
	HaltedBy    string  `json:"halted_by,omitempty" jsonschema:"the budget that ended the session, if any"`
}

// ExtendInput is the arguments of extend_session.
type ExtendInput struct {
	By string `json:"by" jsonschema:"how much longer the session lives, past its current end: a duration such as 30m or 2h; never beyond its max_deadline"`
}

// ExtendOutput is the result of extend_session.
type ExtendOutput struct {
	Deadline    time.Time `json:"deadline" jsonschema:"when the session now ends"`
	MaxDeadline time.Time `json:"max_deadline" jsonschema:"the latest end an extension can give it"`
}
