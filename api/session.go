package api

import (
	"errors"
	"io"
	"time"
)

// ErrSessionClosed is matched (errors.Is) by the error a session's Exec
// returns once the session has ended. sandbox.ErrSessionClosed is this
// value, so the HTTP and MCP servers recognize it without importing the
// sandbox.
var ErrSessionClosed = errors.New("api: session closed")

// SessionInfo describes a live session: the JSON of GET
// /v1/sessions/{id}, and what sandbox.Session.Info returns.
type SessionInfo struct {
	ID      string    `json:"id"`
	Created time.Time `json:"created"`
	// Deadline is when the session's lifetime ends it, unless extended.
	Deadline time.Time `json:"deadline"`
	// MaxDeadline is the latest end an extension can give it.
	MaxDeadline time.Time `json:"max_deadline"`
	// ExecWall is each exec's deadline (the policy's max_wall), a Go
	// duration such as "30s".
	ExecWall string `json:"exec_wall"`
	// IdleDeadline is when the API server's idle timeout ends the session
	// unless a request uses it. Only the server sets it; it is zero in
	// what sandbox.Session.Info returns.
	IdleDeadline time.Time `json:"idle_deadline"`
	Workspace    string    `json:"workspace"` // first fs_write grant, "" if none
	Execs        int       `json:"execs"`     // execs run so far
	Usage        Usage     `json:"usage"`     // what the session has consumed so far
	// PendingDenials are the denials since the last exec's report, such as
	// those of a background process between execs (bounded like a
	// report's); the next exec's report carries them. The server sends
	// nil as [].
	PendingDenials []Denial `json:"pending_denials"`
	// DenialCounts counts every denial since the session started.
	DenialCounts DenialCounts `json:"denial_counts"`
}

// ExecRequest is one command to run inside a live session, in its Go form:
// what sandbox.Session.Exec takes. ExecBody is its JSON form in the HTTP
// API.
type ExecRequest struct {
	// Args is the command line. Args[0] must be in the policy's
	// allowed_tools (a bare name or an absolute path); sessions never
	// grant the command implicitly.
	Args []string

	// Dir is the working directory inside the sandbox. Empty means the
	// session's workspace (the first fs_write grant), else /tmp.
	Dir string

	// Env adds NAME=value pairs for this exec only, on top of the
	// policy's environment. Names the policy controls (PATH, proxy
	// variables) cannot be changed. Nil adds nothing.
	Env []string

	// Stdin is the command's standard input. Nil means /dev/null.
	Stdin io.Reader

	// Stdout and Stderr, when set, receive output as it is produced
	// (within max_output_bytes, which applies per exec). Nil keeps the
	// output for the report only.
	Stdout, Stderr io.Writer

	// PTY gives the command a pseudo-terminal as its controlling terminal
	// and stdin, stdout and stderr; output then arrives merged on Stdout.
	// False means pipes and no controlling terminal.
	PTY bool

	// Timeout bounds this exec; zero means max_wall, which also caps it.
	// An exec that times out is killed (its process group) and reported
	// with halted_by "max_wall"; the session goes on.
	Timeout time.Duration
}

// ExecBody is the JSON body of POST /v1/sessions/{id}/exec: ExecRequest as
// it travels.
type ExecBody struct {
	Args  []string `json:"args"`            // the command line; required
	Dir   string   `json:"dir,omitempty"`   // "" means the workspace, else /tmp
	Env   []string `json:"env,omitempty"`   // NAME=value pairs added for this exec
	Stdin string   `json:"stdin,omitempty"` // "" means none
	// PTY runs the command on a pseudo-terminal (ExecRequest.PTY): its
	// output then arrives merged, as stdout.
	PTY bool `json:"pty,omitempty"`
	// Timeout is a Go duration such as "30s"; "" means max_wall, which
	// also caps it.
	Timeout string `json:"timeout,omitempty"`
}

// ExecResult is the answer to POST /v1/sessions/{id}/exec without
// streaming.
type ExecResult struct {
	Report *Report `json:"report"`
}

// Event is one NDJSON line of a streamed exec (POST .../exec?stream=1):
// {"stream":"stdout","data":"..."} for each chunk of output as it is
// produced, then one line {"report":{...}} or {"error":{...}}. Exactly one
// of Stream, Report and Error is set; Data is never empty when Stream is
// set.
type Event struct {
	Stream string  `json:"stream,omitempty"` // "stdout" or "stderr"
	Data   string  `json:"data,omitempty"`   // the chunk, whole UTF-8 characters
	Report *Report `json:"report,omitempty"`
	Error  *Error  `json:"error,omitempty"`
}

// Entry is one directory entry of GET /v1/sessions/{id}/files.
type Entry struct {
	Name string `json:"name"`
	Type string `json:"type"` // "file", "dir", "symlink" or "other"
	Size int64  `json:"size"`
	Mode string `json:"mode"` // permission bits in octal, e.g. "0644"
	// Escaped is true when the name has characters that are not printable
	// UTF-8 (control or format characters, bytes that are not UTF-8):
	// Name then shows it escaped (\x1b, \u202e, \xff), and the file
	// cannot be named through the API; rename or remove it from inside
	// the sandbox.
	Escaped bool `json:"escaped,omitempty"`
}
