package egress

import (
	"slices"
	"sync"
	"time"
)

// MaxIdleUpstreams bounds the upstream connections a proxy keeps open
// between requests, for any of its client connections to reuse; each is
// closed once it has waited IdleTimeout. They give way to client
// connections: kept and client connections together are at most
// Config.MaxConns, so a sandbox still holds at most two of the
// supervisor's fds per connection MaxConns allows.
const MaxIdleUpstreams = 16

// keep gives uc, which carried its last request whole, to the idle pool,
// with room for as many connections as the proxy could still admit
// clients.
func (p *Proxy) keep(uc *upConn) {
	p.mu.Lock()
	room := p.maxConns - p.clients
	p.mu.Unlock()
	p.idlePool.put(uc, room)
}

// idlePool keeps upstream connections that carried their last request and
// response whole, for the next request with the same key from any client
// connection of its proxy (a client that opens a connection per request
// then reaches a kept upstream connection, as one that keeps its
// connection does): at most max of them, the least recently kept closed
// first, each closed when it has waited idle. The zero idlePool keeps
// nothing. It is safe for concurrent use.
type idlePool struct {
	max  int
	idle time.Duration

	mu     sync.Mutex
	conns  []*pooled // guarded by mu: least recently put first
	closed bool      // guarded by mu
}

type pooled struct {
	uc    *upConn
	timer *time.Timer // closes uc when it has waited idle
}

// put keeps uc, which carried its last request whole, for the next
// request with its key, closing the least recently kept ones beyond room
// (and max), or closes it: a connection that is not to be reused, one
// there is no room for, or one put after closeAll.
func (ip *idlePool) put(uc *upConn, room int) {
	room = min(room, ip.max)
	if !uc.reuse || room <= 0 {
		uc.close()
		return
	}
	uc.r.client = nil // its client connection's writer is not the next one's
	e := &pooled{uc: uc}
	ip.mu.Lock()
	if ip.closed {
		ip.mu.Unlock()
		uc.close()
		return
	}
	evicted := ip.trim(room - 1)
	ip.conns = append(ip.conns, e)
	e.timer = time.AfterFunc(ip.idle, func() { ip.expire(e) })
	ip.mu.Unlock()
	closePooled(evicted)
}

// shrink closes the least recently kept connections beyond room.
func (ip *idlePool) shrink(room int) {
	ip.mu.Lock()
	evicted := ip.trim(max(room, 0))
	ip.mu.Unlock()
	closePooled(evicted)
}

// trim takes the least recently kept connections beyond n out of the
// pool, for the caller to close once it has unlocked mu.
//
// Preconditions:
//   - ip.mu is held.
func (ip *idlePool) trim(n int) []*pooled {
	if len(ip.conns) <= n {
		return nil
	}
	k := len(ip.conns) - n
	evicted := slices.Clone(ip.conns[:k])
	ip.conns = slices.Delete(ip.conns, 0, k)
	return evicted
}

func closePooled(es []*pooled) {
	for _, e := range es {
		e.timer.Stop()
		e.uc.close()
	}
}

// get takes the most recently kept connection for key out of the pool,
// or returns nil. The caller checks that it is still idle.
func (ip *idlePool) get(key upKey) *upConn {
	ip.mu.Lock()
	defer ip.mu.Unlock()
	for i := len(ip.conns) - 1; i >= 0; i-- {
		if e := ip.conns[i]; e.uc.key.equal(key) {
			e.timer.Stop() // if it fired, expire finds nothing once we are done
			ip.conns = slices.Delete(ip.conns, i, i+1)
			return e.uc
		}
	}
	return nil
}

// expire closes e's connection if it is still waiting in the pool.
func (ip *idlePool) expire(e *pooled) {
	ip.mu.Lock()
	i := slices.Index(ip.conns, e)
	if i >= 0 {
		ip.conns = slices.Delete(ip.conns, i, i+1)
	}
	ip.mu.Unlock()
	if i >= 0 {
		e.uc.close()
	}
}

// closeAll closes every kept connection and keeps none from then on.
func (ip *idlePool) closeAll() {
	ip.mu.Lock()
	conns := ip.conns
	ip.conns, ip.closed = nil, true
	ip.mu.Unlock()
	closePooled(conns)
}
