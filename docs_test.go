package airlock_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// readmeBudget is the most lines README.md may have: it says what airlock
// is, the two commands, one example per front end and links; every topic
// lives in docs/.
const readmeBudget = 200

// pendingPages are docs pages the README links that other work adds. A
// link to one is accepted while the file is absent and checked like any
// other once it exists. Every page linked today exists.
var pendingPages []string

// TestDocsLinks checks every relative link in README.md and docs/*.md: the
// file (or folder) it names exists, and a #fragment names a heading of
// the Markdown file it points into.
func TestDocsLinks(t *testing.T) {
	pages := userDocs(t)
	headings := make(map[string]map[string]bool) // file → its heading anchors
	anchors := func(path string) (map[string]bool, error) {
		if h, ok := headings[path]; ok {
			return h, nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		h := markdownAnchors(string(data))
		headings[path] = h
		return h, nil
	}
	for _, page := range pages {
		data, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range markdownLinks(string(data)) {
			for _, msg := range checkLink(page, l, anchors) {
				t.Errorf("%s:%d: link %q: %s", page, l.line, l.target, msg)
			}
		}
	}
}

// TestReadmeLinksEveryPage checks that README.md stays within its line
// budget and links every page of docs/.
func TestReadmeLinksEveryPage(t *testing.T) {
	data, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(data), "\n"); n > readmeBudget {
		t.Errorf("README.md has %d lines, more than its budget of %d: move the topic to a page of docs/ and link it", n, readmeBudget)
	}
	linked := make(map[string]bool)
	for _, l := range markdownLinks(string(data)) {
		target, _, _ := strings.Cut(l.target, "#")
		linked[filepath.Clean(target)] = true
	}
	for _, page := range userDocs(t) {
		if page != "README.md" && !linked[page] {
			t.Errorf("README.md does not link %s: add it to the Documentation list", page)
		}
	}
}

// TestMarkdownAnchors checks the heading-to-anchor rule against GitHub's.
func TestMarkdownAnchors(t *testing.T) {
	md := "# Kubernetes\n## `airlock export k8s`\n## OCI runtimes: runc and crun\n" +
		"## Where a cold run's time goes: `bench/phases`\n## Sessions\n## Sessions\n" +
		"```sh\n# not a heading\n```\n"
	got := markdownAnchors(md)
	for _, want := range []string{"kubernetes", "airlock-export-k8s", "oci-runtimes-runc-and-crun",
		"where-a-cold-runs-time-goes-benchphases", "sessions", "sessions-1"} {
		if !got[want] {
			t.Errorf("markdownAnchors: no %q in %v", want, got)
		}
	}
	if got["not-a-heading"] {
		t.Error("markdownAnchors: a comment in a code block became an anchor")
	}
}

// TestCheckLink checks that checkLink catches a missing file, a missing
// anchor and an anchor into a file that is not Markdown.
func TestCheckLink(t *testing.T) {
	defer func(p []string) { pendingPages = p }(pendingPages)
	pendingPages = []string{"docs/pending.md"}
	anchors := func(path string) (map[string]bool, error) {
		if path == "docs/a.md" {
			return map[string]bool{"here": true}, nil
		}
		return nil, os.ErrNotExist
	}
	tests := []struct {
		name, target string
		bad          bool
	}{
		{"file", "../README.md", false},
		{"folder", "../docs", false},
		{"anchor", "a.md#here", false},
		{"own-anchor", "#here", false},
		{"missing-file", "nothere.md", true},
		{"missing-anchor", "a.md#gone", true},
		{"escapes-repo", "../../x.md", true},
		{"pending", "pending.md", false},
		{"pending-anchor", "pending.md#part", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			msgs := checkLink("docs/a.md", mdLink{target: tt.target, line: 1}, anchors)
			if (len(msgs) > 0) != tt.bad {
				t.Errorf("checkLink(docs/a.md, %q) = %q, want bad=%v", tt.target, msgs, tt.bad)
			}
		})
	}
}

// userDocs returns README.md and the Markdown files of docs/.
func userDocs(t *testing.T) []string {
	t.Helper()
	pages, err := filepath.Glob("docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	return append([]string{"README.md"}, pages...)
}

// mdLink is one inline link of a Markdown text.
type mdLink struct {
	target string
	line   int
}

var (
	linkRE       = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	codeSpanRE   = regexp.MustCompile("`[^`]*`")
	anchorDropRE = regexp.MustCompile(`[^\p{L}\p{N}\- _]`)
	headingRE    = regexp.MustCompile(`^#{1,6} (.*)$`)
)

// markdownLinks returns the inline links outside code blocks and code
// spans.
func markdownLinks(md string) []mdLink {
	var out []mdLink
	inCode := false
	for i, line := range strings.Split(md, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			inCode = !inCode
			continue
		}
		if inCode {
			continue
		}
		line = codeSpanRE.ReplaceAllStringFunc(line, func(s string) string {
			// A link's text may be a code span: keep the brackets around it.
			return strings.Repeat("x", len(s))
		})
		for _, m := range linkRE.FindAllStringSubmatch(line, -1) {
			out = append(out, mdLink{target: m[1], line: i + 1})
		}
	}
	return out
}

// markdownAnchors returns the anchors GitHub gives the headings of md:
// lower case, punctuation dropped, spaces as hyphens, and -1, -2, ... for
// repeats.
func markdownAnchors(md string) map[string]bool {
	out := make(map[string]bool)
	inCode := false
	for _, line := range strings.Split(md, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			inCode = !inCode
			continue
		}
		m := headingRE.FindStringSubmatch(line)
		if inCode || m == nil {
			continue
		}
		text := strings.TrimSpace(m[1])
		slug := strings.ReplaceAll(anchorDropRE.ReplaceAllString(strings.ToLower(text), ""), " ", "-")
		anchor := slug
		for n := 1; out[anchor]; n++ {
			anchor = fmt.Sprintf("%s-%d", slug, n)
		}
		out[anchor] = true
	}
	return out
}

// checkLink returns what is wrong with link l of page (a path relative
// to the repository's root); anchors returns the anchors of a Markdown
// file.
func checkLink(page string, l mdLink, anchors func(string) (map[string]bool, error)) []string {
	target := l.target
	if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
		return nil
	}
	file, frag, _ := strings.Cut(target, "#")
	path := page
	if file != "" {
		path = filepath.Join(filepath.Dir(page), file)
	}
	if path == ".." || strings.HasPrefix(path, "../") || filepath.IsAbs(path) {
		return []string{"points outside the repository"}
	}
	if _, err := os.Stat(path); err != nil {
		if slices.Contains(pendingPages, path) {
			return nil
		}
		// anchors may know files the file system does not (tests).
		if _, aerr := anchors(path); aerr != nil {
			return []string{fmt.Sprintf("%s does not exist", path)}
		}
	}
	if frag == "" {
		return nil
	}
	if !strings.HasSuffix(path, ".md") {
		return []string{fmt.Sprintf("#%s points into %s, which is not Markdown", frag, path)}
	}
	h, err := anchors(path)
	if err != nil {
		return []string{err.Error()}
	}
	if !h[frag] {
		return []string{fmt.Sprintf("%s has no heading with anchor #%s", path, frag)}
	}
	return nil
}
