package mcp

import (
	"encoding/json"
	"fmt"
	"path"
	"strconv"
	"strings"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/denial"
	"github.com/airlock-sandbox/airlock/policy"
)

// language is a value of run's language argument.
type language struct {
	names        []string // accepted spellings; the first is documented
	interpreters []string // tried in order against allowed_tools
	ext          string   // code goes in a file with this extension; "" means -c CODE
}

var languages = []language{
	{names: []string{"python", "python3", "py"}, interpreters: []string{"python3", "python"}, ext: ".py"},
	{names: []string{"sh", "shell"}, interpreters: []string{"sh", "dash", "bash"}},
	{names: []string{"bash"}, interpreters: []string{"bash"}},
}

func languageNames() []string {
	var n []string
	for _, l := range languages {
		n = append(n, l.names[0])
	}
	return n
}

func findLanguage(name string) (language, bool) {
	name = strings.ToLower(strings.TrimSpace(name))
	for _, l := range languages {
		for _, n := range l.names {
			if n == name {
				return l, true
			}
		}
	}
	return language{}, false
}

// interpreter returns the allowed_tools entry that runs l: a bare name, or
// an absolute path whose base name is one of l's interpreters.
func (l language) interpreter(allowed []string) (string, bool) {
	for _, want := range l.interpreters {
		for _, a := range allowed {
			if a == want || (strings.HasPrefix(a, "/") && path.Base(a) == want) {
				return a, true
			}
		}
	}
	return "", false
}

// runnable returns the languages whose interpreter allowed_tools grants.
func runnable(p *policy.Policy) []string {
	out := []string{}
	for _, l := range languages {
		if _, ok := l.interpreter(p.AllowedTools()); ok {
			out = append(out, l.names[0])
		}
	}
	return out
}

// toolDenial is the refusal of running name, which allowed_tools lacks.
func (s *Server) toolDenial(name string) denial.Refusal {
	p := s.cfg.Policy
	de := &policy.DenyError{Cap: policy.AllowedTools, Op: "exec", Subject: name,
		Reason: name + " is not in allowed_tools; allowed: " + listOr(p.AllowedTools(), "none")}
	r, _ := denial.Of(de, "exec", name, p) // a DenyError always is a refusal
	return r
}

// emitDenial records a refusal this package made itself.
func (s *Server) emitDenial(r denial.Refusal) { s.sink.Emit(r.Event(s.clock.Now())) }

// operator returns the operator's advice for r when the server may give
// it to the agent (Config.AgentAdvice), else nil.
func (s *Server) operator(r denial.Refusal) *api.Operator {
	if !s.cfg.AgentAdvice {
		return nil
	}
	return r.Operator()
}

// deniedResult is the tool result for a refusal: an error result whose
// text says what was refused, what to do instead and, with
// Config.AgentAdvice, which policy change would allow it.
func (s *Server) deniedResult(r denial.Refusal) *sdk.CallToolResult {
	line := denialLine(r.Denial)
	if o := s.operator(r); o != nil {
		line += "; to allow it (advice for the operator): " + o.Suggestions[0].Suggestion
	}
	return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: line}}, IsError: true}
}

// denialLine describes d with its hint, never a policy change.
func denialLine(d api.Denial) string {
	s := "denied " + strings.TrimSpace(d.Op+" "+d.Target) + " (" + d.Rule + "): " + d.Message
	if d.Hint != "" {
		s += "; " + d.Hint
	}
	return s
}

// textLimit bounds stdout and stderr in the text part of a run result; the
// structured content has them in full (within max_output_bytes).
const textLimit = 8 << 10

// summarize describes a report in a few lines for the model.
func summarize(rep *api.Report) string {
	var b strings.Builder
	fmt.Fprintf(&b, "exit code %d after %d ms", rep.ExitCode, rep.DurationMS)
	if rep.Signal != nil {
		fmt.Fprintf(&b, " (signal %d)", *rep.Signal)
	}
	b.WriteString("\n")
	if rep.HaltedBy != nil {
		fmt.Fprintf(&b, "halted by %s: the budget ran out\n", *rep.HaltedBy)
	}
	if rep.Error != "" {
		fmt.Fprintf(&b, "error: %s\n", rep.Error)
	}
	for _, d := range rep.Denials {
		line := denialLine(d)
		if d.Count > 1 {
			line = fmt.Sprintf("%s (%d times)", line, d.Count)
		}
		b.WriteString(line + "\n")
	}
	// Present only when the server may pass the operator's advice on.
	if rep.Operator != nil {
		for _, o := range rep.Operator.Suggestions {
			fmt.Fprintf(&b, "to allow %s %s (advice for the operator): %s\n", o.Rule, strings.TrimSpace(o.Op+" "+o.Target), o.Suggestion)
		}
	}
	if n := rep.DenialCounts.Dropped; n > 0 {
		fmt.Fprintf(&b, "%d more denials not itemized (%d in all)\n", n, rep.DenialCounts.Total)
	}
	section(&b, "stdout", rep.Stdout, rep.StdoutTruncated)
	section(&b, "stderr", rep.Stderr, rep.StderrTruncated)
	return strings.TrimSuffix(b.String(), "\n")
}

func section(b *strings.Builder, name, text string, capped bool) {
	if text == "" {
		return
	}
	fmt.Fprintf(b, "--- %s ---\n", name)
	if len(text) > textLimit {
		cut := textLimit
		for cut > 0 && !isRuneStart(text[cut]) {
			cut--
		}
		fmt.Fprintf(b, "%s\n[... %d more bytes in the structured result]\n", text[:cut], len(text)-cut)
	} else {
		b.WriteString(strings.TrimSuffix(text, "\n") + "\n")
	}
	if capped {
		fmt.Fprintf(b, "[%s was cut at max_output_bytes]\n", name)
	}
}

func isRuneStart(c byte) bool { return c&0xC0 != 0x80 }

// grants describes what p grants, in policy-file terms.
func grants(p *policy.Policy) (SessionInfoOutput, error) {
	data, err := json.Marshal(p)
	if err != nil {
		return SessionInfoOutput{}, err
	}
	var f struct {
		FSRead    []string   `json:"fs_read"`
		FSWrite   []string   `json:"fs_write"`
		NetHosts  []string   `json:"net_hosts"`
		Tools     []string   `json:"allowed_tools"`
		Budget    BudgetInfo `json:"budget"`
		Downgrade []string   `json:"allow_downgrade"`
	}
	if err := json.Unmarshal(data, &f); err != nil {
		return SessionInfoOutput{}, err
	}
	out := SessionInfoOutput{
		FSRead:       nonNil(f.FSRead),
		FSWrite:      nonNil(f.FSWrite),
		NetHosts:     nonNil(f.NetHosts),
		AllowedTools: nonNil(f.Tools),
		Languages:    runnable(p),
		Env:          []string{},
		Budget:       f.Budget,
		Downgrades:   f.Downgrade,
	}
	// Names only: values the operator set may be secrets.
	for _, e := range p.Env() {
		out.Env = append(out.Env, e.Name)
	}
	return out, nil
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func listOr(s []string, none string) string {
	if len(s) == 0 {
		return none
	}
	return strings.Join(s, ", ")
}

// limits describes p for tool descriptions, so the model knows its limits
// before its first call.
func limits(p *policy.Policy) string {
	var b strings.Builder
	if t := p.AllowedTools(); len(t) > 0 {
		fmt.Fprintf(&b, "Executables: only %s; nothing else can be started.\n", strings.Join(t, ", "))
	} else {
		b.WriteString("Executables: none are allowed, so run cannot start anything.\n")
	}
	r, w := p.FSRead(), p.FSWrite()
	switch {
	case len(r)+len(w) == 0:
		b.WriteString("Files: none of the host's beyond the system libraries; only /tmp (scratch, discarded) is writable.\n")
	default:
		fmt.Fprintf(&b, "Files: read-only %s; read-write %s. Beyond the system libraries nothing else of the host exists inside; /tmp is scratch.\n", listOr(r, "none"), listOr(w, "none"))
	}
	if h := p.NetHosts(); len(h) > 0 {
		var hs []string
		for _, x := range h {
			hs = append(hs, x.String())
		}
		fmt.Fprintf(&b, "Network: only to %s, through the HTTP(S)_PROXY the sandbox sets; no DNS, nothing else.\n", strings.Join(hs, ", "))
	} else {
		b.WriteString("Network: none.\n")
	}
	l := p.Budget()
	fmt.Fprintf(&b, "Budget: the session lives %s and allows %s operations (tool calls, execs, requests) in all; each run keeps up to %s of output.",
		l.Wall, strconv.FormatInt(l.Ops, 10), policy.FormatSize(l.OutputBytes))
	return b.String()
}

func runDescription(p *policy.Policy) string {
	langs := runnable(p)
	return "Run a command, or a snippet of code, inside an airlock sandbox enforced by the Linux kernel, and get its report: exit_code, stdout, stderr, halted_by and denials (each naming the grant that would allow it). " +
		"Give command (an argv list) or code with language (" + listOr(langs, "none available with this policy") + "). " +
		"A non-zero exit code sets isError.\n" + limits(p)
}

func readDescription(p *policy.Policy) string {
	return "Read a file. Readable: " + listOr(append(p.FSRead(), p.FSWrite()...), "nothing under this policy") +
		". Relative paths start at the workspace. A path outside these, or a symlink or \"..\" leading out of them, is refused with a structured denial (isError), never read. Content that is not UTF-8 comes back base64-encoded."
}

func writeDescription(p *policy.Policy) string {
	return "Create or replace a file (missing parent directories are created). Writable: " + listOr(p.FSWrite(), "nothing under this policy") +
		". Relative paths start at the workspace. Anything else is refused with a structured denial (isError). Writes never follow a symlink."
}

func listDescription(p *policy.Policy) string {
	return "List a directory (default: the workspace). Listable: " + listOr(append(p.FSRead(), p.FSWrite()...), "nothing under this policy") +
		". Symlinks are listed as themselves, never followed; at most " + strconv.Itoa(MaxListEntries) + " entries (truncated is set when there are more)."
}

const infoDescription = "Show what this sandbox grants (fs_read, fs_write, net_hosts, allowed_tools, budget, the languages run accepts) and, once the session has started, what it has used and how long it has left. Costs no budget and starts nothing."

func instructions(p *policy.Policy) string {
	return "airlock runs your code in a kernel-enforced sandbox that can touch only what its policy grants. Call session_info to see the grants and the budget left.\n" + limits(p)
}
