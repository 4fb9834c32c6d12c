//go:build linux

package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/audit"
	"github.com/airlock-sandbox/airlock/internal/termtext"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// hostile is what a sandbox, an API client or a hostile file name can put
// in a string airlock prints: every kind of control a terminal acts on,
// bidi and invisible characters, and invalid UTF-8.
const hostile = "\x1b[2K\r\n" + forged + "\n\x1b]0;pwned\x07\x1b]52;c;cHduZWQ=\x07\u009b31m\u202e\u2066\u200b\u2028\ufeff\x7f\x08\t\xff\xc3"

// TestLoggerEscapes proves that slog's TextHandler, as airlock's loggers
// use it, escapes controls, format characters and invalid UTF-8 in
// messages, keys, values, group names and errors, so one record stays one
// plain line; and that newLogger bounds every string.
func TestLoggerEscapes(t *testing.T) {
	handlers := []struct {
		name string
		new  func(*bytes.Buffer) *slog.Logger
	}{
		{"TextHandler", func(b *bytes.Buffer) *slog.Logger { return slog.New(slog.NewTextHandler(b, nil)) }},
		{"newLogger", func(b *bytes.Buffer) *slog.Logger { return newLogger(b) }},
		{"newLoggerJSON", func(b *bytes.Buffer) *slog.Logger { l, _ := newLoggerFormat(b, "json"); return l }},
	}
	records := []struct {
		name string
		log  func(*slog.Logger)
	}{
		{"message", func(l *slog.Logger) { l.Info(hostile) }},
		{"value", func(l *slog.Logger) { l.Info("file op refused", "path", hostile) }},
		{"key", func(l *slog.Logger) { l.Info("m", hostile, 1) }},
		{"group", func(l *slog.Logger) { l.WithGroup(hostile).Info("m", "k", "v") }},
		{"error", func(l *slog.Logger) { l.Error("exec refused", "err", errors.New(hostile)) }},
		{"bytes", func(l *slog.Logger) { l.Info("m", "b", []byte(hostile)) }},
		{"stringer", func(l *slog.Logger) { l.Info("m", "s", stringer(hostile)) }},
		{"with-attrs", func(l *slog.Logger) { l.With("target", hostile).Info("m") }},
	}
	for _, h := range handlers {
		for _, r := range records {
			t.Run(h.name+"/"+r.name, func(t *testing.T) {
				var b bytes.Buffer
				r.log(h.new(&b))
				out := b.String()
				if strings.Count(out, "\n") != 1 || !strings.HasSuffix(out, "\n") {
					t.Errorf("one record is not one line: %q", out)
				}
				checkNoControls(t, strings.TrimSuffix(out, "\n"))
				if strings.Contains(out, "\t") {
					t.Errorf("a TAB was left raw: %q", out)
				}
			})
		}
	}
	t.Run("newLogger-bounds", func(t *testing.T) {
		var b bytes.Buffer
		long := strings.Repeat("/a", 1<<20)
		newLogger(&b).Info(long, "path", long, "err", errors.New(long), "any", struct{ S string }{long})
		// Four strings of at most FieldMax bytes plus markers, quoted.
		if max := 4*(termtext.FieldMax+termtext.MarkerMax) + 200; b.Len() > max {
			t.Errorf("a record of 4 MiB strings logged %d bytes, want at most %d", b.Len(), max)
		}
		if !strings.Contains(b.String(), "…[+") {
			t.Errorf("no cut marker in %q", b.String()[:200])
		}
	})
}

type stringer string

func (s stringer) String() string { return string(s) }

// TestWriteJSONSameValue: the report airlock prints with --json decodes to
// the same value as the one encoding/json writes, while C1 controls, DEL
// and the bidi, invisible and separator characters are written escaped.
func TestWriteJSONSameValue(t *testing.T) {
	rep := &sandbox.Report{ExitCode: 0, Stdout: hostile, Denials: []sandbox.Denial{
		{Layer: "net", Op: "connect", Target: "[" + hostile + "]:443", Rule: "net_hosts", Message: hostile},
	}}
	var got bytes.Buffer
	if err := writeJSON(&got, rep); err != nil {
		t.Fatal(err)
	}
	checkNoControls(t, got.String())
	// The reference: what encoding/json alone writes, decoded the same way
	// (invalid UTF-8 decodes to U+FFFD in both).
	ref, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	var want, back sandbox.Report
	if err := json.Unmarshal(ref, &want); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(got.Bytes(), &back); err != nil {
		t.Fatalf("writeJSON wrote invalid JSON: %v\n%s", err, got.Bytes())
	}
	if !reflect.DeepEqual(back, want) {
		t.Errorf("the decoded report differs:\n got %#v\nwant %#v", back, want)
	}
	if !bytes.Contains(got.Bytes(), []byte(`\u009b31m\u202e\u2066\u200b\u2028\ufeff\u007f`)) {
		t.Errorf("C1, bidi, invisible and DEL characters are not written as \\u escapes:\n%s", got.Bytes())
	}
}

// TestSummaryHostileFields feeds the summary a report whose every field
// is hostile, as a sandbox that controls targets and messages could make
// it: each line stays one line with airlock's prefix, plain or coloured.
func TestSummaryHostileFields(t *testing.T) {
	rep := &sandbox.Report{ExitCode: 124, HaltedBy: ptr(hostile), DurationMS: 5,
		Denials: []sandbox.Denial{{Layer: hostile, Op: hostile, Target: hostile, Rule: hostile, Message: hostile, Hint: hostile}},
		Error:   hostile, Enforcement: sandbox.Enforcement{Downgrades: []string{hostile, hostile}},
		Operator: &sandbox.Operator{Suggestions: []sandbox.OperatorSuggestion{{Layer: hostile, Op: hostile, Target: hostile, Rule: hostile, Suggestion: hostile}}}}
	halt := &audit.Event{Kind: audit.Halt, Message: hostile, Suggestion: hostile, Hint: hostile}
	for _, color := range []bool{false, true} {
		t.Run(fmt.Sprintf("color=%v", color), func(t *testing.T) {
			var b bytes.Buffer
			summary{rep: rep, halt: halt, color: color}.write(&b)
			out := b.String()
			if color {
				for _, sgr := range []string{sgrRed, sgrYellow, sgrCyan, sgrReset} {
					out = strings.ReplaceAll(out, sgr, "")
				}
			}
			checkNoControls(t, out)
			lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
			if len(lines) != 4 {
				t.Errorf("summary has %d lines, want 4 (denial, halt, downgrade, error):\n%s", len(lines), out)
			}
			for _, l := range lines {
				if !strings.HasPrefix(l, "airlock: ") || strings.HasPrefix(l, forged) {
					t.Errorf("summary line %q does not start with airlock's own prefix", l)
				}
			}
		})
	}
}

// TestSummaryBounds: a sandbox decides how many denials and how long a
// target it makes; the summary prints at most maxSummaryDenials lines of
// bounded length and says how many it left out.
func TestSummaryBounds(t *testing.T) {
	rep := &sandbox.Report{ExitCode: 0}
	long := strings.Repeat("x", 4*termtext.FieldMax)
	for i := range 10 * maxSummaryDenials {
		rep.Denials = append(rep.Denials, sandbox.Denial{Op: "connect", Target: fmt.Sprint(i, long), Rule: "net_hosts", Message: long})
	}
	var b bytes.Buffer
	summary{rep: rep}.write(&b)
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	if len(lines) != maxSummaryDenials+1 {
		t.Fatalf("summary of %d denials has %d lines, want %d", len(rep.Denials), len(lines), maxSummaryDenials+1)
	}
	if want := fmt.Sprintf("airlock: %d more denials not shown: --json or --audit FILE lists every one", 9*maxSummaryDenials); lines[maxSummaryDenials] != want {
		t.Errorf("last line = %q, want %q", lines[maxSummaryDenials], want)
	}
	if max := 4*(termtext.FieldMax+termtext.MarkerMax) + 100; len(lines[0]) > max {
		t.Errorf("a denial line of 4*FieldMax-byte fields is %d bytes, want at most %d", len(lines[0]), max)
	}
	if !strings.Contains(lines[0], "…[+") {
		t.Errorf("a cut field has no marker: %q", lines[0][:100])
	}
}
