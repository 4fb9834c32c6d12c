//go:build !linux

package sandbox

// poolState is empty: there are no sandbox inits on this OS.
type poolState struct{}

func (st *poolState) start(p *Pool) error { return ErrUnsupported }
func (st *poolState) close()              {}
func (st *poolState) stats() PoolStats    { return PoolStats{} }
