//go:build e2e

package e2e

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/airtest"
)

// TestServeSessionEndsMidExec: a session that ends while an exec runs
// answers that exec, streamed or not, with the report the OpenAPI document
// promises: the output so far and halted_by naming why
// (session_closed when it was destroyed, session_lifetime when its
// lifetime ran out), never a report that only says the sandbox died. The
// next exec gets 410 session_ended.
func TestServeSessionEndsMidExec(t *testing.T) {
	airtest.RequireUserNS(t)
	airtest.RequireLandlockABI(t, 4)
	bin := mcpBinary(t)
	p := startServe(t, bin, "--session-lifetime", "6s")
	c := p.client(t)
	ctx := serveCtx(t)
	pol := "version: 1\nallowed_tools: [sh, sleep]\n" // max_wall 30 s, the default
	cmd := []string{"sh", "-c", "echo started; sleep 25"}

	for _, tc := range []struct {
		name, halted string
		stream       bool
		end          func(s *client.Session)
	}{
		{"DestroyedStreaming", "session_closed", true, func(s *client.Session) {
			if err := s.Destroy(ctx); err != nil {
				t.Errorf("destroy: %v", err)
			}
		}},
		{"DestroyedPlain", "session_closed", false, func(s *client.Session) {
			if err := s.Destroy(ctx); err != nil {
				t.Errorf("destroy: %v", err)
			}
		}},
		{"LifetimeStreaming", "session_lifetime", true, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := c.CreateSession(ctx, client.CreateRequest{PolicyText: pol})
			if err != nil {
				t.Fatal(err)
			}
			var out strings.Builder
			req := client.ExecRequest{Args: cmd}
			if tc.stream {
				req.OnOutput = func(_ string, b []byte) { out.Write(b) }
			}
			if tc.end != nil {
				time.AfterFunc(1500*time.Millisecond, func() { tc.end(s) })
			}
			ectx, cancel := context.WithTimeout(ctx, 40*time.Second)
			defer cancel()
			rep, err := s.Exec(ectx, req)
			if err != nil {
				t.Fatalf("exec: %v, want a report saying halted_by %s", err, tc.halted)
			}
			if rep.HaltedBy == nil || *rep.HaltedBy != tc.halted || rep.ExitCode != 124 {
				t.Errorf("report: halted_by %v exit %d error %q, want halted_by %s exit 124", rep.HaltedBy, rep.ExitCode, rep.Error, tc.halted)
			}
			if !strings.Contains(rep.Stdout, "started") || tc.stream && !strings.Contains(out.String(), "started") {
				t.Errorf("output so far lost: report stdout %q, streamed %q", rep.Stdout, out.String())
			}
			_, err = s.Exec(ctx, client.ExecRequest{Args: []string{"sh", "-c", "true"}})
			wantAPIError(t, "exec after the end", err, http.StatusGone, "session_ended")
		})
	}
}
