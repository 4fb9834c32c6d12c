package server

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/api"
)

// exec is POST /v1/sessions/{id}/exec: one command, its report as JSON or
// its output streamed as NDJSON (stream=1).
func (s *Server) exec(w http.ResponseWriter, r *http.Request, owner int) {
	setDeadlines(w, jsonTimeout, 0)
	var req api.ExecBody
	if ae := s.decodeJSON(w, r, owner, &req); ae != nil {
		writeError(w, ae)
		return
	}
	// The exec may outlive the body's deadline; the connection must not.
	_ = http.NewResponseController(w).SetReadDeadline(time.Time{}) // unsupported by test recorders
	if len(req.Args) == 0 || req.Args[0] == "" {
		writeError(w, errorf(http.StatusBadRequest, "bad_request", "no command: send \"args\" with the command first, e.g. [\"python3\", \"job.py\"]"))
		return
	}
	var timeout time.Duration
	if req.Timeout != "" {
		d, err := time.ParseDuration(req.Timeout)
		if err != nil || d <= 0 {
			writeError(w, errorf(http.StatusBadRequest, "bad_request", "timeout "+strconv.Quote(req.Timeout)+" is not a positive Go duration: use e.g. \"30s\""))
			return
		}
		timeout = d
	}
	stream, err := strconv.ParseBool(orDefault(r.URL.Query().Get("stream"), "0"))
	if err != nil {
		writeError(w, errorf(http.StatusBadRequest, "bad_request", "stream must be 1 or 0"))
		return
	}
	e, ae := s.acquire(owner, r.PathValue("id"))
	if ae != nil {
		writeError(w, ae)
		return
	}
	defer s.release(e)
	if !s.startExec(e) {
		writeError(w, errorf(http.StatusTooManyRequests, "quota_exceeded", "this session already runs "+strconv.Itoa(s.cfg.MaxExecs)+" execs at once: wait for one to end, then retry"))
		return
	}
	defer s.endExec(e)

	xr := api.ExecRequest{Args: req.Args, Dir: req.Dir, Env: req.Env, PTY: req.PTY, Timeout: timeout}
	if req.Stdin != "" {
		xr.Stdin = strings.NewReader(req.Stdin)
	}
	var es *eventStream
	if stream {
		es = newEventStream(w)
		xr.Stdout, xr.Stderr = es.writer("stdout"), es.writer("stderr")
	}
	rep, err := e.sess.Exec(r.Context(), xr)
	var fail *api.Error
	switch {
	case err != nil:
		fail = s.execError(e, err)
	case rep == nil:
		s.log.Error("airlock bug: exec returned neither a report nor an error", "session", e.id)
		fail = errorf(http.StatusInternalServerError, "internal", "internal error: the server log has the details")
	case !s.cfg.AgentAdvice && rep.Operator != nil:
		// The report's operator field names the policy changes that would
		// allow its denials: the operator's advice, not the client's. The
		// session's report stays as it was.
		cp := *rep
		cp.Operator = nil
		rep = &cp
	}
	if es != nil {
		es.finish(rep, fail)
		return
	}
	setDeadlines(w, 0, jsonTimeout)
	if fail != nil {
		writeError(w, fail)
		return
	}
	writeJSON(w, http.StatusOK, api.ExecResult{Report: rep})
}

// execError turns an Exec error into a public one.
func (s *Server) execError(e *entry, err error) *api.Error {
	if errors.Is(err, api.ErrSessionClosed) {
		s.end(e, endDeadline)
		s.mu.Lock()
		reason := s.ended.byID[e.id].reason
		s.mu.Unlock()
		return &api.Error{Status: http.StatusGone, Code: "session_ended", Message: "session ended (" + reason + "): create a new session"}
	}
	s.log.Info("exec refused", "session", e.id, "err", err)
	// Exec errors other than a closed session are misuse of the request:
	// their text is about the args, dir and env the client sent.
	return errorf(http.StatusBadRequest, "bad_exec", err.Error())
}

// orDefault returns v, or def when v is empty.
func orDefault(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

// startExec counts one more exec of e, or reports false when e already
// runs Config.MaxExecs: every exec holds its request, its stdin and, when
// streamed, a response, so a session may not hold them without bound.
func (s *Server) startExec(e *entry) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e.execs >= s.cfg.MaxExecs {
		return false
	}
	e.execs++
	return true
}

// endExec ends an exec begun by startExec.
func (s *Server) endExec(e *entry) {
	s.mu.Lock()
	e.execs--
	s.mu.Unlock()
}
