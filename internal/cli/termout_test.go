package cli_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"reflect"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/airtest"
	"github.com/airlock-sandbox/airlock/internal/cli"
	"github.com/airlock-sandbox/airlock/internal/termtext"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// hostile is what a sandbox, an API client or a hostile file name can put
// in a string airlock prints.
const hostile = airtest.Hostile

// TestLoggerEscapes proves that slog's TextHandler, as airlock's loggers
// use it, escapes controls, format characters and invalid UTF-8 in
// messages, keys, values, group names and errors, so one record stays one
// plain line; and that NewLogger bounds every string.
func TestLoggerEscapes(t *testing.T) {
	handlers := []struct {
		name string
		new  func(*bytes.Buffer) *slog.Logger
	}{
		{"TextHandler", func(b *bytes.Buffer) *slog.Logger { return slog.New(slog.NewTextHandler(b, nil)) }},
		{"newLogger", func(b *bytes.Buffer) *slog.Logger { return cli.NewLogger(b) }},
		{"newLoggerJSON", func(b *bytes.Buffer) *slog.Logger { l, _ := cli.NewLoggerFormat(b, "json"); return l }},
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
				airtest.CheckNoControls(t, strings.TrimSuffix(out, "\n"))
				if strings.Contains(out, "\t") {
					t.Errorf("a TAB was left raw: %q", out)
				}
			})
		}
	}
	t.Run("newLogger-bounds", func(t *testing.T) {
		var b bytes.Buffer
		long := strings.Repeat("/a", 1<<20)
		cli.NewLogger(&b).Info(long, "path", long, "err", errors.New(long), "any", struct{ S string }{long})
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
	if err := cli.WriteJSON(&got, rep); err != nil {
		t.Fatal(err)
	}
	airtest.CheckNoControls(t, got.String())
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
