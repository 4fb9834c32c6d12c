// Package server is airlock's HTTP API: long-lived sessions (one policy, one
// workspace, one sandbox each), exec inside them with stdout and stderr
// streamed as NDJSON, and files uploaded, downloaded, listed and deleted
// through the session's in-process guard. `airlock serve` runs it.
//
// Every request but GET /v1/health and GET /v1/openapi.yaml needs a bearer
// token, compared in constant time; sessions belong to the token that made
// them and are invisible to every other token. Each token may hold a bounded
// number of sessions, each session runs a bounded number of execs, request
// bodies are capped before they are read, and every error is a JSON object
// {"error":{"code","message"}} that carries only public text: host details
// and internal errors go to the log.
//
// The server runs outside every sandbox's cgroup, so what it holds for one
// client all clients share: every request body and download is a transfer,
// bounded in count and bytes per token and in total (transfer.go), refused
// with 429 before its body is read; uploads and downloads pass through
// unlinked spool files, never memory, and an upload reaches the sandbox
// only once it has arrived whole. File paths must be printable UTF-8
// (400 bad_path otherwise), and names in listings that are not are sent
// escaped and marked.
//
// Token holders are tenants, not operators: every session policy must lie
// within the token's ceiling (Config.Ceiling, Config.TokenCeilings), and
// without one an inline policy may grant only the private workspace the
// server makes for the session. A refused policy is a 403 exceeds_ceiling
// that lists each grant beyond the ceiling, and nothing starts.
//
// It stops a caller without the token from doing anything, a token holder
// from granting itself host files, the network or the server's own
// environment variables, one caller from reaching another's sessions, path tricks ("..", absolute paths, symlinks
// inside a grant) from reaching files outside the session's grants (the
// guard resolves beneath the grant root and the refusal is a 403 with a
// structured denial), oversized, slow or numerous bodies and downloads
// from exhausting memory or starving other tenants, file names with
// control characters from reaching the host, and idle or
// abandoned sessions from living on: they end at their deadline, after the
// idle timeout, or when the server shuts down. Denials carry a hint (what
// to do within the grants); the policy change that would allow one widens
// the policy and is the operator's, so reports and 403s carry it (their
// "operator" field) only with Config.AgentAdvice.
//
// Its wire types (reports, sessions, exec bodies, errors) are package api's,
// and so is the OpenAPI document it serves. It imports api, policy/...,
// guard, audit, internal/denial and the standard library, and never
// internal/enforce (checked by deps_test.go): the sandbox is plugged in
// through Config.NewSession and the small Session interface over api
// types, which *sandbox.Session satisfies as it is.
package server
