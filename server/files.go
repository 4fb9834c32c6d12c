package server

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/guard"
	"github.com/airlock-sandbox/airlock/internal/termtext"
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

// checkName refuses, with 400 bad_path, a path that is not printable
// UTF-8 (termtext.AllPrintable): control characters, escape sequences,
// bidi overrides and other format characters, bytes that are not UTF-8.
// Such a name would reach the host's files and, from there, a terminal or
// a log that shows it. The message shows the path escaped.
func checkName(p string) *api.Error {
	if termtext.AllPrintable(p) {
		return nil
	}
	return errorf(http.StatusBadRequest, "bad_path", "path \""+termtext.Field(p)+"\" has a character that is not printable (a control or format character, or bytes that are not UTF-8; shown escaped): use names of printable UTF-8 characters")
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
	if errors.As(err, &ae) {
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
// the file. The body is received whole into a spool file first, then
// written into the sandbox: an upload cut short, too large or refused
// changes nothing.
func (s *Server) uploadFile(w http.ResponseWriter, r *http.Request, owner int) {
	setDeadlines(w, fileTimeout, jsonTimeout)
	p := r.PathValue("path")
	if ae := checkName(p); ae != nil {
		writeError(w, ae)
		return
	}
	if r.ContentLength > s.cfg.MaxUpload {
		writeError(w, tooLarge(s.cfg.MaxUpload))
		return
	}
	t := s.startTransfer(w, owner, max(r.ContentLength, 0))
	if t == nil {
		return
	}
	defer t.Done()
	var size int64
	ok := s.fileOp(w, r, owner, "write", p, func(g *guard.Guard, abs string) error {
		f, n, ae := s.receive(w, r, t)
		if ae != nil {
			return ae
		}
		defer f.Close()
		size = n
		_, err := g.WriteFrom(abs, f)
		return err
	})
	if ok {
		writeJSON(w, http.StatusOK, map[string]any{"path": p, "size": size})
	}
}

// downloadFile is GET /v1/sessions/{id}/files/{path...}: the file's bytes,
// copied into a spool file and sent from it.
func (s *Server) downloadFile(w http.ResponseWriter, r *http.Request, owner int) {
	setDeadlines(w, 0, fileTimeout)
	p := r.PathValue("path")
	if ae := checkName(p); ae != nil {
		writeError(w, ae)
		return
	}
	t := s.startTransfer(w, owner, 0)
	if t == nil {
		return
	}
	defer t.Done()
	var f *os.File
	var size int64
	ok := s.fileOp(w, r, owner, "read", p, func(g *guard.Guard, abs string) error {
		var err error
		if f, err = s.spool(); err != nil {
			s.log.Error("spool a download", "dir", s.ws.dir, "err", err)
			return errNoSpool
		}
		size, err = g.ReadTo(abs, &spoolWriter{s: s, f: f, t: t, grow: true})
		return err
	})
	if f != nil {
		defer f.Close()
	}
	if !ok {
		return
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		s.log.Error("rewind a spooled download", "err", err)
		writeError(w, errNoSpool)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Content-Length", strconv.FormatInt(size, 10))
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		_, _ = io.CopyN(w, f, size) // a write error means the client went away
	}
}

// deleteFile is DELETE /v1/sessions/{id}/files/{path...}.
func (s *Server) deleteFile(w http.ResponseWriter, r *http.Request, owner int) {
	setDeadlines(w, 0, jsonTimeout)
	p := r.PathValue("path")
	if ae := checkName(p); ae != nil {
		writeError(w, ae)
		return
	}
	if s.fileOp(w, r, owner, "remove", p, func(g *guard.Guard, abs string) error { return g.Remove(abs) }) {
		w.WriteHeader(http.StatusNoContent)
	}
}

// MaxListEntries is the most entries a listing holds: the sandbox can make
// folders of any size, and each entry the server lists takes its memory.
// A listing cut short says "truncated": true.
const MaxListEntries = 10000

// listFiles is GET /v1/sessions/{id}/files?dir=P; no dir lists the
// workspace, at most MaxListEntries of it.
func (s *Server) listFiles(w http.ResponseWriter, r *http.Request, owner int) {
	setDeadlines(w, 0, jsonTimeout)
	dir := r.URL.Query().Get("dir")
	if ae := checkName(dir); ae != nil {
		writeError(w, ae)
		return
	}
	if dir == "" {
		dir = "."
	}
	var out []api.Entry
	var more bool
	ok := s.fileOp(w, r, owner, "list", dir, func(g *guard.Guard, abs string) error {
		dir = path.Clean(abs) // the answer names what was listed, not the client's shorthand
		entries, m, err := g.ListN(abs, MaxListEntries)
		if err != nil {
			return err
		}
		more = m
		out = make([]api.Entry, 0, len(entries))
		for _, en := range entries {
			ae := api.Entry{Name: en.Name, Type: entryType(en.Mode), Size: en.Size, Mode: fmt.Sprintf("%04o", en.Mode.Perm())}
			if !termtext.AllPrintable(en.Name) {
				// Made in the sandbox: shown escaped (at most 4 bytes for
				// each byte of the name), never raw.
				ae.Name, ae.Escaped = termtext.Escape(en.Name, 4*len(en.Name)), true
			}
			out = append(out, ae)
		}
		return nil
	})
	if ok {
		res := map[string]any{"dir": dir, "entries": out}
		if more {
			res["truncated"] = true
		}
		writeJSON(w, http.StatusOK, res)
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
