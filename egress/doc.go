// Package egress is the proxy that is a sandbox's only way out. The
// supervisor creates listening sockets inside the sandbox's empty network
// namespace and hands them to a Proxy, which serves an HTTP forward proxy
// (absolute-URI requests and CONNECT) and a SOCKS5 proxy on them from
// outside.
//
// Every front end asks one function, Proxy.Decide, before any network
// effect: the budget is charged one op (granted or denied, so a flood of
// denials spends max_ops), the host is normalized (case, trailing dot,
// IDNA; non-canonical IPv4 forms such as 0x7f.1 are refused), matched
// against net_hosts by name and port, the name is resolved once on the
// host, and every resolved address that is special (loopback, private,
// link-local, cloud metadata, CGNAT, ULA, multicast, IPv4-mapped forms) is
// refused unless net_hosts lists that exact address. The proxy then dials
// the address it checked, never the name, so DNS rebinding cannot move a
// connection after the check. CONNECT tunnels must also open with a TLS
// ClientHello whose SNI names the host that was granted, so a tunnel to an
// allowed name cannot carry a TLS session for another one.
//
// Transparent egress (the namespace backend) adds two front ends for
// programs that ignore the proxy variables. ServeDNS answers the sandbox's
// DNS from the policy alone: a granted name gets an address in
// SyntheticPrefix that stands for it for the run (Names), any other name
// NXDOMAIN, and nothing is ever asked upstream. When the sandbox connects
// to such an address (or to a granted IP literal), the supervisor's
// connect broker calls OpenTunnel, which decides and dials exactly as for
// a CONNECT, and connects the sandbox's own socket to ServeTunnels'
// listener, which carries it as a CONNECT tunnel is carried.
//
// It stops exfiltration and lateral movement by sandboxed code: reaching a
// host not in net_hosts, reaching the host's own services or a metadata
// endpoint through an allowed name, and smuggling a second request past the
// check (Host header spoofing, userinfo tricks, Content-Length and
// Transfer-Encoding conflicts, pipelined requests that are never decided).
// Every decision is an audit event naming the net_hosts grant that would
// allow it.
//
// The proxy runs in the supervisor, outside every sandbox limit, so it
// bounds what the sandbox can make it hold: each accepted connection costs
// an op, at most Config.MaxConns are served at once (more are closed at
// once and audited), a client has one deadline from accept for its whole
// request head, SOCKS handshake or ClientHello, a connection holds only
// a small buffer until its head is complete, and at most MaxIdleUpstreams
// upstream connections are kept open between requests, each for at most
// IdleTimeout. A kept upstream connection carries only requests that
// decide to the host, checked addresses and credentials it was dialed for.
//
// A host with credentials gets them from the proxy, never from the
// sandbox: the proxy sets the header on each request to it and reads the
// answer before the sandbox does. It negotiates the representation (gzip
// or none, and no Range), and removes every form of the value an echo may
// carry (as sent, the token without its scheme, URL- and JSON-escaped, any
// case) from the status line, the headers and the body, which it decodes
// and searches across reads. A response it cannot read whole (another
// content coding, a list of them over any lines, a partial one) is
// withheld with a 502 and an audit denial; a gzip body that decodes to
// far more than it weighs is cut.
//
// The proxy acknowledges what an upstream sends as it reads it
// (TCP_QUICKACK on Linux), so an upstream with Nagle's algorithm on does
// not wait out the kernel's delayed-ACK timer on a connection the proxy
// keeps for request after request.
//
// The proxy is written on net/http and net instead of a general proxy
// library on purpose: it is small, every decision is visible in this
// package, and "resolve once, dial the checked address" must hold on every
// path, which is hard to retrofit into a library that dials names itself.
// Outbound HTTP requests are built afresh from what was checked; the
// client's request is never edited and forwarded.
//
// egress must not import internal/enforce/... (it is portable and runs in
// the supervisor), server, mcp or anything that imports testing.
package egress
