package server_test

import (
	"io"
	"net/http"

	"github.com/airlock-sandbox/airlock/internal/airtest"
)

// startStuck sends a request with a stalled body to the test server (see
// airtest.StartStalled): length is its Content-Length, -1 for chunked.
func (e *env) startStuck(method, path, token string, length int64, first io.Reader, sent int64, then io.Reader) *airtest.Stalled {
	e.t.Helper()
	req, err := http.NewRequest(method, e.ts.URL+path, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	req.ContentLength = length
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	return airtest.StartStalled(e.t, req, first, sent, then)
}

const mib = 1 << 20
