//go:build !linux

package egress

import "net"

// acker does nothing where TCP_QUICKACK is not available (see
// ack_linux.go).
type acker struct{}

func newAcker(net.Conn) acker { return acker{} }

func (acker) ack() {}
