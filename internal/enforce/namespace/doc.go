// Package namespace turns the plan's namespaces into the clone(2) flags
// that create them. The sandbox supervisor clones its init with them and
// internal/doctor probes with them, so what doctor checks is what a run
// gets, and both are what the plan (and `airlock explain`, and the OCI
// export) says.
//
// It imports plan and golang.org/x/sys only; never net/http, egress,
// server or mcp. A namespace it has no flag for is an error, never left
// out: the sandbox fails closed rather than start with less isolation
// than its plan describes.
package namespace
