package egress

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
)

// Bounds of decoding a gzip response for the scrub: past expansionFloor
// decoded bytes, a body may decode to at most maxExpansion times the bytes
// it took on the wire (a zip bomb reaches about 1000); beyond that it is
// cut. JSON and text compress well under it.
const (
	expansionFloor = 64 << 20
	maxExpansion   = 100
)

// minTokenForm is the shortest credential token (the part of a value
// after its scheme, "Bearer TOKEN") the scrub searches for on its own;
// the whole value is always searched.
const minTokenForm = 4

// scrubber removes a request's credentials from what the upstream
// answers. It searches for every form in which an echo carries them: the
// value as sent, the token without its scheme (httpbin's /bearer answers
// {"token": "..."}), each escaped as a URL query or path (a redirect's
// Location) and as a JSON string (an echo of the request as JSON), in any
// ASCII case (header names are canonicalized on the way; an echo may fold
// case). A form the upstream made otherwise (base64, HTML entities, a
// value cut or interleaved) is beyond it.
type scrubber struct {
	forms   [][]byte      // lower case, longest first
	first   [256][][]byte // by the byte they start with, in either case: forms, longest first
	longest int
}

// newScrubber returns the scrubber for credentials cs, or nil for none.
func newScrubber(cs []Credential) *scrubber {
	var forms []string
	for _, c := range cs {
		if c.Value != "" {
			forms = append(forms, credentialForms(c.Value)...)
		}
	}
	if len(forms) == 0 {
		return nil
	}
	s := &scrubber{}
	for _, f := range forms {
		f = strings.ToLower(f)
		if !slices.ContainsFunc(s.forms, func(g []byte) bool { return string(g) == f }) {
			s.forms = append(s.forms, []byte(f))
		}
	}
	slices.SortStableFunc(s.forms, func(a, b []byte) int { return len(b) - len(a) })
	s.longest = len(s.forms[0])
	for _, f := range s.forms {
		s.first[f[0]] = append(s.first[f[0]], f)
		if u := upper(f[0]); u != f[0] {
			s.first[u] = append(s.first[u], f)
		}
	}
	return s
}

// credentialForms lists the forms of a credential's value v an echo may
// carry.
func credentialForms(v string) []string {
	bases := []string{v}
	if scheme, tok, ok := strings.Cut(v, " "); ok && scheme != "" && strings.IndexFunc(scheme, notTokenRune) < 0 {
		if tok = strings.TrimSpace(tok); len(tok) >= minTokenForm {
			bases = append(bases, tok)
		}
	}
	var forms []string
	for _, b := range bases {
		js, _ := json.Marshal(b) // escapes <, > and & as Go does
		var plain bytes.Buffer
		enc := json.NewEncoder(&plain)
		enc.SetEscapeHTML(false) // as Python and most others do
		enc.Encode(b)
		pj := strings.TrimSuffix(plain.String(), "\n")
		forms = append(forms, b, url.QueryEscape(b), url.PathEscape(b), unquote(string(js)), unquote(pj),
			strings.ReplaceAll(unquote(pj), "/", `\/`), strings.ReplaceAll(unquote(string(js)), "/", `\/`)) // PHP escapes / too
	}
	return forms
}

func unquote(s string) string { return strings.TrimSuffix(strings.TrimPrefix(s, `"`), `"`) }

func upper(c byte) byte {
	if c >= 'a' && c <= 'z' {
		return c - 'a' + 'A'
	}
	return c
}

func lower(c byte) byte {
	if c >= 'A' && c <= 'Z' {
		return c - 'A' + 'a'
	}
	return c
}

// match returns the length of the form at src[i:], or 0.
func (s *scrubber) match(src []byte, i int) int {
	for _, f := range s.first[src[i]] {
		if len(src)-i < len(f) {
			continue
		}
		j := 1
		for j < len(f) && lower(src[i+j]) == f[j] {
			j++
		}
		if j == len(f) {
			return len(f)
		}
	}
	return 0
}

// replace appends src to dst with every form that starts before limit
// replaced by Redacted, and returns where it stopped (limit or past it,
// at the end of a form); the caller keeps src from there on.
func (s *scrubber) replace(dst, src []byte, limit int) ([]byte, int) {
	i, from := 0, 0
	for i < limit {
		if s.first[src[i]] == nil {
			i++
			continue
		}
		if n := s.match(src, i); n > 0 {
			dst = append(append(dst, src[from:i]...), Redacted...)
			i += n
			from = i
			continue
		}
		i++
	}
	return append(dst, src[from:i]...), i
}

// string returns v with every form replaced.
func (s *scrubber) string(v string) string {
	if s == nil {
		return v
	}
	out, _ := s.replace(nil, []byte(v), len(v))
	return string(out)
}

// found reports whether v holds a form.
func (s *scrubber) found(v string) bool {
	for i := 0; i < len(v); i++ {
		if s.first[v[i]] != nil && s.match([]byte(v), i) > 0 {
			return true
		}
	}
	return false
}

// errWithheld is the reason a response to a request with credentials is
// not passed to the sandbox.
type errWithheld struct{ reason string }

func (e *errWithheld) Error() string { return e.reason }

// integrityHeaders describe the body the upstream sent, which the scrub
// may change: they would not match what the client gets.
var integrityHeaders = []string{"Content-Md5", "Digest", "Content-Digest", "Repr-Digest"}

// scrubResponse readies resp, the answer to a request that carried
// credentials, for the sandbox: every form of them is removed from its
// status line, header values and body; a header whose name holds one is
// dropped (trailers never pass). The body must be one the scrub reads
// whole: in no content coding, or in gzip (which the proxy asked for),
// decoded here and bounded (expansionFloor, maxExpansion; onBomb is
// called if it is cut); the client gets it decoded, without
// Content-Encoding. Anything else (another coding, a list of them, a
// partial response the proxy never asked for) returns an *errWithheld:
// the response must not reach the sandbox.
func scrubResponse(resp *http.Response, s *scrubber, onBomb func(decoded, wire int64)) error {
	resp.Status = s.string(resp.Status)
	for k, vs := range resp.Header {
		if s.found(k) {
			delete(resp.Header, k)
			continue
		}
		for i, v := range vs {
			vs[i] = s.string(v)
		}
	}
	for _, k := range integrityHeaders {
		resp.Header.Del(k)
	}
	resp.Trailer = nil
	if resp.Body == http.NoBody || resp.Body == nil {
		return nil
	}
	codings := contentCodings(resp.Header["Content-Encoding"])
	gz := false
	switch {
	case resp.StatusCode == http.StatusPartialContent:
		return &errWithheld{"a partial response (206), which airlock did not ask for: a slice of a body may cut a credential where the scrub cannot see it"}
	case len(codings) == 0, len(codings) == 1 && codings[0] == "identity":
	case len(codings) == 1 && (codings[0] == "gzip" || codings[0] == "x-gzip"):
		gz = true
	default:
		return &errWithheld{fmt.Sprintf("content codings %s, which the scrub cannot read whole (it reads none, or gzip alone)", codingNames(codings))}
	}
	resp.Header.Del("Content-Encoding")
	resp.Header.Del("Content-Length")
	resp.ContentLength = -1
	var body io.ReadCloser = resp.Body
	if gz {
		resp.Uncompressed = true
		body = &gunzipBody{rc: body, wire: &countReader{r: body}, onBomb: onBomb}
	}
	resp.Body = &scrubBody{rc: body, s: s}
	return nil
}

// knownCodings are the content codings a refusal names; it calls any
// other "unknown" rather than quote what the upstream wrote, which may be
// an echo.
var knownCodings = []string{"identity", "gzip", "x-gzip", "deflate", "br", "zstd", "compress", "x-compress", "dcb", "dcz"}

// codingNames lists codings for a refusal.
func codingNames(cs []string) string {
	names := make([]string, len(cs))
	for i, c := range cs {
		names[i] = "unknown"
		if slices.Contains(knownCodings, c) {
			names[i] = c
		}
	}
	return "(" + strings.Join(names, ", ") + ")"
}

// contentCodings returns the codings a Content-Encoding field lists over
// all its lines, lower case, without empty elements (RFC 9110 §5.6.1):
// every line counts, not the first.
func contentCodings(lines []string) []string {
	var cs []string
	for _, l := range lines {
		for _, c := range strings.Split(l, ",") {
			if c = strings.ToLower(strings.Trim(c, " \t")); c != "" {
				cs = append(cs, c)
			}
		}
	}
	return cs
}

// scrubChunk is how much of a body scrubBody reads at once.
const scrubChunk = 32 << 10

// scrubBody copies a body with every form of the credentials replaced.
// It holds back the last longest-1 bytes it read until more arrive, so a
// form split across reads (chunks, gzip members, TCP segments) is still
// found; a body that ends in an error drops them, since they may be the
// start of a form whose rest never came.
type scrubBody struct {
	rc  io.ReadCloser
	s   *scrubber
	in  []byte // read, not yet searched: held back
	out []byte // searched; out[off:] not yet returned
	off int
	err error // sticky, once in is done with
}

func (r *scrubBody) Read(b []byte) (int, error) {
	for r.off == len(r.out) {
		if r.err != nil {
			return 0, r.err
		}
		if r.in == nil {
			r.in = make([]byte, 0, scrubChunk+r.s.longest)
		}
		r.out, r.off = r.out[:0], 0
		n, err := r.rc.Read(r.in[len(r.in) : len(r.in)+scrubChunk])
		r.in = r.in[:len(r.in)+n]
		limit := len(r.in) - (r.s.longest - 1)
		switch {
		case err == io.EOF:
			r.err, limit = io.EOF, len(r.in)
		case err != nil:
			r.err, r.in = err, r.in[:0]
			continue
		}
		if limit <= 0 {
			continue
		}
		var stop int
		r.out, stop = r.s.replace(r.out, r.in, limit)
		r.in = r.in[:copy(r.in, r.in[stop:])]
	}
	n := copy(b, r.out[r.off:])
	r.off += n
	return n, nil
}

func (r *scrubBody) Close() error { return r.rc.Close() }

// errBomb cuts a gzip body that decodes to too much.
var errBomb = errors.New("the gzip body decodes to more than the scrub's bound")

// gunzipBody decodes a gzip body, every member of it, and cuts it (errBomb)
// once it has decoded more than expansionFloor bytes and more than
// maxExpansion times what it read from the wire.
type gunzipBody struct {
	rc     io.ReadCloser
	wire   *countReader
	zr     *gzip.Reader
	out    int64
	onBomb func(decoded, wire int64)
	err    error // sticky
}

func (g *gunzipBody) Read(p []byte) (int, error) {
	if g.err != nil {
		return 0, g.err
	}
	if g.zr == nil {
		if g.zr, g.err = gzip.NewReader(g.wire); g.err != nil {
			return 0, g.err
		}
	}
	n, err := g.zr.Read(p)
	g.out += int64(n)
	if g.out > expansionFloor && g.out > maxExpansion*g.wire.n {
		if g.onBomb != nil {
			g.onBomb(g.out, g.wire.n)
		}
		n, err = 0, errBomb
	}
	if err != nil {
		g.err = err
	}
	return n, err
}

func (g *gunzipBody) Close() error { return g.rc.Close() }

// countReader counts the bytes read through it.
type countReader struct {
	r io.Reader
	n int64
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}
