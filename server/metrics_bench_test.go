package server

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// BenchmarkScrape is one Prometheus scrape of /metrics by a client that
// accepts gzip, as Prometheus does.
func BenchmarkScrape(b *testing.B) {
	h := NewMetrics().Handler()
	b.ReportAllocs()
	for b.Loop() {
		r := httptest.NewRequest("GET", "/metrics", nil)
		r.Header.Set("Accept-Encoding", "gzip")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusOK || w.Header().Get("Content-Encoding") != "" {
			b.Fatalf("scrape: %d, Content-Encoding %q; want 200, uncompressed", w.Code, w.Header().Get("Content-Encoding"))
		}
	}
}
