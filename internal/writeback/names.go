package writeback

import (
	"unicode/utf8"

	"github.com/airlock-sandbox/airlock/internal/termtext"
)

// unprintable is the reason a name that printable refuses is kept off
// the host. The Result names such a path escaped (termtext.Escape).
const unprintable = "holds a control character, an invisible formatting character or bytes that are not UTF-8 (shown escaped): a terminal that lists it would act on it or show another name, and the copy back writes only names of printable characters"

// printable reports whether every character of name is one a terminal
// shows as itself (termtext.Printable): valid UTF-8, no control or format
// character. An allow-list: anything else stays off the host.
func printable(name string) bool {
	if !utf8.ValidString(name) {
		return false
	}
	for _, r := range name {
		if !termtext.Printable(r) {
			return false
		}
	}
	return true
}
