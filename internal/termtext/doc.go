// Package termtext makes text that airlock does not control safe to put
// in front of a person: a path, host name, tool name or message that came
// from the sandbox, a policy file or the host, printed on the operator's
// terminal or in a log line.
//
// The attack it stops is terminal injection. Sandboxed code chooses the
// bytes of the host names it asks the proxy for and of the files it
// touches; printed raw, ESC, CR and LF erase airlock's genuine denial and
// print a forged verdict in its place, OSC sequences retitle the window
// or write the clipboard, and bidi overrides make a path read backwards.
// Escape keeps only what a terminal prints as itself (an allow-list:
// printable ASCII, and printable Unicode that is not a format or
// default-ignorable character); everything else becomes a visible escape
// such as \x1b, \u202e or \xff. Every result is bounded, with a marker
// that says how much was cut.
//
// JSON is valid as encoding/json writes it, but a terminal still acts on
// the C1 controls (U+0080–U+009F) and DEL that it leaves raw; AppendJSON
// and NewJSONWriter write those, and every other character Printable
// refuses, as \u escapes, so the decoded value stays the same.
//
// It imports only the standard library.
package termtext
