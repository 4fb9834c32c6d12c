// Package inflight bounds what the clients of airlock's servers (the API of
// airlock serve, airlock mcp --listen) have in flight at once: how many
// request bodies and downloads are being moved, and how many bytes they
// hold, for each tenant (a bearer token) and for the whole server.
//
// It stops one tenant from taking every slot or byte the server has (its
// own limits are lower than the server's), and all tenants together from
// holding more than the server can: the servers run outside every
// sandbox's cgroup, so what they hold is shared by everyone. A transfer is
// refused before anything of it is read; bytes whose size is not known in
// advance are reserved as they arrive, and the first that does not fit
// refuses the rest.
//
// It imports the standard library only.
package inflight

import (
	"errors"
	"strconv"
	"sync"
)

// Limits bound the transfers of a Limiter.
type Limits struct {
	// PerTenant is how many transfers one tenant may have at once. It must
	// be positive.
	PerTenant int

	// Total is how many transfers all tenants together may have at once.
	// It must be at least PerTenant.
	Total int

	// PerTenantBytes is how many bytes one tenant's transfers may hold
	// together. Zero means no byte limit of their own: the count and the
	// size limit of each transfer (enforced by the caller) bound them.
	PerTenantBytes int64

	// TotalBytes is how many bytes all transfers may hold together. Zero
	// means no byte limit; otherwise it must be at least PerTenantBytes.
	TotalBytes int64
}

// Limiter counts transfers in flight. It is safe for concurrent use.
type Limiter struct {
	lim Limits

	mu         sync.Mutex
	count      map[int]int   // guarded by mu; transfers by tenant
	bytes      map[int]int64 // guarded by mu; bytes held by tenant
	total      int           // guarded by mu
	totalBytes int64         // guarded by mu
}

// New returns a limiter, or an error naming a limit that is out of range.
func New(l Limits) (*Limiter, error) {
	switch {
	case l.PerTenant <= 0 || l.Total < l.PerTenant:
		return nil, errors.New("inflight: transfers per tenant must be positive and at most the total")
	case l.PerTenantBytes < 0 || l.TotalBytes < 0 || l.TotalBytes > 0 && l.TotalBytes < l.PerTenantBytes:
		return nil, errors.New("inflight: bytes per tenant must be at most the total bytes (zero: no byte limit)")
	}
	return &Limiter{lim: l, count: map[int]int{}, bytes: map[int]int64{}}, nil
}

// Full is the refusal of a transfer or of bytes: which limit was reached.
type Full struct {
	// Tenant is true when the tenant's own limit was reached, false when
	// the server's total was (other tenants hold the rest).
	Tenant bool
	// Bytes is true for a byte limit, false for the count of transfers.
	Bytes bool
	// Limit is the limit that was reached.
	Limit int64
}

func (f *Full) Error() string {
	what := strconv.FormatInt(f.Limit, 10) + " transfers"
	if f.Bytes {
		what = strconv.FormatInt(f.Limit, 10) + " bytes"
	}
	if f.Tenant {
		return "inflight: this tenant already has " + what + " in flight"
	}
	return "inflight: the server already has " + what + " in flight"
}

// Ticket is one admitted transfer. Its methods are safe for concurrent
// use.
type Ticket struct {
	l      *Limiter
	tenant int

	mu   sync.Mutex
	held int64 // guarded by mu; bytes reserved
	done bool  // guarded by mu
}

// Start admits a transfer of tenant holding n bytes (n >= 0), or refuses
// it with a *Full and reserves nothing.
func (l *Limiter) Start(tenant int, n int64) (*Ticket, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.count[tenant] >= l.lim.PerTenant:
		return nil, &Full{Tenant: true, Limit: int64(l.lim.PerTenant)}
	case l.total >= l.lim.Total:
		return nil, &Full{Limit: int64(l.lim.Total)}
	}
	if err := l.fitLocked(tenant, n); err != nil {
		return nil, err
	}
	l.count[tenant]++
	l.total++
	l.bytes[tenant] += n
	l.totalBytes += n
	return &Ticket{l: l, tenant: tenant, held: n}, nil
}

// fitLocked reports, as a *Full, whether n more bytes of tenant exceed a
// byte limit.
func (l *Limiter) fitLocked(tenant int, n int64) error {
	switch {
	case n < 0:
		return errors.New("airlock bug: inflight: negative byte count")
	case l.lim.PerTenantBytes > 0 && l.bytes[tenant]+n > l.lim.PerTenantBytes:
		return &Full{Tenant: true, Bytes: true, Limit: l.lim.PerTenantBytes}
	case l.lim.TotalBytes > 0 && l.totalBytes+n > l.lim.TotalBytes:
		return &Full{Bytes: true, Limit: l.lim.TotalBytes}
	}
	return nil
}

// Grow reserves n more bytes for the transfer, or refuses them with a
// *Full and reserves nothing. A finished ticket refuses everything.
func (t *Ticket) Grow(n int64) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.done {
		return errors.New("airlock bug: inflight: Grow after Done")
	}
	l := t.l
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.fitLocked(t.tenant, n); err != nil {
		return err
	}
	l.bytes[t.tenant] += n
	l.totalBytes += n
	t.held += n
	return nil
}

// Done ends the transfer and frees what it held. Later calls do nothing.
func (t *Ticket) Done() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.done {
		return
	}
	t.done = true
	l := t.l
	l.mu.Lock()
	defer l.mu.Unlock()
	l.count[t.tenant]--
	l.total--
	l.bytes[t.tenant] -= t.held
	l.totalBytes -= t.held
	if l.count[t.tenant] == 0 {
		delete(l.count, t.tenant)
		delete(l.bytes, t.tenant)
	}
}

// Usage returns the transfers and bytes in flight in total, for tests and
// metrics.
func (l *Limiter) Usage() (transfers int, bytes int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.total, l.totalBytes
}
