// Package api holds airlock's wire types, defined once: the report of a
// run or exec (DESIGN §4, `airlock run --json`), the session as the HTTP
// API shows it, the exec request in its Go form and its JSON form, and the
// public error body of the HTTP API. The sandbox produces these values; the
// HTTP server, the MCP server and the Go client send and decode the same
// types, so a new report field is one change here, not one per front end.
// It also embeds the OpenAPI document (openapi.yaml) that the server serves.
//
// It imports the standard library only (checked by deps_test.go): a program
// that decodes airlock's answers must not link the sandbox, its enforcement
// code or the policy parser. The jsonschema struct tags describe fields for
// the MCP tools' output schemas; they are plain struct tags.
//
// The types carry data, never a decision: the field that holds the
// operator's advice (Report.Operator, Error.Operator) is documented as such,
// and the servers remove it before a value reaches a client that must not
// see it. Every string in a report that the sandboxed program chose (paths,
// hosts, output) is bounded where it is made, not here.
package api
