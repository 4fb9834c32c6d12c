package sandbox

import "github.com/airlock-sandbox/airlock/api"

// ExecRequest is one command to run inside a live Session (api.ExecRequest,
// which server and mcp pass through unchanged).
type ExecRequest = api.ExecRequest

// SessionInfo describes a live session (api.SessionInfo; IdleDeadline is
// the API server's and stays zero here).
type SessionInfo = api.SessionInfo

// ErrSessionClosed is returned by Exec after the session ended. It is
// api.ErrSessionClosed, which the HTTP and MCP servers match.
var ErrSessionClosed = api.ErrSessionClosed
