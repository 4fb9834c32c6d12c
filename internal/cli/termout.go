package cli

import (
	"context"
	"encoding"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/airlock-sandbox/airlock/internal/termtext"
)

// What airlock prints for a person goes through here or through
// internal/termtext directly: the paths, hosts, names and messages in it
// come from the sandbox, a policy file, an API client or the host, and
// none of them may steer the terminal (see termtext).

// ErrText is err's message for a terminal, escaped and bounded: one line
// per error of a joined error (errors.Join, as policy.Parse and the flags
// return them), and a newline inside one message escaped like any other
// control, so that no line can start with text a message quotes.
func ErrText(err error) string {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var lines []string
		for _, e := range j.Unwrap() {
			lines = append(lines, ErrText(e))
		}
		return strings.Join(lines, "\n")
	}
	return termtext.Escape(err.Error(), termtext.LineMax)
}

// EscapeArgs returns a copy of the arguments of a message about to be
// printed with a format airlock wrote: errors through ErrText, strings
// through termtext.Field, other values unchanged.
func EscapeArgs(a []any) []any {
	out := make([]any, len(a))
	for i, v := range a {
		switch v := v.(type) {
		case error:
			out[i] = ErrText(v)
		case string:
			out[i] = termtext.Field(v)
		default:
			out[i] = v
		}
	}
	return out
}

// WriteJSON writes v as indented JSON followed by a newline, as
// json.Encoder does (without its HTML escapes: this is for people), with the C1 controls, DEL, bidi and other invisible
// characters that encoding/json leaves raw written as \u escapes: still
// valid JSON with the same value, but inert on a terminal.
func WriteJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(termtext.NewJSONWriter(w))
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false) // for people: "->" stays "->", not "-\u003e"
	return enc.Encode(v)
}

// NewLogger is the logger of serve, mcp and egress-proxy: text lines on w
// at level Info. slog's TextHandler quotes every key, value and message
// that holds a space, a quote, '=', a control, a format character or
// invalid UTF-8, with strconv.Quote's escapes (TestLoggerEscapes proves
// it); boundAttr adds the length bound it lacks, since an API client or
// the sandbox chooses many of the strings logged (a request path, a file
// name, a target).
func NewLogger(w io.Writer) *slog.Logger {
	l, _ := NewLoggerFormat(w, "text")
	return l
}

// NewLoggerFormat is NewLogger in format "text" or "json" (--log-format):
// one JSON object per line from slog's JSONHandler, which escapes every
// control below U+0020, written through termtext's JSON writer, which
// escapes the C1 controls, DEL and the invisible and bidi characters it
// leaves raw; strings are bounded the same way.
func NewLoggerFormat(w io.Writer, format string) (*slog.Logger, error) {
	opts := &slog.HandlerOptions{Level: slog.LevelInfo, ReplaceAttr: boundAttr}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(termtext.NewJSONWriter(w), opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: give text or json", format)
}

// boundAttr cuts a string value, the message included, to
// termtext.FieldMax bytes with a marker; any other value that prints as
// text (an error, a Stringer, a TextMarshaler) is turned into its text
// first, as TextHandler would print it, and cut the same way.
func boundAttr(_ []string, a slog.Attr) slog.Attr {
	var s string
	switch a.Value.Kind() {
	case slog.KindString:
		s = a.Value.String()
	case slog.KindAny:
		switch v := a.Value.Any().(type) {
		case error:
			s = v.Error()
		case encoding.TextMarshaler:
			b, err := v.MarshalText()
			if err != nil {
				return a // TextHandler prints the error in place of the value
			}
			s = string(b)
		case fmt.Stringer:
			s = v.String()
		case []byte:
			s = string(v)
		default:
			s = fmt.Sprintf("%+v", v)
		}
	default:
		return a // numbers, bools, times, durations: bounded by their type
	}
	a.Value = slog.StringValue(termtext.Truncate(s, termtext.FieldMax))
	return a
}

// Sayer returns how a server command (serve, mcp) prints a line of its own
// (listening, shutting down, a failure): "NAME: message" in the text
// format, and a record of log, the level and attrs included, in the json
// format, so that with --log-format json every line on stderr is JSON.
// The message is escaped for the terminal either way.
func Sayer(name, format string, w io.Writer, log *slog.Logger) func(level slog.Level, msg string, attrs ...any) {
	return func(level slog.Level, msg string, attrs ...any) {
		if format == "json" {
			log.Log(context.Background(), level, msg, attrs...)
			return
		}
		fmt.Fprintf(w, "%s: %s\n", name, termtext.Escape(msg, termtext.LineMax))
	}
}
