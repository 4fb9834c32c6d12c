package inflight_test

import (
	"errors"
	"sync"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/inflight"
)

func mustNew(t *testing.T, l inflight.Limits) *inflight.Limiter {
	t.Helper()
	lim, err := inflight.New(l)
	if err != nil {
		t.Fatal(err)
	}
	return lim
}

// wantFull checks that err is a *Full of the given kind.
func wantFull(t *testing.T, err error, tenant, bytes bool) {
	t.Helper()
	var f *inflight.Full
	if !errors.As(err, &f) || f.Tenant != tenant || f.Bytes != bytes {
		t.Fatalf("err = %v, want a Full with Tenant %v and Bytes %v", err, tenant, bytes)
	}
}

func TestCounts(t *testing.T) {
	l := mustNew(t, inflight.Limits{PerTenant: 2, Total: 3})
	a1, err := l.Start(1, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Start(1, 0); err != nil {
		t.Fatal(err)
	}
	_, err = l.Start(1, 0)
	wantFull(t, err, true, false)
	if _, err := l.Start(2, 0); err != nil {
		t.Fatalf("another tenant is refused at 2 of 3: %v", err)
	}
	_, err = l.Start(3, 0)
	wantFull(t, err, false, false)
	a1.Done()
	a1.Done() // twice frees once
	if _, err := l.Start(3, 0); err != nil {
		t.Fatalf("a slot freed by Done is refused: %v", err)
	}
	_, err = l.Start(3, 0)
	wantFull(t, err, false, false)
}

func TestBytes(t *testing.T) {
	l := mustNew(t, inflight.Limits{PerTenant: 10, Total: 10, PerTenantBytes: 100, TotalBytes: 150})
	a, err := l.Start(1, 60)
	if err != nil {
		t.Fatal(err)
	}
	_, err = l.Start(1, 41)
	wantFull(t, err, true, true)
	if err := a.Grow(40); err != nil {
		t.Fatalf("grow to exactly the tenant's limit: %v", err)
	}
	wantFull(t, a.Grow(1), true, true)
	b, err := l.Start(2, 50)
	if err != nil {
		t.Fatal(err)
	}
	wantFull(t, b.Grow(1), false, true)
	if n, bytes := l.Usage(); n != 2 || bytes != 150 {
		t.Fatalf("usage = %d, %d; want 2, 150 (refusals reserve nothing)", n, bytes)
	}
	a.Done()
	if err := b.Grow(50); err != nil {
		t.Fatalf("grow after the other tenant finished: %v", err)
	}
	b.Done()
	if n, bytes := l.Usage(); n != 0 || bytes != 0 {
		t.Fatalf("usage after every Done = %d, %d", n, bytes)
	}
	if err := b.Grow(1); err == nil {
		t.Fatal("Grow after Done succeeded")
	}
}

func TestNewRefuses(t *testing.T) {
	for _, l := range []inflight.Limits{
		{},
		{PerTenant: 2, Total: 1},
		{PerTenant: 1, Total: 1, PerTenantBytes: 10, TotalBytes: 5},
		{PerTenant: 1, Total: 1, PerTenantBytes: -1},
	} {
		if _, err := inflight.New(l); err == nil {
			t.Errorf("New(%+v) succeeded", l)
		}
	}
}

// TestConcurrent: many goroutines never hold more than the limits.
func TestConcurrent(t *testing.T) {
	l := mustNew(t, inflight.Limits{PerTenant: 3, Total: 5, PerTenantBytes: 30, TotalBytes: 40})
	var wg sync.WaitGroup
	for g := range 40 {
		wg.Go(func() {
			for range 200 {
				tk, err := l.Start(g%4, 5)
				if err != nil {
					continue
				}
				if n, b := l.Usage(); n > 5 || b > 40 {
					t.Errorf("usage %d transfers, %d bytes beyond the limits", n, b)
				}
				_ = tk.Grow(5)
				tk.Done()
			}
		})
	}
	wg.Wait()
	if n, b := l.Usage(); n != 0 || b != 0 {
		t.Fatalf("usage after all = %d, %d", n, b)
	}
}
