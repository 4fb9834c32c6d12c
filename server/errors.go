package server

import (
	"encoding/json"
	"errors"
	"io/fs"
	"net/http"
	"strconv"
	"syscall"

	"github.com/airlock-sandbox/airlock/audit"
	"github.com/airlock-sandbox/airlock/guard"
	"github.com/airlock-sandbox/airlock/policy"
	"github.com/airlock-sandbox/airlock/policy/budget"
)

// apiError is an error whose status, code and message are safe to send to
// the client. Everything else about a failure goes to the log.
type apiError struct {
	Status   int        `json:"-"`
	Code     string     `json:"code"`
	Message  string     `json:"message"`
	Denial   *denial    `json:"denial,omitempty"`
	Problems []problem  `json:"problems,omitempty"`
	Exceeds  []excess   `json:"exceeds,omitempty"` // 403 exceeds_ceiling: every grant beyond the ceiling
	allow    string     // Allow header for 405
	ended    *tombstone // for 410: why the session ended
}

func (e *apiError) Error() string { return e.Code + ": " + e.Message }

// denial is the structured refusal of a 403, the same fields as a report's
// denials (DESIGN §4).
type denial struct {
	Layer      string `json:"layer"`
	Op         string `json:"op"`
	Target     string `json:"target"`
	Rule       string `json:"rule"`
	Message    string `json:"message"`
	Suggestion string `json:"suggestion,omitempty"`
}

// problem is one policy parse error with its position.
type problem struct {
	Line    int    `json:"line,omitempty"`
	Col     int    `json:"col,omitempty"`
	Message string `json:"message"`
}

func errorf(status int, code, msg string) *apiError {
	return &apiError{Status: status, Code: code, Message: msg}
}

// writeJSON sends v with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b = []byte(`{"error":{"code":"internal","message":"the response could not be encoded: see the server log"}}`)
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(b)+1))
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	// A write error means the client went away; there is nobody to tell.
	_, _ = w.Write(append(b, '\n'))
}

// writeError sends e as {"error":{...}}.
func writeError(w http.ResponseWriter, e *apiError) {
	if e.allow != "" {
		w.Header().Set("Allow", e.allow)
	}
	if e.Status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="airlock"`)
	}
	writeJSON(w, e.Status, struct {
		Error *apiError `json:"error"`
	}{e})
}

// guardError turns an error of a guard file operation on the client's path
// into a public error. The canonical path in a denial is the path the
// client asked for, resolved; it is inside the sandbox's view, not a secret.
// p is the session's policy, used to tell a path outside the grants from
// one refused while resolving it.
func guardError(err error, op, clientPath string, p *policy.Policy) *apiError {
	var de *policy.DenyError
	var ee *budget.ExhaustedError
	switch {
	case errors.As(err, &de):
		d := &denial{Layer: audit.LayerFS, Op: de.Op, Target: de.Subject, Rule: de.Cap.String(), Message: de.Reason, Suggestion: de.Suggestion()}
		if d.Op == "" {
			d.Op = op
		}
		if d.Message == "" {
			d.Message = "path is outside " + d.Rule
		}
		granted := p.CanRead(de.Subject)
		if de.Cap == policy.FSWrite {
			granted = p.CanWrite(de.Subject)
		}
		if granted {
			// The grant covers the path: resolution beneath the grant refused
			// it (a symlink or hard link leading out, a special file).
			d.Suggestion = "use the real path inside the grant: symlinks, hard links and special files that lead outside it are refused"
		}
		return &apiError{Status: http.StatusForbidden, Code: "denied", Message: op + " " + strconv.Quote(clientPath) + " denied: " + d.Message, Denial: d}
	case errors.As(err, &ee):
		if ee.Limit == budget.MaxWall {
			return errorf(http.StatusGone, "session_ended", "the session's max_wall deadline has passed: create a new session")
		}
		rule := string(ee.Limit)
		d := &denial{Layer: audit.LayerBudget, Op: op, Target: clientPath, Rule: rule, Message: rule + " exhausted", Suggestion: "raise " + rule + " in the policy's budget"}
		return &apiError{Status: http.StatusForbidden, Code: "budget_exhausted", Message: op + " " + strconv.Quote(clientPath) + " refused: the session's " + rule + " budget is exhausted", Denial: d}
	case errors.Is(err, guard.ErrClosed):
		return errorf(http.StatusGone, "session_ended", "the session has ended: create a new session")
	case errors.Is(err, fs.ErrNotExist):
		return errorf(http.StatusNotFound, "file_not_found", "no such file or directory: "+strconv.Quote(clientPath))
	case errors.Is(err, syscall.EISDIR):
		return errorf(http.StatusConflict, "is_directory", strconv.Quote(clientPath)+" is a directory: name a file")
	case errors.Is(err, syscall.ENOTDIR):
		return errorf(http.StatusConflict, "not_directory", "a component of "+strconv.Quote(clientPath)+" is not a directory")
	case errors.Is(err, syscall.ENOTEMPTY):
		return errorf(http.StatusConflict, "directory_not_empty", strconv.Quote(clientPath)+" is a directory that is not empty: delete its entries first")
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return errorf(http.StatusInsufficientStorage, "no_space", "no space left for "+strconv.Quote(clientPath))
	case errors.Is(err, errors.ErrUnsupported):
		return errorf(http.StatusNotImplemented, "unsupported", "file operations are not supported on this server's operating system")
	}
	return nil
}
