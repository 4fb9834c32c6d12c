package client

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/api"
)

// maxEventLine bounds one NDJSON line of a streamed exec.
const maxEventLine = 16 << 20

// Session is a handle on one session. It is safe for concurrent use.
type Session struct {
	c  *Client
	id string
}

// ID returns the session's id.
func (s *Session) ID() string { return s.id }

func (s *Session) path(suffix string) string { return "/v1/sessions/" + url.PathEscape(s.id) + suffix }

// filePath escapes each segment of p and keeps the slashes, so an absolute
// path becomes "/files//abs/path" and ".." segments are sent as they are.
func (s *Session) filePath(p string) string {
	segs := strings.Split(p, "/")
	for i, seg := range segs {
		segs[i] = url.PathEscape(seg)
	}
	return s.path("/files/" + strings.Join(segs, "/"))
}

// ExecRequest is one command to run in a session.
type ExecRequest struct {
	// Args is the command line; Args[0] must be in the policy's
	// allowed_tools.
	Args []string

	// Dir is the working directory in the sandbox. Empty means the
	// session's workspace, else /tmp.
	Dir string

	// Env adds NAME=value pairs for this exec. Nil adds nothing.
	Env []string

	// Stdin is the command's standard input. Empty means none.
	Stdin string

	// Timeout bounds the exec; the server kills it when it passes. Zero
	// means the policy's max_wall, which also caps it.
	Timeout time.Duration

	// OnOutput, when set, streams the output: it is called with "stdout"
	// or "stderr" and each chunk as the command produces it, in order,
	// from the goroutine that called Exec. Nil waits for the report only.
	OnOutput func(stream string, data []byte)
}

// Exec runs a command in the session and returns its report. A command
// that fails, is refused or is halted by a budget is a report, not an
// error; errors are about the request or the session (an *Error with code
// "session_ended" once it has ended).
func (s *Session) Exec(ctx context.Context, req ExecRequest) (*api.Report, error) {
	body := api.ExecBody{Args: req.Args, Dir: req.Dir, Env: req.Env, Stdin: req.Stdin}
	if req.Timeout > 0 {
		body.Timeout = req.Timeout.String()
	}
	if req.OnOutput == nil {
		var out api.ExecResult
		if err := s.c.doJSON(ctx, "POST", s.path("/exec"), body, &out); err != nil {
			return nil, err
		}
		if out.Report == nil {
			return nil, errors.New("client: exec: the answer has no report")
		}
		return out.Report, nil
	}

	b, err := json.Marshal(body)
	if err != nil {
		return nil, fmt.Errorf("client: encode request: %w", err)
	}
	hr, err := s.c.newRequest(ctx, "POST", s.path("/exec?stream=1"), strings.NewReader(string(b)))
	if err != nil {
		return nil, err
	}
	hr.Header.Set("Content-Type", "application/json")
	resp, err := s.c.send(hr)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return readStream(resp.Body, resp.StatusCode, req.OnOutput)
}

// readStream reads NDJSON events until the report or an error line.
func readStream(r io.Reader, status int, onOutput func(string, []byte)) (*api.Report, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxEventLine)
	for sc.Scan() {
		var ev api.Event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return nil, fmt.Errorf("client: exec stream: bad line: %w", err)
		}
		switch {
		case ev.Report != nil:
			return ev.Report, nil
		case ev.Error != nil:
			// The status was 200 when the stream began; the error is what
			// the plain answer would have been.
			ev.Error.Status = 500
			if ev.Error.Code == "session_ended" {
				ev.Error.Status = 410
			}
			return nil, ev.Error
		case ev.Stream != "":
			onOutput(ev.Stream, []byte(ev.Data))
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("client: exec stream: %w", err)
	}
	return nil, fmt.Errorf("client: exec stream ended without a report (status %d): the connection was cut", status)
}

// Upload writes r's content to path in the session (relative to its
// workspace, or absolute), creating parent directories.
func (s *Session) Upload(ctx context.Context, path string, r io.Reader) error {
	req, err := s.c.newRequest(ctx, "PUT", s.filePath(path), r)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := s.c.send(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20)) // drained so the connection is reused
	return nil
}

// Download returns the content of path in the session.
func (s *Session) Download(ctx context.Context, path string) ([]byte, error) {
	req, err := s.c.newRequest(ctx, "GET", s.filePath(path), nil)
	if err != nil {
		return nil, err
	}
	resp, err := s.c.send(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, s.c.maxDownload+1))
	if err != nil {
		return nil, fmt.Errorf("client: download %s: %w", path, err)
	}
	if int64(len(data)) > s.c.maxDownload {
		return nil, fmt.Errorf("client: download %s: larger than %d bytes: raise Options.MaxDownload", path, s.c.maxDownload)
	}
	return data, nil
}

// List returns the entries of dir (relative to the workspace, or absolute;
// "" is the workspace), sorted by name.
func (s *Session) List(ctx context.Context, dir string) ([]api.Entry, error) {
	p := s.path("/files")
	if dir != "" {
		p += "?dir=" + url.QueryEscape(dir)
	}
	var out struct {
		Entries []api.Entry `json:"entries"`
	}
	if err := s.c.doJSON(ctx, "GET", p, nil, &out); err != nil {
		return nil, err
	}
	return out.Entries, nil
}

// Delete removes a file, a symlink or an empty directory.
func (s *Session) Delete(ctx context.Context, path string) error {
	return s.c.doJSON(ctx, "DELETE", s.filePath(path), nil, nil)
}

// Info returns the session's deadlines and usage.
func (s *Session) Info(ctx context.Context) (*api.SessionInfo, error) {
	var info api.SessionInfo
	if err := s.c.doJSON(ctx, "GET", s.path(""), nil, &info); err != nil {
		return nil, err
	}
	return &info, nil
}

// Extend moves the session's end d past its current end (never beyond its
// max_deadline) and returns the session with its new deadline.
func (s *Session) Extend(ctx context.Context, d time.Duration) (*api.SessionInfo, error) {
	var info api.SessionInfo
	if err := s.c.doJSON(ctx, "POST", s.path("/extend"), map[string]string{"by": d.String()}, &info); err != nil {
		return nil, err
	}
	return &info, nil
}

// Destroy ends the session and everything running in it.
func (s *Session) Destroy(ctx context.Context) error {
	return s.c.doJSON(ctx, "DELETE", s.path(""), nil, nil)
}
