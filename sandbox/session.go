package sandbox

import (
	"io"
	"time"
)

// ExecRequest is one command to run inside a live Session.
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
	// (within max_output_bytes, which applies per exec).
	Stdout, Stderr io.Writer

	// PTY gives the command a pseudo-terminal as its controlling terminal
	// and stdin, stdout and stderr; output then arrives merged on Stdout.
	// False means pipes and no controlling terminal.
	PTY bool

	// Timeout bounds this exec; zero means until the session's deadline.
	// An exec that times out is killed (its process group) and reported
	// with halted_by "max_wall"; the session goes on.
	Timeout time.Duration
}

// SessionInfo describes a live session.
type SessionInfo struct {
	ID        string    `json:"id"`
	Created   time.Time `json:"created"`
	Deadline  time.Time `json:"deadline"`
	Workspace string    `json:"workspace"` // first fs_write grant, "" if none
	Usage     Usage     `json:"usage"`
	Execs     int       `json:"execs"`
	// PendingDenials are the denials since the last exec's report, such as
	// those of a background process between execs (bounded like a
	// report's); the next exec's report carries them.
	PendingDenials []Denial `json:"pending_denials"`
	// DenialCounts counts every denial since the session started.
	DenialCounts DenialCounts `json:"denial_counts"`
}
