package server

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/guard"
)

// fileTimeout bounds reading an upload and writing a download.
const fileTimeout = 10 * time.Minute

// resolve makes the client's path absolute: relative paths are taken
// against the session's workspace. It does not clean the path; the guard
// canonicalizes it and refuses what leaves the grants.
func (e *entry) resolve(p string) (string, *api.Error) {
	switch {
	case p == "":
		return "", errorf(http.StatusBadRequest, "bad_path", "no file path: put it after /files/")
	case strings.HasPrefix(p, "/"):
		return p, nil
	case e.workspace == "":
		return "", errorf(http.StatusBadRequest, "bad_path", "relative path "+strconv.Quote(p)+" but the session has no workspace: give an absolute path, or grant fs_write")
	}
	return e.workspace + "/" + p, nil
}

// fileOp runs one guard operation for the handlers below, and turns its
// errors into public ones.
func (s *Server) fileOp(w http.ResponseWriter, r *http.Request, owner int, op, p string, do func(g *guard.Guard, abs string) error) bool {
	e, ae := s.acquire(owner, r.PathValue("id"))
	if ae != nil {
		writeError(w, ae)
		return false
	}
	defer s.release(e)
	abs, ae := e.resolve(p)
	if ae != nil {
		writeError(w, ae)
		return false
	}
	err := do(e.sess.Guard(), abs)
	if err == nil {
		return true
	}
	if ae, ok := err.(*api.Error); ok {
		writeError(w, ae)
		return false
	}
	ae = guardError(err, op, p, e.policy, s.cfg.AgentAdvice)
	if ae == nil {
		s.log.Error("file op", "session", e.id, "op", op, "path", abs, "err", err)
		ae = errorf(http.StatusInternalServerError, "internal", op+" "+strconv.Quote(p)+" failed: the server log has the details")
	} else {
		s.log.Info("file op refused", "session", e.id, "op", op, "path", abs, "code", ae.Code, "err", err)
	}
	writeError(w, ae)
	return false
}

// uploadFile is PUT /v1/sessions/{id}/files/{path...}: the raw body becomes
// the file.
func (s *Server) uploadFile(w http.ResponseWriter, r *http.Request, owner int) {
	setDeadlines(w, fileTimeout, jsonTimeout)
	p := r.PathValue("path")
	if r.ContentLength > s.cfg.MaxUpload {
		writeError(w, tooLarge(s.cfg.MaxUpload))
		return
	}
	var size int
	ok := s.fileOp(w, r, owner, "write", p, func(g *guard.Guard, abs string) error {
		data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxUpload))
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return tooLarge(s.cfg.MaxUpload)
		}
		if err != nil {
			return errorf(http.StatusBadRequest, "bad_body", "the upload body could not be read: send it again")
		}
		size = len(data)
		return g.Write(abs, data)
	})
	if ok {
		writeJSON(w, http.StatusOK, map[string]any{"path": p, "size": size})
	}
}

// downloadFile is GET /v1/sessions/{id}/files/{path...}: the file's bytes.
func (s *Server) downloadFile(w http.ResponseWriter, r *http.Request, owner int) {
	setDeadlines(w, 0, fileTimeout)
	p := r.PathValue("path")
	var data []byte
	ok := s.fileOp(w, r, owner, "read", p, func(g *guard.Guard, abs string) error {
		var err error
		data, err = g.Read(abs)
		return err
	})
	if !ok {
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Content-Length", strconv.Itoa(len(data)))
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		_, _ = w.Write(data) // a write error means the client went away
	}
}

// deleteFile is DELETE /v1/sessions/{id}/files/{path...}.
func (s *Server) deleteFile(w http.ResponseWriter, r *http.Request, owner int) {
	setDeadlines(w, 0, jsonTimeout)
	p := r.PathValue("path")
	if s.fileOp(w, r, owner, "remove", p, func(g *guard.Guard, abs string) error { return g.Remove(abs) }) {
		w.WriteHeader(http.StatusNoContent)
	}
}

// listFiles is GET /v1/sessions/{id}/files?dir=P; no dir lists the
// workspace.
func (s *Server) listFiles(w http.ResponseWriter, r *http.Request, owner int) {
	setDeadlines(w, 0, jsonTimeout)
	dir := r.URL.Query().Get("dir")
	if dir == "" {
		dir = "."
	}
	var out []api.Entry
	ok := s.fileOp(w, r, owner, "list", dir, func(g *guard.Guard, abs string) error {
		dir = path.Clean(abs) // the answer names what was listed, not the client's shorthand
		entries, err := g.List(abs)
		if err != nil {
			return err
		}
		out = make([]api.Entry, 0, len(entries))
		for _, en := range entries {
			out = append(out, api.Entry{Name: en.Name, Type: entryType(en.Mode), Size: en.Size, Mode: fmt.Sprintf("%04o", en.Mode.Perm())})
		}
		return nil
	})
	if ok {
		writeJSON(w, http.StatusOK, map[string]any{"dir": dir, "entries": out})
	}
}

func entryType(m fs.FileMode) string {
	switch {
	case m.IsRegular():
		return "file"
	case m.IsDir():
		return "dir"
	case m&fs.ModeSymlink != 0:
		return "symlink"
	}
	return "other"
}
