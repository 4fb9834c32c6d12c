package server

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/policy"
)

// policyName is what a named policy may be called; it maps to
// PolicyDir/NAME.yaml and nothing else.
var policyName = regexp.MustCompile(`^[a-z0-9-]{1,64}$`)

// netNow is for network deadlines, which the kernel measures on the real
// clock whatever Config.Clock says.
var netNow = time.Now

// jsonTimeout bounds reading a JSON body and writing a JSON response.
const jsonTimeout = 30 * time.Second

func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

func (s *Server) openapi(w http.ResponseWriter, r *http.Request) {
	doc := api.OpenAPI()
	w.Header().Set("Content-Type", "application/yaml")
	w.Header().Set("Content-Length", strconv.Itoa(len(doc)))
	// A write error means the client went away.
	_, _ = io.WriteString(w, doc)
}

// setDeadlines bounds how long the handler reads the body and writes the
// response. Writers that do not support deadlines (tests) are left as is.
func setDeadlines(w http.ResponseWriter, read, write time.Duration) {
	rc := http.NewResponseController(w)
	if read > 0 {
		_ = rc.SetReadDeadline(netNow().Add(read)) // unsupported by test recorders
	}
	if write > 0 {
		_ = rc.SetWriteDeadline(netNow().Add(write)) // unsupported by test recorders
	}
}

// createRequest is the body of POST /v1/sessions: exactly one of Policy (the
// YAML or JSON text of a policy) and PolicyName.
type createRequest struct {
	Policy     *string `json:"policy"`
	PolicyName string  `json:"policy_name"`
}

func (s *Server) createSession(w http.ResponseWriter, r *http.Request, owner int) {
	setDeadlines(w, jsonTimeout, 0)
	var req createRequest
	if ae := s.decodeJSON(w, r, owner, &req); ae != nil {
		writeError(w, ae)
		return
	}
	p, ae := s.loadPolicy(req)
	if ae == nil {
		// Before any effect: a refused policy starts nothing.
		p, ae = s.admit(p, req.PolicyName != "", owner)
	}
	if ae == nil {
		ae = missingGrants(p)
	}
	if ae != nil {
		writeError(w, ae)
		return
	}

	s.mu.Lock()
	switch {
	case s.closing:
		s.mu.Unlock()
		writeError(w, errorf(http.StatusServiceUnavailable, "shutting_down", "the server is shutting down: retry on another server"))
		return
	case s.owned[owner] >= s.cfg.MaxSessions:
		s.mu.Unlock()
		writeError(w, errorf(http.StatusTooManyRequests, "quota_exceeded", "this token already holds "+strconv.Itoa(s.cfg.MaxSessions)+" sessions: destroy one first"))
		return
	}
	s.owned[owner]++ // reserved before the slow start, released on failure
	s.mu.Unlock()
	unreserve := func() {
		s.mu.Lock()
		s.owned[owner]--
		s.mu.Unlock()
	}

	p, ws, ae := s.privateWorkspace(p, req.PolicyName != "")
	if ae != nil {
		unreserve()
		writeError(w, ae)
		return
	}
	sess, err := s.cfg.NewSession(s.baseCtx, p)
	if err != nil {
		unreserve()
		s.removeWorkspace(ws)
		s.log.Error("session start", "owner", owner, "err", err)
		writeError(w, errorf(http.StatusInternalServerError, "sandbox_failed", "the sandbox could not start (does every granted path exist on the server, and can this host enforce the policy?): the server log has the details"))
		return
	}
	info := sess.Info()
	now := s.clock.Now()
	e := &entry{sess: sess, id: sess.ID(), owner: owner, policy: p, workspace: info.Workspace, private: ws, created: now, lastUse: now}
	s.mu.Lock()
	if s.closing || s.sessions[e.id] != nil {
		s.owned[owner]--
		closing := s.closing
		s.mu.Unlock()
		_ = sess.Close() // never used; its error is of no interest to anyone
		s.removeWorkspace(ws)
		if closing {
			writeError(w, errorf(http.StatusServiceUnavailable, "shutting_down", "the server is shutting down: retry on another server"))
			return
		}
		s.log.Error("airlock bug: session id reused", "session", e.id)
		writeError(w, errorf(http.StatusInternalServerError, "internal", "internal error: the server log has the details"))
		return
	}
	s.sessions[e.id] = e
	s.cfg.Metrics.sessionStarted()
	s.sessionWG.Add(1)
	s.mu.Unlock()
	go s.watch(e)
	s.log.Info("session created", "session", e.id, "owner", owner, "source", p.Source(), "private_workspace", ws != "")
	writeJSON(w, http.StatusCreated, s.describe(e, info))
}

// missingGrants refuses, with 422, a policy whose fs_read or fs_write
// grants name paths the server does not have: the sandbox could not bind
// them, and the client should hear which, not an opaque 500. It runs after
// admit, so it only ever says whether a path inside the operator's ceiling
// (or the operator's own named policy) exists.
func missingGrants(p *policy.Policy) *api.Error {
	var missing []string
	for _, g := range append(p.FSRead(), p.FSWrite()...) {
		if _, err := os.Lstat(g); errors.Is(err, fs.ErrNotExist) {
			missing = append(missing, g)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	return errorf(http.StatusUnprocessableEntity, "grant_not_found", "the policy grants paths this server does not have: "+strings.Join(missing, ", ")+": create them on the server or remove the grants")
}

// privateWorkspace gives an inline policy without fs_write grants the
// session's own workspace: a new folder that becomes its fs_write grant.
// It returns the policy to run and the workspace ("" when none was made).
// Named policies are used as the operator wrote them.
func (s *Server) privateWorkspace(p *policy.Policy, named bool) (*policy.Policy, string, *api.Error) {
	if named || len(p.FSWrite()) > 0 {
		return p, "", nil
	}
	ws, err := s.ws.create()
	if err != nil {
		s.log.Error("create workspace", "dir", s.ws.dir, "err", err)
		return nil, "", errorf(http.StatusInternalServerError, "workspace_failed", "the session's workspace could not be created: the server log has the details")
	}
	wp, err := p.With(policy.Overrides{FSWrite: []string{ws}}, "")
	if err != nil {
		s.removeWorkspace(ws)
		s.log.Error("airlock bug: workspace grant refused", "workspace", ws, "err", err)
		return nil, "", errorf(http.StatusInternalServerError, "internal", "internal error: the server log has the details")
	}
	return wp, ws, nil
}

// removeWorkspace deletes a private workspace ("" is none) once its
// session has ended or never started.
func (s *Server) removeWorkspace(ws string) {
	if ws == "" {
		return
	}
	if err := s.ws.remove(ws); err != nil {
		s.log.Error("remove workspace", "workspace", ws, "err", err)
	}
}

// loadPolicy parses the inline policy or reads the named one.
func (s *Server) loadPolicy(req createRequest) (*policy.Policy, *api.Error) {
	switch {
	case req.Policy != nil && req.PolicyName != "":
		return nil, errorf(http.StatusBadRequest, "bad_request", "both policy and policy_name given: send one")
	case req.Policy != nil:
		return parsePolicy([]byte(*req.Policy), policy.ParseOptions{File: "policy"})
	case req.PolicyName == "":
		return nil, errorf(http.StatusBadRequest, "bad_request", "no policy: send \"policy\" (YAML or JSON text) or \"policy_name\"")
	case !policyName.MatchString(req.PolicyName):
		return nil, errorf(http.StatusBadRequest, "bad_policy_name", "policy_name must match [a-z0-9-]+ (at most 64 characters)")
	case s.cfg.PolicyDir == "":
		return nil, errorf(http.StatusNotFound, "unknown_policy", "this server has no named policies: send the policy text instead")
	}
	root, err := os.OpenRoot(s.cfg.PolicyDir)
	if err != nil {
		s.log.Error("open policy dir", "dir", s.cfg.PolicyDir, "err", err)
		return nil, errorf(http.StatusInternalServerError, "internal", "the policy folder cannot be opened: the server log has the details")
	}
	defer root.Close()
	file := req.PolicyName + ".yaml"
	f, err := root.Open(file)
	if err != nil {
		s.log.Info("named policy", "name", req.PolicyName, "err", err)
		return nil, errorf(http.StatusNotFound, "unknown_policy", "no policy named "+strconv.Quote(req.PolicyName))
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, policy.MaxInputSize+1))
	if err != nil {
		s.log.Error("read named policy", "name", req.PolicyName, "err", err)
		return nil, errorf(http.StatusInternalServerError, "internal", "the policy cannot be read: the server log has the details")
	}
	return parsePolicy(data, policy.ParseOptions{File: file, BaseDir: s.cfg.PolicyDir})
}

// parsePolicy returns a 400 listing every problem with its line and column.
func parsePolicy(data []byte, opts policy.ParseOptions) (*policy.Policy, *api.Error) {
	p, err := policy.Parse(data, opts)
	if err == nil {
		return p, nil
	}
	e := &api.Error{Status: http.StatusBadRequest, Code: "bad_policy"}
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	var msgs []string
	for _, err := range errs {
		pr := api.Problem{Message: err.Error()}
		var pe *policy.ParseError
		if errors.As(err, &pe) {
			pr = api.Problem{Line: pe.Line, Col: pe.Col, Message: pe.Msg}
		}
		e.Problems = append(e.Problems, pr)
		msgs = append(msgs, err.Error())
	}
	e.Message = "invalid policy: " + strings.Join(msgs, "; ")
	return nil, e
}

// describe renders e with the sandbox's view of it, info: the server's
// id, workspace and idle deadline, and never a null list.
func (s *Server) describe(e *entry, info api.SessionInfo) api.SessionInfo {
	s.mu.Lock()
	last := e.lastUse
	s.mu.Unlock()
	info.ID, info.Workspace, info.IdleDeadline = e.id, e.workspace, last.Add(s.cfg.Idle)
	if info.PendingDenials == nil {
		info.PendingDenials = []api.Denial{}
	}
	return info
}

func (s *Server) listSessions(w http.ResponseWriter, r *http.Request, owner int) {
	setDeadlines(w, 0, jsonTimeout)
	s.mu.Lock()
	var mine []*entry
	for _, e := range s.sessions {
		if e.owner == owner {
			mine = append(mine, e)
		}
	}
	s.mu.Unlock()
	slices.SortFunc(mine, func(a, b *entry) int {
		if c := a.created.Compare(b.created); c != 0 {
			return c
		}
		return strings.Compare(a.id, b.id)
	})
	out := make([]api.SessionInfo, 0, len(mine))
	for _, e := range mine {
		out = append(out, s.describe(e, e.sess.Info()))
	}
	writeJSON(w, http.StatusOK, map[string]any{"sessions": out})
}

func (s *Server) sessionInfo(w http.ResponseWriter, r *http.Request, owner int) {
	setDeadlines(w, 0, jsonTimeout)
	e, ae := s.acquire(owner, r.PathValue("id"))
	if ae != nil {
		writeError(w, ae)
		return
	}
	defer s.release(e)
	writeJSON(w, http.StatusOK, s.describe(e, e.sess.Info()))
}

// extendRequest is the body of POST /v1/sessions/{id}/extend.
type extendRequest struct {
	By string `json:"by"` // a Go duration such as "30m": how much later the session ends
}

// extendSession moves a session's end (its lifetime; each exec keeps
// max_wall) by the duration asked past its current end, up to the most
// the server allows from its start, and answers with the session as GET
// does.
func (s *Server) extendSession(w http.ResponseWriter, r *http.Request, owner int) {
	setDeadlines(w, jsonTimeout, jsonTimeout)
	var req extendRequest
	if ae := s.decodeJSON(w, r, owner, &req); ae != nil {
		writeError(w, ae)
		return
	}
	d, err := policy.ParseDuration(req.By)
	if err != nil || d <= 0 {
		writeError(w, errorf(http.StatusBadRequest, "bad_request", fmt.Sprintf("by %q: give how much longer the session should live, past its current end, a duration such as \"30m\"", req.By)))
		return
	}
	e, ae := s.acquire(owner, r.PathValue("id"))
	if ae != nil {
		writeError(w, ae)
		return
	}
	defer s.release(e)
	if _, err := s.extendBy(e.sess, d); err != nil {
		writeError(w, errorf(http.StatusGone, "session_ended", "the session has ended: create a new session"))
		return
	}
	writeJSON(w, http.StatusOK, s.describe(e, e.sess.Info()))
}

func (s *Server) destroySession(w http.ResponseWriter, r *http.Request, owner int) {
	setDeadlines(w, 0, jsonTimeout)
	e, ae := s.acquire(owner, r.PathValue("id"))
	if ae != nil {
		writeError(w, ae)
		return
	}
	s.release(e)
	s.end(e, endDestroyed)
	w.WriteHeader(http.StatusNoContent)
}

// extendBy moves the session's end by d past its current end, never
// beyond its maximum lifetime, and returns the end in force
// (Session.Extend: two extensions of 30 minutes add an hour).
func (s *Server) extendBy(sess Session, d time.Duration) (time.Time, error) {
	return sess.Extend(d)
}
