package mcp

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/jsonschema-go/jsonschema"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/audit"
	"github.com/airlock-sandbox/airlock/internal/denial"
	"github.com/airlock-sandbox/airlock/internal/termtext"
	"github.com/airlock-sandbox/airlock/policy"
	"github.com/airlock-sandbox/airlock/policy/budget"
)

// addTools registers the tools, with descriptions derived from the policy.
func (s *Server) addTools() {
	p := s.view
	yes, no := true, false
	// The hints are for the client's confirmation prompts; the sandbox,
	// not the hint, is what bounds each tool. run and write_file change
	// the workspace (destructive: they may replace files); run reaches the
	// network only when net_hosts grants hosts (open world).
	openWorld := len(p.NetHosts()) > 0
	sdk.AddTool(s.srv, &sdk.Tool{Name: ToolRun, Description: runDescription(p), InputSchema: runInputSchema(),
		Annotations: &sdk.ToolAnnotations{Title: "Run a command in the sandbox", DestructiveHint: &yes, OpenWorldHint: &openWorld}}, s.run)
	sdk.AddTool(s.srv, &sdk.Tool{Name: ToolReadFile, Description: readDescription(p),
		Annotations: &sdk.ToolAnnotations{Title: "Read a file in the sandbox", ReadOnlyHint: true, IdempotentHint: true, OpenWorldHint: &no}}, s.readFile)
	sdk.AddTool(s.srv, &sdk.Tool{Name: ToolWriteFile, Description: writeDescription(p),
		Annotations: &sdk.ToolAnnotations{Title: "Write a file in the sandbox", DestructiveHint: &yes, IdempotentHint: true, OpenWorldHint: &no}}, s.writeFile)
	sdk.AddTool(s.srv, &sdk.Tool{Name: ToolListFiles, Description: listDescription(p),
		Annotations: &sdk.ToolAnnotations{Title: "List a folder in the sandbox", ReadOnlyHint: true, IdempotentHint: true, OpenWorldHint: &no}}, s.listFiles)
	sdk.AddTool(s.srv, &sdk.Tool{Name: ToolSessionInfo, Description: infoDescription,
		Annotations: &sdk.ToolAnnotations{Title: "Show the sandbox's grants and budget", ReadOnlyHint: true, IdempotentHint: true, OpenWorldHint: &no}}, s.sessionInfo)
	sdk.AddTool(s.srv, &sdk.Tool{Name: ToolExtend, Description: extendDescription,
		Annotations: &sdk.ToolAnnotations{Title: "Extend the sandbox session", DestructiveHint: &no, IdempotentHint: true, OpenWorldHint: &no}}, s.extend)
}

// runInputSchema is RunInput's schema with command an array of strings
// only: the generated schema allows null for a Go slice, and some clients
// then send a string.
func runInputSchema() *jsonschema.Schema {
	sc, err := jsonschema.For[RunInput](nil)
	if err != nil {
		panic("mcp: airlock bug: RunInput has no schema: " + err.Error())
	}
	if c := sc.Properties["command"]; c != nil {
		c.Type, c.Types = "array", nil
		c.MinItems = jsonschema.Ptr(1)
	}
	return sc
}

const extendDescription = "Keep the sandbox session alive longer: `by` (a duration such as \"30m\") is added to its current end, never beyond max_deadline (session_info shows both). Each run keeps its own deadline (max_wall). Costs no budget."

// extend moves the session's end by in.By past its current end.
func (s *Server) extend(ctx context.Context, req *sdk.CallToolRequest, in ExtendInput) (*sdk.CallToolResult, ExtendOutput, error) {
	by, err := policy.ParseDuration(in.By)
	if err != nil || by <= 0 || by > maxTimeout {
		return nil, ExtendOutput{}, fmt.Errorf("by %q: give how much longer the session should live, past its current end: a duration such as \"30m\", more than 0 and at most %v", in.By, maxTimeout)
	}
	sess, err := s.sandboxFor(req.Session)
	if err != nil {
		return nil, ExtendOutput{}, err
	}
	end, err := sess.Extend(by) // past the current end: two of 30m add an hour
	if err != nil {
		return nil, ExtendOutput{}, s.public(ToolExtend, err)
	}
	return nil, ExtendOutput{Deadline: end, MaxDeadline: sess.Info().MaxDeadline}, nil
}

// maxTimeout bounds timeout_seconds before conversion, so that a huge
// number cannot overflow time.Duration; the session deadline applies anyway.
const maxTimeout = 24 * time.Hour

// runPlan is a validated run request.
type runPlan struct {
	argv []string // argv[0] is exactly as granted in allowed_tools
	code string   // when non-empty, written to a file whose path is appended to argv
	ext  string   // the code file's extension
}

// plan validates in and chooses the command line. A refused interpreter or
// command is a refusal; bad arguments are an error.
func (s *Server) plan(in RunInput) (runPlan, *denial.Refusal, error) {
	if in.TimeoutSeconds < 0 || in.TimeoutSeconds > maxTimeout.Seconds() {
		return runPlan{}, nil, fmt.Errorf("run: timeout_seconds %v is out of range: give a number of seconds between 0 and %v", in.TimeoutSeconds, maxTimeout.Seconds())
	}
	switch {
	case len(in.Command) > 0 && (in.Code != "" || in.Language != ""):
		return runPlan{}, nil, errors.New("run: give either command or code with language, not both")
	case len(in.Command) > 0:
		if in.Command[0] == "" {
			return runPlan{}, nil, errors.New("run: command[0] is empty: name an allowed tool, e.g. [\"python3\", \"job.py\"]")
		}
		if !mayRun(s.cfg.Policy.AllowedTools(), in.Command[0]) {
			r := s.toolDenial(in.Command[0])
			return runPlan{}, &r, nil
		}
		return runPlan{argv: in.Command}, nil, nil
	case in.Code == "":
		return runPlan{}, nil, errors.New("run: give command (e.g. [\"python3\", \"job.py\"]) or code with language")
	case in.Language == "":
		return runPlan{}, nil, fmt.Errorf("run: code needs language: one of %s", strings.Join(languageNames(), ", "))
	}
	lang, ok := findLanguage(in.Language)
	if !ok {
		return runPlan{}, nil, fmt.Errorf("run: language %q is not supported: use one of %s, or give command", in.Language, strings.Join(languageNames(), ", "))
	}
	tool, ok := lang.interpreter(s.cfg.Policy.AllowedTools())
	if !ok {
		r := s.toolDenial(lang.interpreters[0])
		return runPlan{}, &r, nil
	}
	if lang.ext == "" {
		return runPlan{argv: []string{tool, "-c", in.Code}}, nil, nil
	}
	return runPlan{argv: []string{tool}, code: in.Code, ext: lang.ext}, nil, nil
}

func (s *Server) run(ctx context.Context, req *sdk.CallToolRequest, in RunInput) (*sdk.CallToolResult, RunOutput, error) {
	pl, r, err := s.plan(in)
	if err != nil {
		return nil, RunOutput{}, err
	}
	if r != nil {
		s.emitDenial(*r)
		return s.runDenied(*r)
	}
	sess, err := s.sandboxFor(req.Session)
	if err != nil {
		return nil, RunOutput{}, err
	}
	if pl.code != "" {
		file, r, err := s.writeCode(sess, pl.code, pl.ext)
		if err != nil || r != nil {
			if r != nil {
				return s.runDenied(*r)
			}
			return nil, RunOutput{}, err
		}
		if file == "" {
			// No workspace to hold a file: hand the code over on the
			// command line instead.
			pl.argv = append(pl.argv, "-c", pl.code)
		} else {
			pl.argv = append(pl.argv, file)
			defer func() {
				if err := sess.Guard().Remove(file); err != nil {
					s.log.Warn("mcp: remove code file", "file", file, "error", err)
				}
			}()
		}
	}
	er := api.ExecRequest{Args: pl.argv, Dir: s.cfg.Dir, PTY: in.PTY, Timeout: time.Duration(in.TimeoutSeconds * float64(time.Second))}
	if in.Stdin != "" {
		er.Stdin = strings.NewReader(in.Stdin)
	}
	if token := req.Params.GetProgressToken(); token != nil {
		// A client that asked for progress hears from the run every
		// ProgressInterval, with the output so far, so that it does not
		// give up on a long command (the TypeScript SDK does at 60 s).
		tail := &tailWriter{max: progressTail}
		er.Stdout, er.Stderr = tail, tail
		stop := make(chan struct{})
		defer close(stop)
		go s.progress(ctx, req.Session, token, tail, stop)
	}
	got, err := sess.Exec(ctx, er)
	if err != nil {
		if r, ok := denial.Of(err, "exec", pl.argv[0], s.cfg.Policy); ok {
			return s.runDenied(r)
		}
		if errors.Is(err, api.ErrSessionClosed) {
			why := sess.Guard().Meter().HaltedBy()
			if why == "" {
				why = budget.SessionClosed
			}
			return s.runDenied(denial.SessionEnded("exec", pl.argv[0], why))
		}
		return nil, RunOutput{}, s.public("run", err)
	}
	if got == nil {
		return nil, RunOutput{}, s.public("run", errors.New("airlock bug: exec returned neither a report nor an error"))
	}
	rep := *got // a copy: the session's report stays as it was
	if rep.Denials == nil {
		rep.Denials = []api.Denial{}
	}
	if !s.cfg.AgentAdvice {
		rep.Operator = nil // the operator's, not the agent's: see Config.AgentAdvice
	}
	res := &sdk.CallToolResult{
		Content: []sdk.Content{&sdk.TextContent{Text: summarize(&rep)}},
		IsError: rep.ExitCode != 0,
	}
	out := RunOutput{Report: rep}
	if rep.ExitCode == 127 {
		for _, d := range rep.Denials {
			if d.Rule == policy.AllowedTools.String() {
				out.Denied = &d
				break
			}
		}
	}
	return res, out, nil
}

// mayRun reports whether the sandbox could grant name: exactly listed, or
// a bare name and an absolute path that may be the same file. The sandbox
// makes the final decision by resolving both; this check only refuses, up
// front and without starting a sandbox, what can never run.
func mayRun(allowed []string, name string) bool {
	for _, a := range allowed {
		if a == name || path.Base(a) == path.Base(name) && (strings.HasPrefix(a, "/") != strings.HasPrefix(name, "/")) {
			return true
		}
	}
	return false
}

// runDenied is the result of a run refused before anything started: exit
// code 127 like the CLI's "not an allowed tool", or 124 for a budget.
func (s *Server) runDenied(r denial.Refusal) (*sdk.CallToolResult, RunOutput, error) {
	d := r.Denial
	halted := (*string)(nil)
	code := 127
	if d.Layer == audit.LayerBudget {
		code, halted = 124, &d.Rule
	}
	item := d
	item.Count = 1
	counts := api.DenialCounts{Total: 1, ByLayer: map[string]int64{d.Layer: 1}}
	out := RunOutput{Report: api.Report{ExitCode: code, HaltedBy: halted, Denials: []api.Denial{item}, DenialCounts: counts, Error: d.Message, Operator: s.operator(r)}, Denied: &d}
	return s.deniedResult(r), out, nil
}

// writeCode writes code to a fresh file in the session's workspace and
// returns its path, or "" when the session has no workspace.
func (s *Server) writeCode(sess Session, code, ext string) (string, *denial.Refusal, error) {
	ws := sess.Info().Workspace
	if ws == "" {
		return "", nil, nil
	}
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", nil, s.public("run", err)
	}
	file := strings.TrimSuffix(ws, "/") + "/.airlock-run-" + hex.EncodeToString(b[:]) + ext
	if err := sess.Guard().Write(file, []byte(code)); err != nil {
		if r, ok := denial.Of(err, "write", file, s.cfg.Policy); ok {
			return "", &r, nil
		}
		return "", nil, s.public("run", err)
	}
	return file, nil, nil
}

func (s *Server) readFile(ctx context.Context, req *sdk.CallToolRequest, in ReadFileInput) (*sdk.CallToolResult, ReadFileOutput, error) {
	if in.Path == "" {
		return nil, ReadFileOutput{}, errors.New("read_file: path is empty: give the file to read")
	}
	if err := checkName("read_file", in.Path); err != nil {
		return nil, ReadFileOutput{}, err
	}
	sess, err := s.sandboxFor(req.Session)
	if err != nil {
		return nil, ReadFileOutput{}, err
	}
	data, err := sess.Guard().Read(in.Path)
	if err != nil {
		if r, ok := denial.Of(err, "read", in.Path, s.cfg.Policy); ok {
			return s.deniedResult(r), ReadFileOutput{Denied: &r.Denial, Operator: s.operator(r)}, nil
		}
		return nil, ReadFileOutput{}, s.fileError("read_file", err)
	}
	out := ReadFileOutput{Path: in.Path, Size: len(data)}
	if utf8.Valid(data) {
		out.Content = string(data)
	} else {
		out.Content, out.Encoding = base64.StdEncoding.EncodeToString(data), "base64"
	}
	return nil, out, nil
}

func (s *Server) writeFile(ctx context.Context, req *sdk.CallToolRequest, in WriteFileInput) (*sdk.CallToolResult, WriteFileOutput, error) {
	if in.Path == "" {
		return nil, WriteFileOutput{}, errors.New("write_file: path is empty: give the file to write")
	}
	if err := checkName("write_file", in.Path); err != nil {
		return nil, WriteFileOutput{}, err
	}
	data := []byte(in.Content)
	switch in.Encoding {
	case "":
	case "base64":
		var err error
		if data, err = base64.StdEncoding.DecodeString(in.Content); err != nil {
			return nil, WriteFileOutput{}, fmt.Errorf("write_file: content is not valid base64: %v", err)
		}
	default:
		return nil, WriteFileOutput{}, fmt.Errorf("write_file: encoding %q is not supported: leave it out for text or give \"base64\"", in.Encoding)
	}
	sess, err := s.sandboxFor(req.Session)
	if err != nil {
		return nil, WriteFileOutput{}, err
	}
	if err := sess.Guard().Write(in.Path, data); err != nil {
		if r, ok := denial.Of(err, "write", in.Path, s.cfg.Policy); ok {
			return s.deniedResult(r), WriteFileOutput{Denied: &r.Denial, Operator: s.operator(r)}, nil
		}
		return nil, WriteFileOutput{}, s.fileError("write_file", err)
	}
	return nil, WriteFileOutput{Path: in.Path, Bytes: len(data)}, nil
}

// MaxListEntries is the most entries list_files returns: a folder the
// sandbox made can be of any size, and the listing is held in the server's
// memory and then in the model's context.
const MaxListEntries = 1000

func (s *Server) listFiles(ctx context.Context, req *sdk.CallToolRequest, in ListFilesInput) (*sdk.CallToolResult, ListFilesOutput, error) {
	if err := checkName("list_files", in.Path); err != nil {
		return nil, ListFilesOutput{}, err
	}
	sess, err := s.sandboxFor(req.Session)
	if err != nil {
		return nil, ListFilesOutput{}, err
	}
	dir := in.Path
	if dir == "" {
		if dir = sess.Info().Workspace; dir == "" {
			return nil, ListFilesOutput{}, errors.New("list_files: this session has no workspace (no fs_write grant): give a path inside fs_read")
		}
	}
	entries, more, err := sess.Guard().ListN(dir, MaxListEntries)
	if err != nil {
		if r, ok := denial.Of(err, "list", dir, s.cfg.Policy); ok {
			return s.deniedResult(r), ListFilesOutput{Denied: &r.Denial, Operator: s.operator(r)}, nil
		}
		return nil, ListFilesOutput{}, s.fileError("list_files", err)
	}
	out := ListFilesOutput{Path: dir, Entries: make([]FileEntry, 0, len(entries)), Truncated: more}
	for _, e := range entries {
		fe := FileEntry{Name: e.Name, Dir: e.Dir, Size: e.Size, Mode: e.Mode.String()}
		if !termtext.AllPrintable(e.Name) {
			// Made in the sandbox: shown escaped, never raw (at most 4
			// bytes for each byte of the name).
			fe.Name, fe.Escaped = termtext.Escape(e.Name, 4*len(e.Name)), true
		}
		out.Entries = append(out.Entries, fe)
	}
	return nil, out, nil
}

func (s *Server) sessionInfo(ctx context.Context, req *sdk.CallToolRequest, _ SessionInfoInput) (*sdk.CallToolResult, SessionInfoOutput, error) {
	out, err := grants(s.view)
	if err != nil {
		return nil, SessionInfoOutput{}, s.public("session_info", err)
	}
	if sess := s.current(req.Session); sess != nil {
		info := sess.Info()
		out.Started, out.ID, out.Workspace = true, info.ID, info.Workspace
		m := sess.Guard().Meter()
		ops, output := m.Usage()
		left := m.Deadline().Sub(s.clock.Now()).Seconds()
		out.Usage = &UsageInfo{
			Ops:         ops,
			OpsLeft:     max(m.Limits().Ops-ops, 0),
			OutputBytes: output,
			CPUMS:       info.Usage.CPUMS,
			Execs:       info.Execs,
			SecondsLeft: max(left, 0),
			HaltedBy:    string(m.HaltedBy()),
		}
		deadline := m.Deadline()
		out.Deadline = &deadline
		if !info.MaxDeadline.IsZero() {
			md := info.MaxDeadline
			out.MaxDeadline = &md
		}
	} else if ws := s.view.FSWrite(); len(ws) > 0 {
		out.Workspace = ws[0]
	}
	return nil, out, nil
}

// checkName refuses a path that is not printable UTF-8 (control or format
// characters, escape sequences, bidi overrides, bytes that are not UTF-8):
// it would name a file on the host that the operator cannot read safely.
// The message shows it escaped.
func checkName(tool, p string) error {
	if termtext.AllPrintable(p) {
		return nil
	}
	return fmt.Errorf("%s: path \"%s\" has a character that is not printable (a control or format character, or bytes that are not UTF-8; shown escaped): use names of printable UTF-8 characters", tool, termtext.Field(p))
}

// fileError turns a guard error that is not a denial into a tool error.
// A *fs.PathError names the agent's own path (canonicalized) and an errno,
// so it is shown as is; anything else is an internal failure.
func (s *Server) fileError(tool string, err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return fmt.Errorf("%s: %w", tool, err)
	}
	return s.public(tool, err)
}

// public logs err and returns the message the model may see.
func (s *Server) public(tool string, err error) error {
	if errors.Is(err, api.ErrSessionClosed) {
		return fmt.Errorf("%s: the sandbox session has ended (its deadline passed or it was closed); start a new MCP session to get a fresh sandbox", tool)
	}
	s.log.Error("mcp: tool failed", "tool", tool, "error", err)
	return fmt.Errorf("%s: internal error in airlock; the operator's log has the details", tool)
}
