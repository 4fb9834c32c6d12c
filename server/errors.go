package server

import (
	"encoding/json"
	"errors"
	"io/fs"
	"net/http"
	"strconv"
	"syscall"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/audit"
	"github.com/airlock-sandbox/airlock/guard"
	"github.com/airlock-sandbox/airlock/internal/denial"
	"github.com/airlock-sandbox/airlock/policy"
	"github.com/airlock-sandbox/airlock/policy/budget"
)

func errorf(status int, code, msg string) *api.Error {
	return &api.Error{Status: status, Code: code, Message: msg}
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
func writeError(w http.ResponseWriter, e *api.Error) {
	switch {
	case e.Status == http.StatusUnauthorized:
		w.Header().Set("WWW-Authenticate", `Bearer realm="airlock"`)
	case e.Code == "server_busy":
		w.Header().Set("Retry-After", "1") // it lasts as long as other clients' transfers
	}
	writeJSON(w, e.Status, api.ErrorBody{Error: e})
}

// methodNotAllowed sends 405, naming the methods allow that the path
// serves.
func methodNotAllowed(w http.ResponseWriter, allow, msg string) {
	w.Header().Set("Allow", allow)
	writeError(w, errorf(http.StatusMethodNotAllowed, "method_not_allowed", msg))
}

// guardError turns an error of a guard file operation on the client's path
// into a public error. The canonical path in a denial is the path the
// client asked for, resolved; it is inside the sandbox's view, not a secret.
// p is the session's policy; advice says whether the operator's advice (the
// policy change that would allow it) may go to the client.
func guardError(err error, op, clientPath string, p *policy.Policy, advice bool) *api.Error {
	var ee *budget.ExhaustedError
	if errors.As(err, &ee) && (ee.Limit == budget.MaxWall || ee.Limit == budget.SessionLifetime) {
		return errorf(http.StatusGone, "session_ended", "the session's lifetime has ended: create a new session (extend one before its deadline with POST /v1/sessions/{id}/extend)")
	}
	if r, ok := denial.Of(err, op, clientPath, p); ok {
		e := &api.Error{Status: http.StatusForbidden, Code: "denied", Message: op + " " + strconv.Quote(clientPath) + " denied: " + r.Denial.Message, Denial: &r.Denial}
		if r.Denial.Layer == audit.LayerBudget {
			e.Code, e.Message = "budget_exhausted", op+" "+strconv.Quote(clientPath)+" refused: the session's "+r.Denial.Rule+" budget is exhausted"
		}
		if advice {
			e.Operator = r.Operator()
		}
		return e
	}
	switch {
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
