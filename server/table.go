package server

import (
	"net/http"
	"time"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/policy"
)

// Why a session ended, as told to a client that still uses its id.
const (
	endDestroyed = "destroyed"
	endIdle      = "idle timeout"
	endDeadline  = "its lifetime or max_ops ran out, or the sandbox ended"
	endShutdown  = "server shutdown"
)

// maxTombstones bounds how many ended sessions are remembered for 410.
const maxTombstones = 4096

// entry is one live session and the server's bookkeeping for it.
type entry struct {
	sess      Session
	id        string
	owner     int
	policy    *policy.Policy
	workspace string // as Info.Workspace: relative file paths resolve against it
	private   string // the private workspace the server made, removed at the end; "" when none
	created   time.Time

	// The fields below are guarded by Server.mu.
	lastUse time.Time // when a request last began or finished using it
	busy    int       // requests using it now; a busy session is never idle
	execs   int       // execs running in it now, at most Config.MaxExecs
}

// tombstone records an ended session so that its id answers 410, not 404.
type tombstone struct {
	owner  int
	reason string
}

// tombstones is a bounded map of ended sessions, oldest dropped first.
type tombstones struct {
	byID  map[string]tombstone
	order []string
}

func (t *tombstones) add(id string, ts tombstone) {
	if t.byID == nil {
		t.byID = map[string]tombstone{}
	}
	if len(t.order) >= maxTombstones {
		delete(t.byID, t.order[0])
		t.order = t.order[1:]
	}
	t.byID[id] = ts
	t.order = append(t.order, id)
}

// acquire finds owner's session id and marks it busy; the caller must call
// release. A session of another token is reported as unknown.
func (s *Server) acquire(owner int, id string) (*entry, *api.Error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.sessions[id]; ok && e.owner == owner {
		e.busy++
		e.lastUse = s.clock.Now()
		return e, nil
	}
	if ts, ok := s.ended.byID[id]; ok && ts.owner == owner {
		return nil, &api.Error{Status: http.StatusGone, Code: "session_ended", Message: "session ended (" + ts.reason + "): create a new session"}
	}
	return nil, errorf(http.StatusNotFound, "unknown_session", "no such session: list yours with GET /v1/sessions")
}

// release ends a use begun by acquire.
func (s *Server) release(e *entry) {
	s.mu.Lock()
	e.busy--
	e.lastUse = s.clock.Now()
	s.mu.Unlock()
}

// end removes e from the table, remembers why, and closes its sandbox. Only
// the first call for an entry does anything.
func (s *Server) end(e *entry, reason string) { s.endIf(e, reason, nil) }

// endIf is end when cond, checked under mu, holds; nil cond always holds.
func (s *Server) endIf(e *entry, reason string, cond func() bool) {
	s.mu.Lock()
	if s.sessions[e.id] != e || (cond != nil && !cond()) {
		s.mu.Unlock()
		return
	}
	delete(s.sessions, e.id)
	s.owned[e.owner]--
	s.ended.add(e.id, tombstone{owner: e.owner, reason: reason})
	s.mu.Unlock()
	s.cfg.Metrics.sessionEnded(reason)
	if err := e.sess.Close(); err != nil {
		s.log.Warn("session close", "session", e.id, "err", err)
	}
	s.removeWorkspace(e.private) // nothing runs in it after Close
	s.log.Info("session ended", "session", e.id, "owner", e.owner, "reason", reason)
}

// watch ends e when its sandbox ends on its own (deadline, sandbox failure).
func (s *Server) watch(e *entry) {
	defer s.sessionWG.Done()
	select {
	case <-e.sess.Done():
		s.end(e, endDeadline)
	case <-s.baseCtx.Done():
	}
}

// ExpireIdle ends every session that no request has used for Config.Idle,
// as measured on Config.Clock. Serve calls it periodically.
func (s *Server) ExpireIdle() {
	now := s.clock.Now()
	var idle []*entry
	s.mu.Lock()
	for _, e := range s.sessions {
		if e.busy == 0 && now.Sub(e.lastUse) >= s.cfg.Idle {
			idle = append(idle, e)
		}
	}
	s.mu.Unlock()
	for _, e := range idle {
		// A request may have started using it since the scan.
		s.endIf(e, endIdle, func() bool { return e.busy == 0 && s.clock.Now().Sub(e.lastUse) >= s.cfg.Idle })
	}
}
