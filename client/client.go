// Package client is the Go client for the airlock HTTP API (`airlock serve`):
// create a session, run commands in it with their output streamed back,
// move files in and out, and destroy it.
//
// It imports only the standard library: a program that drives airlock over
// HTTP must not link the sandbox, its enforcement code or the policy
// parser. Errors from the server are *Error values carrying the status, the
// API's error code and, for refusals, the structured denial, so an agent
// can tell what was refused and why. Paths are sent segment by segment as
// given (never cleaned here), so the server's guard, not this package,
// decides what a path may reach.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Options tunes a Client. The zero Options is ready to use.
type Options struct {
	// HTTPClient sends the requests. Nil means a client with no overall
	// timeout (execs may run for the session's whole deadline); bound
	// calls with their context.
	HTTPClient *http.Client

	// MaxDownload caps the bytes Download accepts. Zero means 64 MiB.
	MaxDownload int64
}

// Client talks to one airlock server with one token. It is safe for
// concurrent use.
type Client struct {
	base        *url.URL
	token       string
	hc          *http.Client
	maxDownload int64
}

// New returns a client for the server at baseURL (e.g.
// "http://127.0.0.1:8080"). An empty token sends no Authorization header
// (a server started with --insecure-no-auth).
func New(baseURL, token string, opts Options) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("client: base URL %q: want http://HOST:PORT or https://HOST:PORT", baseURL)
	}
	if strings.ContainsAny(token, " \t\r\n") {
		return nil, errors.New("client: token contains white space: pass the token alone, without \"Bearer\"")
	}
	c := &Client{base: u, token: token, hc: opts.HTTPClient, maxDownload: opts.MaxDownload}
	if c.hc == nil {
		c.hc = &http.Client{}
	}
	if c.maxDownload == 0 {
		c.maxDownload = 64 << 20
	}
	return c, nil
}

// Error is an error answered by the server.
type Error struct {
	Status   int       // HTTP status, e.g. 403
	Code     string    // API error code, e.g. "denied", "session_ended"
	Message  string    // public explanation from the server
	Denial   *Denial   // set on refusals (403)
	Problems []Problem // set on invalid policies (code "bad_policy")
	// Operator is the policy change that would allow a refusal: advice
	// for the operator, sent only by a server started with --agent-advice.
	Operator *Operator
}

func (e *Error) Error() string {
	return "airlock api: " + strconv.Itoa(e.Status) + " " + e.Code + ": " + e.Message
}

// Problem is one error in a policy, at 1-based Line and Col (zero when the
// problem has no position).
type Problem struct {
	Line    int    `json:"line"`
	Col     int    `json:"col"`
	Message string `json:"message"`
}

// Denial is one refused operation, naming the grant that would allow it.
type Denial struct {
	Layer   string `json:"layer"`
	Op      string `json:"op"`
	Target  string `json:"target"`
	Rule    string `json:"rule"`
	Message string `json:"message"`
	// Hint says what can be done instead within the grants; "" when
	// there is nothing to add.
	Hint string `json:"hint,omitempty"`
	// Count is how many times it happened, in a report or session info;
	// 0 in the denial of a refused request.
	Count int64 `json:"count,omitempty"`
}

// DenialCounts counts every denial of an exec or session, itemized or not.
type DenialCounts struct {
	Total   int64            `json:"total"`
	ByLayer map[string]int64 `json:"by_layer"` // e.g. "net": 12
	// Dropped is how many of Total are not itemized, because the list
	// already held the most distinct denials a report keeps.
	Dropped int64 `json:"dropped"`
}

// Usage is what a session or an exec consumed.
type Usage struct {
	CPUMS          int64 `json:"cpu_ms"`
	MaxMemoryBytes int64 `json:"max_memory_bytes"`
	Ops            int64 `json:"ops"`
	OutputBytes    int64 `json:"output_bytes"`
	WriteBytes     int64 `json:"write_bytes"` // added to fs_write grants (max_write)
}

// Enforcement says which layers held during an exec.
type Enforcement struct {
	Namespaces bool     `json:"namespaces"`
	Landlock   int      `json:"landlock_abi"`
	Seccomp    bool     `json:"seccomp"`
	Cgroup     string   `json:"cgroup,omitempty"`
	Downgrades []string `json:"downgrades,omitempty"`
	FSDenials  string   `json:"fs_denials"`
}

// Report is the result of one exec (the `airlock run --json` report).
type Report struct {
	ExitCode        int          `json:"exit_code"`
	Signal          *int         `json:"signal"`
	HaltedBy        *string      `json:"halted_by"`
	DurationMS      int64        `json:"duration_ms"`
	Stdout          string       `json:"stdout"`
	Stderr          string       `json:"stderr"`
	StdoutTruncated bool         `json:"stdout_truncated"`
	StderrTruncated bool         `json:"stderr_truncated"`
	Usage           Usage        `json:"usage"`
	Denials         []Denial     `json:"denials"` // distinct, each with its count
	DenialCounts    DenialCounts `json:"denial_counts"`
	Error           string       `json:"error,omitempty"`
	Enforcement     Enforcement  `json:"enforcement"`
	Writes          *Writes      `json:"writes,omitempty"`
	// Operator is the operator's advice: the policy changes that would
	// allow the exec's denials and halt. Only a server started with
	// --agent-advice sends it; nil otherwise.
	Operator *Operator `json:"operator,omitempty"`
}

// Operator is advice for the operator who writes the policy. Every change
// in it widens the policy.
type Operator struct {
	Suggestions []OperatorSuggestion `json:"suggestions"`
}

// OperatorSuggestion is the policy change that would allow one denial or
// halt, which Layer, Op, Target and Rule name as in Report.Denials.
type OperatorSuggestion struct {
	Layer      string   `json:"layer"`
	Op         string   `json:"op,omitempty"`
	Target     string   `json:"target,omitempty"`
	Rule       string   `json:"rule"`
	Suggestion string   `json:"suggestion"` // as text, e.g. add "pypi.org:443" to net_hosts
	Changes    []Change `json:"changes"`
}

// Change is one edit of a policy file, as policy.Change.
type Change struct {
	Action string `json:"action"` // "add", "remove" or "raise"
	Key    string `json:"key"`    // a policy list such as net_hosts, or a budget such as max_wall
	Value  string `json:"value"`  // the entry, or the new budget ("1m")
}

// SessionInfo describes a live session.
type SessionInfo struct {
	ID           string    `json:"id"`
	Created      time.Time `json:"created"`
	Deadline     time.Time `json:"deadline"`      // max_wall ends it then
	IdleDeadline time.Time `json:"idle_deadline"` // the idle timeout ends it then, unless used
	Workspace    string    `json:"workspace"`     // first fs_write grant; "" if none
	Execs        int       `json:"execs"`
	Usage        Usage     `json:"usage"`
	// PendingDenials are the denials not yet in an exec's report, e.g. of
	// background processes between execs; the next exec reports them.
	PendingDenials []Denial `json:"pending_denials"`
	// DenialCounts counts every denial since the session started.
	DenialCounts DenialCounts `json:"denial_counts"`
}

// Entry is one directory entry.
type Entry struct {
	Name string `json:"name"`
	Type string `json:"type"` // "file", "dir", "symlink" or "other"
	Size int64  `json:"size"`
	Mode string `json:"mode"` // permission bits in octal, e.g. "0644"
}

// Health reports whether the server answers GET /v1/health.
func (c *Client) Health(ctx context.Context) error {
	return c.doJSON(ctx, "GET", "/v1/health", nil, nil)
}

// CreateSession starts a session. Give exactly one of PolicyText (a policy
// file's YAML or JSON) and PolicyName (a policy in the server's
// --policy-dir).
func (c *Client) CreateSession(ctx context.Context, req CreateRequest) (*Session, error) {
	body := map[string]string{}
	if req.PolicyText != "" {
		body["policy"] = req.PolicyText
	}
	if req.PolicyName != "" {
		body["policy_name"] = req.PolicyName
	}
	var info SessionInfo
	if err := c.doJSON(ctx, "POST", "/v1/sessions", body, &info); err != nil {
		return nil, err
	}
	return &Session{c: c, id: info.ID}, nil
}

// CreateRequest says which policy a new session runs under. The zero
// CreateRequest is refused by the server: set one field.
type CreateRequest struct {
	PolicyText string // YAML or JSON text of a policy file (absolute paths only)
	PolicyName string // name of a policy in the server's --policy-dir
}

// Sessions lists the token's live sessions, oldest first.
func (c *Client) Sessions(ctx context.Context) ([]SessionInfo, error) {
	var out struct {
		Sessions []SessionInfo `json:"sessions"`
	}
	if err := c.doJSON(ctx, "GET", "/v1/sessions", nil, &out); err != nil {
		return nil, err
	}
	return out.Sessions, nil
}

// Session returns a handle for an existing session id. It does not check
// that the session exists.
func (c *Client) Session(id string) *Session { return &Session{c: c, id: id} }

// newRequest builds a request for the API path p (with an optional
// query), which must already be escaped.
func (c *Client) newRequest(ctx context.Context, method, p string, body io.Reader) (*http.Request, error) {
	// url.Parse keeps "..", "." and "//" as they are: the server's guard,
	// not this client, decides what a path may reach.
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimSuffix(c.base.String(), "/")+p, body)
	if err != nil {
		return nil, fmt.Errorf("client: %s %s: %w", method, p, err)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	return req, nil
}

// send runs req and turns an error answer into *Error. The caller closes
// the body of a successful response.
func (c *Client) send(req *http.Request) (*http.Response, error) {
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("client: %s %s: %w", req.Method, req.URL.Path, err)
	}
	if resp.StatusCode < 300 {
		return resp, nil
	}
	defer resp.Body.Close()
	return nil, readError(resp)
}

// readError decodes an error body, or describes one that is not JSON.
func readError(resp *http.Response) error {
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20)) // what was read is enough to explain
	var body struct {
		Error *struct {
			Code     string    `json:"code"`
			Message  string    `json:"message"`
			Denial   *Denial   `json:"denial"`
			Problems []Problem `json:"problems"`
			Operator *Operator `json:"operator"`
		} `json:"error"`
	}
	if json.Unmarshal(data, &body) != nil || body.Error == nil {
		msg := strings.TrimSpace(string(data))
		if len(msg) > 200 {
			msg = msg[:200] + "..."
		}
		return &Error{Status: resp.StatusCode, Code: "http_" + strconv.Itoa(resp.StatusCode), Message: "not an airlock API answer: " + msg}
	}
	e := body.Error
	return &Error{Status: resp.StatusCode, Code: e.Code, Message: e.Message, Denial: e.Denial, Problems: e.Problems, Operator: e.Operator}
}

// doJSON sends in as JSON (nil sends no body) and decodes the answer into
// out (nil discards it).
func (c *Client) doJSON(ctx context.Context, method, p string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("client: encode request: %w", err)
		}
		body = bytes.NewReader(b)
	}
	req, err := c.newRequest(ctx, method, p, body)
	if err != nil {
		return err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.send(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20)) // drained so the connection is reused
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("client: %s %s: decode answer: %w", method, p, err)
	}
	return nil
}

// Writes is what the copy back of a run's staged fs_write grants did.
type Writes struct {
	Complete     bool         `json:"complete"`
	Files        int          `json:"files"`
	Bytes        int64        `json:"bytes"`
	Dirs         int          `json:"dirs"`
	Symlinks     int          `json:"symlinks"`
	Removed      int          `json:"removed"`
	ModesDropped int          `json:"modes_dropped,omitempty"`
	Refused      []WriteEntry `json:"refused,omitempty"`
	RefusedTotal int          `json:"refused_total,omitempty"`
	Failed       []WriteEntry `json:"failed,omitempty"`
	FailedTotal  int          `json:"failed_total,omitempty"`
	Moved        []string     `json:"moved,omitempty"`
}

// WriteEntry is one path the copy back refused or failed on.
type WriteEntry struct {
	Path   string `json:"path"`
	Reason string `json:"reason"`
}
