package mcp

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// progressTail is how much of a run's latest output a progress
// notification carries.
const progressTail = 1 << 10

// DefaultProgressInterval is how often run reports progress to a client
// that asked for it (Config.ProgressInterval).
const DefaultProgressInterval = 5 * time.Second

// tailWriter keeps the last max bytes written to it (stdout and stderr of
// one run, interleaved as they came).
type tailWriter struct {
	mu    sync.Mutex
	max   int
	buf   []byte // guarded by mu
	total int64  // guarded by mu: bytes written
}

func (t *tailWriter) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.total += int64(len(p))
	t.buf = append(t.buf, p...)
	if len(t.buf) > t.max {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-t.max:]...)
	}
	return len(p), nil
}

// snapshot returns the tail as valid UTF-8 and the bytes written so far.
func (t *tailWriter) snapshot() (string, int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.ToValidUTF8(string(t.buf), "\uFFFD"), t.total
}

// progress sends a progress notification for token every
// Config.ProgressInterval until stop is closed: the seconds the run has
// taken as progress, and the latest output in the message.
func (s *Server) progress(ctx context.Context, ss *sdk.ServerSession, token any, tail *tailWriter, stop <-chan struct{}) {
	if ss == nil {
		return
	}
	start := time.Now()
	t := time.NewTicker(s.cfg.ProgressInterval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-ctx.Done():
			return
		case <-t.C:
		}
		out, total := tail.snapshot()
		elapsed := time.Since(start).Round(time.Second)
		msg := fmt.Sprintf("running for %v, %d bytes of output so far", elapsed, total)
		if out != "" {
			msg += "; latest:\n" + out
		}
		err := ss.NotifyProgress(ctx, &sdk.ProgressNotificationParams{ProgressToken: token, Progress: elapsed.Seconds(), Message: msg})
		if err != nil {
			s.log.Debug("mcp: progress notification", "error", err)
			return
		}
	}
}
