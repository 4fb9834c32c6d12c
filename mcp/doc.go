// Package mcp serves airlock to AI agents over the Model Context Protocol,
// built on the official Go SDK (github.com/modelcontextprotocol/go-sdk). It
// offers six tools: run (a command or a snippet of Python or shell code),
// read_file, write_file, list_files and session_info, which tells the model
// up front what the policy grants and how much budget is left.
//
// Each MCP client session gets one sandbox session (Config.NewSession),
// created with the configured policy at the session's first tool call and
// closed when the transport ends: over stdio that is one sandbox per process, over
// streamable HTTP one per client session. Commands run inside the session's
// kernel sandbox; file tools go through the session's guard, so both share
// one max_ops budget and one deadline.
//
// What comes back to the model is data, never a crash: a refused operation
// is a tool result with IsError set and a structured denial (layer, op,
// target, rule, message, hint) naming the grant involved and what can be
// done within the grants; a command's result is the report of DESIGN §4.
// Host details that are not the agent's business (why a session could not
// start) go to the log only. The policy change that would allow a denial
// (a report's operator field) widens the policy and is the operator's: it
// goes to the audit log, and reaches the model only with
// Config.AgentAdvice.
//
// It stops an agent that follows injected instructions from reaching
// anything the policy does not grant through the tools: paths outside
// fs_read/fs_write (including ".." and symlink escapes, checked by the
// guard), executables outside allowed_tools, hosts outside net_hosts, runs
// past the budget, and, over HTTP, callers without the bearer token; and
// from being told which grants to ask its operator for.
//
// Over HTTP (http.go), each token is a tenant: an MCP session belongs to
// the token that created it, and another token presenting its
// Mcp-Session-Id gets the answer of an unknown id, so it can neither use
// the session's sandbox nor learn that the id exists; the id never reaches
// the log (a short hash of it does). A token holds a bounded number of MCP
// sessions and sandboxes (an even share of Config.MaxSessions by default),
// and a bounded number of its request bodies are read at once, so one
// token can take neither every sandbox slot nor the server's memory.
//
// Reports, denials and the operator's advice are package api's types, and
// a refusal becomes a denial in internal/denial, as in the HTTP API. It
// imports api, guard, policy/..., audit, internal/denial, internal/httpauth,
// internal/inflight, internal/termtext and the MCP SDK,
// and it is the only package that imports the SDK. It never imports
// internal/enforce (deps_test.go checks this): cmd/airlock-server plugs
// *sandbox.Session in, as it is, through the small Session interface over
// api types.
package mcp
