package hostspec

import (
	"strconv"
	"strings"
)

// Join returns host:port, with an IPv6 address in brackets ("[::1]:443");
// a host already in brackets is left as it is. Every "host:port" that
// airlock shows or compares (denial targets, proxy decisions, audit
// records) is written by Join.
func Join(host string, port uint16) string {
	if strings.Contains(host, ":") && !strings.HasPrefix(host, "[") {
		host = "[" + host + "]"
	}
	return host + ":" + strconv.Itoa(int(port))
}
