// Package client is the Go client for the airlock HTTP API (`airlock serve`):
// create a session, run commands in it with their output streamed back,
// move files in and out, and destroy it.
//
// It imports only package api (the wire types, which the server sends) and
// the standard library: a program that drives airlock over HTTP must not
// link the sandbox, its enforcement code or the policy parser
// (deps_test.go checks this). Errors from the server are *Error (api.Error)
// values carrying the status, the API's error code and, for refusals, the
// structured denial, so an agent can tell what was refused and why. Paths are sent segment by segment as
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

	"github.com/airlock-sandbox/airlock/api"
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

// Error is an error answered by the server: the API's error body
// (api.Error) with its HTTP status. Refusals carry the structured denial,
// invalid policies their problems, refused ceilings every grant beyond
// them. An answer that is not the API's (a proxy's page) is an Error with
// code "http_STATUS".
type Error = api.Error

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
	var info api.SessionInfo
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
func (c *Client) Sessions(ctx context.Context) ([]api.SessionInfo, error) {
	var out struct {
		Sessions []api.SessionInfo `json:"sessions"`
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
	var body api.ErrorBody
	if json.Unmarshal(data, &body) != nil || body.Error == nil {
		msg := strings.TrimSpace(string(data))
		if len(msg) > 200 {
			msg = msg[:200] + "..."
		}
		return &Error{Status: resp.StatusCode, Code: "http_" + strconv.Itoa(resp.StatusCode), Message: "not an airlock API answer: " + msg}
	}
	body.Error.Status = resp.StatusCode
	return body.Error
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
