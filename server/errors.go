package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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
	Status   int       `json:"-"`
	Code     string    `json:"code"`
	Message  string    `json:"message"`
	Denial   *denial   `json:"denial,omitempty"`
	Problems []problem `json:"problems,omitempty"`
	Exceeds  []excess  `json:"exceeds,omitempty"` // 403 exceeds_ceiling: every grant beyond the ceiling
	// Operator is the policy change that would allow a 403 denied, sent
	// only with Config.AgentAdvice: it is the operator's advice.
	Operator *operatorJSON `json:"operator,omitempty"`
	allow    string        // Allow header for 405
	ended    *tombstone    // for 410: why the session ended
}

func (e *apiError) Error() string { return e.Code + ": " + e.Message }

// denial is the structured refusal of a 403, the same fields as a report's
// denials (DESIGN §4).
type denial struct {
	Layer   string `json:"layer"`
	Op      string `json:"op"`
	Target  string `json:"target"`
	Rule    string `json:"rule"`
	Message string `json:"message"`
	Hint    string `json:"hint,omitempty"` // what to do instead within the grants
}

// operatorJSON is a report's operator field (sandbox.Operator): the
// operator's advice, never sent to a client without Config.AgentAdvice.
type operatorJSON struct {
	Suggestions []operatorSuggestion `json:"suggestions"`
}

type operatorSuggestion struct {
	Layer      string          `json:"layer"`
	Op         string          `json:"op,omitempty"`
	Target     string          `json:"target,omitempty"`
	Rule       string          `json:"rule"`
	Suggestion string          `json:"suggestion"`
	Changes    []policy.Change `json:"changes"`
}

// advise returns the operator field for d and fix, or nil when fix is
// zero or the server keeps advice from clients.
func advise(on bool, d *denial, fix policy.Suggestion) *operatorJSON {
	if !on || fix.IsZero() {
		return nil
	}
	return &operatorJSON{Suggestions: []operatorSuggestion{{Layer: d.Layer, Op: d.Op, Target: d.Target, Rule: d.Rule, Suggestion: fix.String(), Changes: fix.Changes}}}
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
// p is the session's policy; advice says whether the operator's advice (the
// policy change that would allow it) may go to the client.
func guardError(err error, op, clientPath string, p *policy.Policy, advice bool) *apiError {
	var de *policy.DenyError
	var ee *budget.ExhaustedError
	switch {
	case errors.As(err, &de):
		d := &denial{Layer: audit.LayerFS, Op: de.Op, Target: de.Subject, Rule: de.Cap.String(), Message: de.Reason, Hint: de.Hint}
		if d.Op == "" {
			d.Op = op
		}
		if d.Message == "" {
			d.Message = "path is outside " + d.Rule
		}
		return &apiError{Status: http.StatusForbidden, Code: "denied", Message: op + " " + strconv.Quote(clientPath) + " denied: " + d.Message, Denial: d,
			Operator: advise(advice, d, p.Suggest(de))}
	case errors.As(err, &ee):
		if ee.Limit == budget.MaxWall {
			return errorf(http.StatusGone, "session_ended", "the session's max_wall deadline has passed: create a new session")
		}
		rule := string(ee.Limit)
		d := &denial{Layer: audit.LayerBudget, Op: op, Target: clientPath, Rule: rule, Message: rule + " exhausted"}
		return &apiError{Status: http.StatusForbidden, Code: "budget_exhausted", Message: op + " " + strconv.Quote(clientPath) + " refused: the session's " + rule + " budget is exhausted", Denial: d,
			Operator: advise(advice, d, p.SuggestBudget(ee.Limit))}
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

// withoutOperator returns the JSON object report without its top-level
// "operator" field (the operator's advice), the other fields unchanged
// and in their order. It fails on anything that is not a JSON object, so
// a report it cannot read is never passed on with the advice in it.
func withoutOperator(report json.RawMessage) (json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(report))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, errors.New("server: report is not a JSON object")
	}
	var b bytes.Buffer
	b.WriteByte('{')
	first := true
	for dec.More() {
		t, err := dec.Token()
		key, ok := t.(string)
		if err != nil || !ok {
			return nil, errors.New("server: report has a malformed key")
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, fmt.Errorf("server: report field %q: %w", key, err)
		}
		if key == "operator" {
			continue
		}
		if !first {
			b.WriteByte(',')
		}
		first = false
		k, _ := json.Marshal(key) // a string always marshals
		b.Write(k)
		b.WriteByte(':')
		b.Write(v)
	}
	if t, err := dec.Token(); err != nil || t != json.Delim('}') {
		return nil, errors.New("server: report is not a JSON object")
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("server: report has data after its object")
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}
