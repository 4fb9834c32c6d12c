package server

import (
	"encoding/json"
	"io"
	"net/http"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/airlock-sandbox/airlock/api"
)

// streamWriteTimeout is how long one event may take to reach a client
// before the stream is given up: a stalled reader must not hold the
// handler forever.
const streamWriteTimeout = time.Minute

// eventStream writes an exec's output as NDJSON lines, as it is produced:
// {"stream":"stdout","data":"..."} per chunk, then {"report":{...}} or
// {"error":{...}}. The response status is sent with the first line, so an
// exec that fails before any output still gets its proper status.
type eventStream struct {
	w  http.ResponseWriter
	rc *http.ResponseController

	mu      sync.Mutex
	started bool         // guarded by mu; the 200 and headers are sent
	err     error        // guarded by mu; the first write error, after which lines are dropped
	outs    []*streamOut // guarded by mu
}

func newEventStream(w http.ResponseWriter) *eventStream {
	return &eventStream{w: w, rc: http.NewResponseController(w)}
}

// writer returns the io.Writer for one stream name.
func (es *eventStream) writer(name string) io.Writer {
	o := &streamOut{es: es, name: name}
	es.mu.Lock()
	es.outs = append(es.outs, o)
	es.mu.Unlock()
	return o
}

// lineLocked sends v as one line and flushes it.
func (es *eventStream) lineLocked(v any) {
	if !es.started {
		h := es.w.Header()
		h.Set("Content-Type", "application/x-ndjson")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Cache-Control", "no-store")
		es.w.WriteHeader(http.StatusOK)
		es.started = true
	}
	if es.err != nil {
		return
	}
	b, err := json.Marshal(v)
	if err != nil {
		es.err = err
		return
	}
	_ = es.rc.SetWriteDeadline(netNow().Add(streamWriteTimeout)) // unsupported by test recorders
	if _, err := es.w.Write(append(b, '\n')); err != nil {
		es.err = err
		return
	}
	if err := es.rc.Flush(); err != nil {
		es.err = err
	}
}

// finish sends what is left of each stream, then the report, or the error
// (as the response itself when nothing was sent yet).
func (es *eventStream) finish(rep *api.Report, fail *api.Error) {
	es.mu.Lock()
	defer es.mu.Unlock()
	for _, o := range es.outs {
		if len(o.pending) > 0 {
			es.lineLocked(api.Event{Stream: o.name, Data: string(o.pending)})
			o.pending = nil
		}
	}
	if fail != nil {
		if !es.started {
			writeError(es.w, fail)
			es.started = true
			return
		}
		es.lineLocked(api.Event{Error: fail})
		return
	}
	es.lineLocked(api.Event{Report: rep})
}

// streamOut is the io.Writer of one output stream. It holds back a UTF-8
// sequence split across writes so that no event cuts a character in two;
// bytes that are not UTF-8 at all become U+FFFD (encoding/json).
type streamOut struct {
	es      *eventStream
	name    string
	pending []byte // guarded by es.mu; an incomplete UTF-8 sequence
}

// Write sends p as one event. It never fails: a client that went away ends
// the exec through the request context, not through its output.
func (o *streamOut) Write(p []byte) (int, error) {
	o.es.mu.Lock()
	defer o.es.mu.Unlock()
	data := append(o.pending, p...)
	cut := completeUTF8(data)
	o.pending = append([]byte(nil), data[cut:]...)
	if cut > 0 {
		o.es.lineLocked(api.Event{Stream: o.name, Data: string(data[:cut])})
	}
	return len(p), nil
}

// completeUTF8 returns the length of b without a trailing incomplete UTF-8
// sequence (at most utf8.UTFMax-1 bytes).
func completeUTF8(b []byte) int {
	for i := len(b) - 1; i >= 0 && i >= len(b)-(utf8.UTFMax-1); i-- {
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRune(b[i:]) {
				return i
			}
			break
		}
	}
	return len(b)
}
