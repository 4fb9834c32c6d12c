// Package policy is airlock's allow-list: fs_read, fs_write, net_hosts,
// allowed_tools, env, budget and allow_downgrade. Parse reads a policy file
// (YAML or JSON), New builds one from Go values and (*Policy).With adds
// command-line flags; all three share one validation, so a grant means the
// same wherever it came from, and nothing is returned unless all of it is
// valid. Policies are immutable values that the in-process checks and every
// kernel layer read, so the layers cannot disagree.
//
// It imports only the standard library, go.yaml.in/yaml/v3 and its own
// subpackages: never os, syscall, net/http or log. It stops over-broad or
// ambiguous grants ("/", "~", /proc, "*.com", HTTP_PROXY overrides), typos
// that would silently grant nothing (unknown keys), and hostile inputs
// (alias bombs, huge files, control characters that hide text).
package policy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"

	"github.com/airlock-sandbox/airlock/policy/budget"
)

// MaxInputSize is the largest policy Parse reads, in bytes. A real policy is
// a few hundred bytes; the bound keeps a hostile input from costing memory.
const MaxInputSize = 1 << 20

// topKeys are the keys a policy file may hold, in canonical order.
var topKeys = []string{"version", "fs_read", "fs_write", "fs_deny", "fs_protect", "fs_unprotect", "net_hosts", "allowed_tools", "env", "credentials", "budget", "allow_downgrade", "rootfs"}

// budgetKeyStrings returns the keys the budget mapping may hold.
func budgetKeyStrings() []string {
	s := make([]string, len(budgetKeys))
	for i, k := range budgetKeys {
		s[i] = string(k)
	}
	return s
}

// budgetKey converts a key known to be a budget key.
func budgetKey(key string) budget.Limit { return budget.Limit(key) }

// ParseOptions says where policy bytes came from. The zero value parses a
// policy that must use absolute paths and whose errors carry no file name.
type ParseOptions struct {
	// File names the source in errors and in (*Policy).Source. Empty means
	// errors start with the line number.
	File string

	// BaseDir is the absolute folder that relative fs_read and fs_write
	// entries resolve against, normally the policy file's folder. Empty
	// means relative paths are errors.
	BaseDir string
}

// ParseError is one problem in a policy, with its position when it has one.
type ParseError struct {
	File string // as given in ParseOptions.File; "" when unnamed
	Line int    // 1-based; 0 when the problem has no position (New, With)
	Col  int    // 1-based, in characters; 0 when unknown
	Msg  string // what was wrong: what to do
}

// Error formats the problem as "file:line:col: msg", leaving out the parts
// that are unknown.
func (e *ParseError) Error() string {
	var b strings.Builder
	if e.File != "" {
		b.WriteString(e.File)
		b.WriteString(":")
	}
	if e.Line > 0 {
		b.WriteString(strconv.Itoa(e.Line))
		b.WriteString(":")
		if e.Col > 0 {
			b.WriteString(strconv.Itoa(e.Col))
			b.WriteString(":")
		}
	}
	if b.Len() > 0 {
		b.WriteString(" ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Parse reads a policy file (YAML, or JSON, which is read by the same
// parser with the same rules) and validates all of it. It returns a policy
// only when the whole file is valid; otherwise it returns every problem
// found, ordered by position, as errors.Join of *ParseError values.
//
// It refuses what a policy file never needs and an attacker might use:
// unknown or duplicate keys, null values, anchors, aliases, merge keys,
// tags, several documents, control characters and inputs over MaxInputSize.
func Parse(data []byte, opts ParseOptions) (*Policy, error) {
	ps := &fileParser{d: draft{file: opts.File, baseDir: opts.BaseDir}}
	if len(data) > MaxInputSize {
		ps.errorf(0, 0, "policy is %d bytes, larger than the %s limit: a policy lists grants, not data", len(data), FormatSize(MaxInputSize))
		return nil, join(ps.errs)
	}
	if ps.scanBytes(data); len(ps.errs) > 0 {
		return nil, join(ps.errs)
	}
	doc, err := decode(data)
	if err != nil {
		ps.yamlError(err)
		return nil, join(ps.errs)
	}
	ps.document(doc)
	p, verrs := validate(ps.d, nil)
	if errs := append(ps.errs, verrs...); len(errs) > 0 {
		v := validator{errs: errs}
		return nil, join(v.sorted())
	}
	p.source = opts.File
	return p, nil
}

// join returns the problems as one error that errors.As finds the first of.
func join(pes []*ParseError) error {
	errs := make([]error, len(pes))
	for i, e := range pes {
		errs[i] = e
	}
	return errors.Join(errs...)
}

// errMultiDoc marks an input with a second document.
type errMultiDoc struct{ line, col int }

func (e *errMultiDoc) Error() string { return "second document" }

// decode parses exactly one YAML document into a node tree. The tree keeps
// aliases unexpanded, so an alias bomb costs nothing before it is refused.
func decode(data []byte) (doc *yaml.Node, err error) {
	defer func() {
		// The parser reports errors by panicking internally; anything that
		// escapes it is a parser bug that must still refuse the input.
		if r := recover(); r != nil {
			doc, err = nil, fmt.Errorf("yaml: parser failure (%v)", r)
		}
	}()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var n yaml.Node
	if err := dec.Decode(&n); err != nil {
		if err == io.EOF {
			return &yaml.Node{Kind: yaml.DocumentNode, Line: 1, Column: 1}, nil
		}
		return nil, err
	}
	var extra yaml.Node
	switch err := dec.Decode(&extra); {
	case err == io.EOF:
		return &n, nil
	case err != nil:
		return nil, err
	default:
		return nil, &errMultiDoc{line: extra.Line, col: extra.Column}
	}
}

// yamlLine matches the position yaml puts at the start of its messages.
var yamlLine = regexp.MustCompile(`^yaml: line ([0-9]+): (.*)$`)

// yamlError turns a parser error into a ParseError.
func (ps *fileParser) yamlError(err error) {
	var md *errMultiDoc
	if errors.As(err, &md) {
		ps.errorf(md.line, md.col, "a second document starts here: a policy file holds one document, remove the --- separator and what follows")
		return
	}
	msg := err.Error()
	line := 0
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		line, _ = strconv.Atoi(m[1]) // the pattern matched digits; overflow leaves line 0
		msg = m[2]
	} else {
		msg = strings.TrimPrefix(msg, "yaml: ")
	}
	ps.errorf(line, 0, "not valid YAML or JSON: %s: fix the syntax", msg)
}

// fileParser walks the node tree of a policy file into a draft.
type fileParser struct {
	d    draft
	errs []*ParseError
}

func (ps *fileParser) errorf(line, col int, format string, args ...any) {
	ps.errs = append(ps.errs, &ParseError{File: ps.d.file, Line: line, Col: col, Msg: fmt.Sprintf(format, args...)})
}

func (ps *fileParser) nodef(n *yaml.Node, format string, args ...any) {
	ps.errorf(n.Line, n.Column, format, args...)
}

// scanBytes refuses invalid UTF-8 and characters that are invisible or
// control the terminal, anywhere in the input (comments included), so what
// a reviewer sees is what is parsed. A leading byte-order mark is allowed.
func (ps *fileParser) scanBytes(data []byte) {
	line, col := 1, 1
	for i := 0; i < len(data); {
		r, size := utf8.DecodeRune(data[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			ps.errorf(line, col, "invalid UTF-8 byte 0x%02x: save the policy as UTF-8", data[i])
		case r == '\n':
			line, col = line+1, 0
		case r == '\t' || r == '\r' || r == 0xFEFF && i == 0:
		default:
			if msg := runeProblem(r); msg != "" {
				ps.errorf(line, col, "%s: remove it", msg)
			}
		}
		if len(ps.errs) >= maxErrors {
			return
		}
		i += size
		col++
	}
}

// check refuses the YAML features a policy never needs: anchors and aliases
// (alias bombs, values that are not where they appear to be), and explicit
// tags (custom types). It reports whether n is free of them.
func (ps *fileParser) check(n *yaml.Node) bool {
	switch {
	case n.Kind == yaml.AliasNode:
		ps.nodef(n, "alias *%s is not allowed: write the value out", n.Value)
	case n.Anchor != "":
		ps.nodef(n, "anchor &%s is not allowed: write the value out where it is used", n.Anchor)
	case n.Style&yaml.TaggedStyle != 0:
		ps.nodef(n, "tag %s is not allowed: remove it", n.Tag)
	default:
		return true
	}
	return false
}

// kindName describes a node for "got ..." messages.
func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		switch n.Tag {
		case "!!null":
			return "null"
		case "!!bool":
			return "the boolean " + n.Value
		case "!!int", "!!float":
			return "the number " + n.Value
		}
		return "the string " + strconv.Quote(n.Value)
	}
	return "something else"
}

// isNull reports whether n is an explicit or implied null ("key:" with no value).
func isNull(n *yaml.Node) bool { return n.Kind == yaml.ScalarNode && n.Tag == "!!null" }

// document walks the top-level mapping.
func (ps *fileParser) document(doc *yaml.Node) {
	if len(doc.Content) == 0 {
		ps.nodef(doc, "the policy is empty: start it with \"version: 1\"")
		return
	}
	top := doc.Content[0]
	if !ps.check(top) {
		return
	}
	if top.Kind != yaml.MappingNode {
		ps.nodef(top, "a policy is a mapping of keys such as version and fs_read, got %s: start it with \"version: 1\"", kindName(top))
		return
	}
	seen := ps.mapping(top, topKeys, "", func(key string, k, v *yaml.Node) {
		switch key {
		case "version":
			ps.version(v)
		case "fs_read":
			ps.d.fsRead = ps.list(v, key)
		case "fs_write":
			ps.d.fsWrite = ps.list(v, key)
		case "fs_deny":
			ps.d.fsDeny = ps.list(v, key)
		case "fs_protect":
			ps.d.fsProtect = ps.list(v, key)
		case "fs_unprotect":
			ps.d.fsUnprotect = ps.list(v, key)
		case "net_hosts":
			ps.d.netHosts = ps.list(v, key)
		case "allowed_tools":
			ps.d.tools = ps.list(v, key)
		case "env":
			ps.d.env = ps.list(v, key)
		case "credentials":
			ps.d.credentials = ps.credentials(v)
		case "allow_downgrade":
			ps.d.downgrades = ps.list(v, key)
		case "rootfs":
			ps.d.rootfs = ps.scalar(v, key)
		case "budget":
			ps.budget(v)
		}
	})
	if _, ok := seen["version"]; !ok {
		ps.nodef(top, "version is missing: add \"version: %d\" as the first line", Version)
	}
}

// mapping calls fn for each key of n that is in known, reporting unknown,
// duplicate and malformed keys and null values. where is "" at the top
// level, or the enclosing key. It returns the keys it saw, valid or not.
func (ps *fileParser) mapping(n *yaml.Node, known []string, where string, fn func(key string, k, v *yaml.Node)) map[string]*yaml.Node {
	seen := make(map[string]*yaml.Node)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if !ps.check(k) {
			continue
		}
		// Keys are plain strings; "1: x" or a mapping used as a key is a
		// mistake, never a grant.
		if k.Kind != yaml.ScalarNode || k.Tag != "!!str" && k.Tag != "!!merge" {
			ps.nodef(k, "keys are plain names, got %s: use one of %s", kindName(k), strings.Join(known, ", "))
			continue
		}
		key := k.Value
		if k.Tag == "!!merge" {
			ps.nodef(k, "merge key << is not allowed: write the keys out")
			continue
		}
		// YAML says duplicate keys are an error, but parsers keep the last
		// one; an attacker who can append to a policy could then override
		// a grant the reviewer saw. Refuse them (JSON included).
		if prev, dup := seen[key]; dup {
			ps.nodef(k, "duplicate key %s (first at %d:%d): keep one", strconv.Quote(key), prev.Line, prev.Column)
			continue
		}
		seen[key] = k
		if !slices.Contains(known, key) {
			ps.unknownKey(k, known, where)
			continue
		}
		if !ps.check(v) {
			continue
		}
		// "fs_read:" with nothing after it is null, not an empty list: the
		// author probably lost a line, so say so instead of granting nothing.
		if isNull(v) {
			ps.nodef(v, "%s has no value: give it one or remove the key", key)
			continue
		}
		fn(key, k, v)
	}
	return seen
}

// unknownKey reports key k, suggesting the nearest known key.
func (ps *fileParser) unknownKey(k *yaml.Node, known []string, where string) {
	in := ""
	if where != "" {
		in = " in " + where
	}
	if where == "" && slices.Contains(budgetKeyStrings(), k.Value) {
		ps.nodef(k, "%s belongs under budget: indent it below a \"budget:\" key", k.Value)
		return
	}
	ps.nodef(k, "unknown key %s%s%s", strconv.Quote(k.Value), in, suggest(k.Value, known))
}

// version checks that the version is the integer 1.
func (ps *fileParser) version(v *yaml.Node) {
	if v.Kind != yaml.ScalarNode || v.Tag != "!!int" {
		ps.nodef(v, "version must be the number %d, got %s", Version, kindName(v))
		return
	}
	if v.Value != strconv.Itoa(Version) {
		ps.nodef(v, "unsupported version %s: this airlock reads version %d", v.Value, Version)
	}
}

// list reads a list of strings.
func (ps *fileParser) list(v *yaml.Node, key string) []item {
	if v.Kind != yaml.SequenceNode {
		hint := ""
		if v.Kind == yaml.ScalarNode {
			hint = fmt.Sprintf(": write [%s]", v.Value)
		}
		ps.nodef(v, "%s must be a list, got %s%s", key, kindName(v), hint)
		return nil
	}
	items := make([]item, 0, len(v.Content))
	for _, e := range v.Content {
		if !ps.check(e) {
			continue
		}
		// Unquoted true, 7 or 1.5 are not strings in YAML; accepting them
		// would make a grant depend on how YAML resolves a plain scalar.
		if e.Kind != yaml.ScalarNode || e.Tag != "!!str" {
			hint := ""
			if e.Kind == yaml.ScalarNode && !isNull(e) {
				hint = fmt.Sprintf(": quote it (%q) to use it as text", e.Value)
			}
			ps.nodef(e, "%s entries are strings, got %s%s", key, kindName(e), hint)
			continue
		}
		items = append(items, item{val: e.Value, line: e.Line, col: e.Column, label: key + " entry"})
	}
	return items
}

// scalar reads a key whose value is one string (rootfs), as a one-item list.
func (ps *fileParser) scalar(v *yaml.Node, key string) []item {
	if v.Kind != yaml.ScalarNode || v.Tag != "!!str" {
		hint := ""
		if v.Kind == yaml.ScalarNode && !isNull(v) {
			hint = fmt.Sprintf(": quote it (%q) to use it as text", v.Value)
		}
		ps.nodef(v, "%s is one string (a folder), got %s%s", key, kindName(v), hint)
		return nil
	}
	return []item{{val: v.Value, line: v.Line, col: v.Column, label: key}}
}

// credentials reads the credentials list: each entry a mapping of host,
// header and env, or the written form "HOST:HEADER=ENV".
func (ps *fileParser) credentials(v *yaml.Node) []item {
	if v.Kind != yaml.SequenceNode {
		ps.nodef(v, "credentials must be a list of {host, header, env}, got %s", kindName(v))
		return nil
	}
	var items []item
	for _, e := range v.Content {
		if !ps.check(e) {
			continue
		}
		if e.Kind == yaml.ScalarNode && e.Tag == "!!str" {
			items = append(items, item{val: e.Value, line: e.Line, col: e.Column, label: "credentials entry"})
			continue
		}
		if e.Kind != yaml.MappingNode {
			ps.nodef(e, "credentials entries are {host: H, header: NAME, env: VAR}, got %s", kindName(e))
			continue
		}
		f := map[string]string{}
		seen := ps.mapping(e, []string{"host", "header", "env"}, "credentials entry", func(key string, _, val *yaml.Node) {
			if val.Kind != yaml.ScalarNode || val.Tag != "!!str" {
				ps.nodef(val, "credentials %s is a string, got %s", key, kindName(val))
				return
			}
			f[key] = val.Value
		})
		missing := false
		for _, k := range []string{"host", "header", "env"} {
			if _, ok := seen[k]; !ok {
				ps.nodef(e, "credentials entry has no %s: write {host: api.example.com, header: Authorization, env: EXAMPLE_TOKEN}", k)
				missing = true
			}
		}
		if missing || len(f) != 3 {
			continue
		}
		items = append(items, item{val: f["host"] + ":" + f["header"] + "=" + f["env"], line: e.Line, col: e.Column, label: "credentials entry"})
	}
	return items
}

// budget reads the budget mapping. Bounds are checked by validate.
func (ps *fileParser) budget(v *yaml.Node) {
	if v.Kind != yaml.MappingNode {
		ps.nodef(v, "budget must be a mapping of limits such as max_wall: 30s, got %s", kindName(v))
		return
	}
	ps.mapping(v, budgetKeyStrings(), "budget", func(key string, k, val *yaml.Node) {
		n, ok := ps.limit(key, val)
		if ok {
			ps.d.limits = append(ps.d.limits, limitItem{key: budgetKey(key), val: n, line: val.Line, col: val.Column, label: key})
		}
	})
}

// limit parses the value of one budget key.
func (ps *fileParser) limit(key string, v *yaml.Node) (int64, bool) {
	if v.Kind != yaml.ScalarNode || v.Tag == "!!bool" {
		ps.nodef(v, "%s must be %s, got %s", key, limitKind(key), kindName(v))
		return 0, false
	}
	var n int64
	var err error
	switch budgetKey(key) {
	case "max_wall", "max_cpu":
		var d time.Duration
		d, err = ParseDuration(v.Value)
		n = int64(d)
	case "max_ops", "max_pids":
		if v.Tag != "!!int" || !allDigits(v.Value) {
			ps.nodef(v, "%s must be %s, got %s", key, limitKind(key), kindName(v))
			return 0, false
		}
		n, err = parseDigits(v.Value)
		if err != nil {
			err = fmt.Errorf("%s is too large", v.Value)
		}
	default:
		n, err = ParseSize(v.Value)
	}
	if err != nil {
		ps.nodef(v, "%s: %v", key, err)
		return 0, false
	}
	return n, true
}

// limitKind describes the value a budget key takes.
func limitKind(key string) string {
	switch key {
	case "max_wall", "max_cpu":
		return "a duration like 30s"
	case "max_ops", "max_pids":
		return "a whole number"
	}
	return "a size like 1048576 or 64MiB"
}
