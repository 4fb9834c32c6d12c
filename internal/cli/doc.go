// Package cli is what the airlock and airlock-server commands share: the
// policy flags and flag sets, the exit codes, policy files read from the
// command line, the text and JSON written for a person (escaped, so that
// nothing a sandbox, a policy file or an API client chose can steer the
// operator's terminal) and the loggers. It must not import server, mcp,
// export/k8s or anything else that only airlock-server needs: airlock
// imports it, and every package linked into airlock costs every run its
// initialization (deps_test.go checks it).
package cli
