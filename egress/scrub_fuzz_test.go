package egress_test

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// Framings a fuzzed upstream response may take.
const (
	frameLength  = iota // Content-Length
	frameChunked        // chunked, chunk sizes from the splits
	frameClose          // HTTP/1.0, the body ends when the connection closes
	frameTrailer        // chunked with a trailer
	frameCount
)

// Places an echo of the credential may take, besides the body.
const (
	placeHeader    = 1 << iota // a header value
	placeName                  // a header name (with a bare token credential)
	placeReason                // the status line's reason
	placeInfo                  // an informational (1xx) response first
	placeLocation              // a redirect's Location, escaped
	placeTrailer               // a trailer (chunked framings)
	placeTokenOnly             // the body echoes the token without its scheme
)

// FuzzScrub: on the real wire (a proxy and an upstream on loopback), an
// upstream that echoes the credential the proxy added, in a body encoded
// by any list of content codings over any lines (each applied for real
// when it is gzip or deflate, else only named), framed and split any way,
// and in its headers, status line, 1xx responses and trailers, never gets
// 8 bytes of the credential's token to the client: not in the bytes it
// receives, not in the body decoded as its headers say, nor decoded again
// wherever it still looks compressed. A credential, fresh for each input,
// cannot be in the input itself: whatever the client reads of it came from
// the echo.
func FuzzScrub(f *testing.F) {
	f.Add("identity|gzip", uint8(frameLength), []byte{7, 200, 3}, uint16(0), "a=", ";", false)
	f.Add("gzip", uint8(frameChunked), []byte{1, 2, 3}, uint16(placeHeader|placeTrailer), "", "", true)
	f.Add("|gzip", uint8(frameClose), []byte{5}, uint16(placeReason|placeInfo), "x", "y", false)
	f.Add("gzip, identity", uint8(frameLength), []byte{}, uint16(placeLocation), "", "", false)
	f.Add("gzip|gzip", uint8(frameChunked), []byte{9, 9}, uint16(placeTokenOnly), "{\"t\":\"", "\"}", false)
	f.Add(" GZip ", uint8(frameTrailer), []byte{1}, uint16(placeName), "", "", true)
	f.Add("deflate", uint8(frameLength), []byte{4}, uint16(0), "", "", false)
	f.Add("x-gzip,,", uint8(frameClose), []byte{2, 1}, uint16(placeHeader), "", "", false)
	f.Fuzz(func(t *testing.T, codings string, framing uint8, splits []byte, places uint16, prefix, suffix string, bare bool) {
		if len(codings) > 200 || len(splits) > 64 || len(prefix)+len(suffix) > 4096 || strings.ContainsAny(codings, "\r\n") {
			return
		}
		var r [16]byte
		rand.Read(r[:])
		tok := "tok" + hex.EncodeToString(r[:])
		value := "Bearer " + tok
		header := "Authorization"
		if bare {
			header, value = "X-Api-Key", tok
		}
		h, hp := scrubUpstream(t, header, value, func(c net.Conn, _ *http.Request, echo string) {
			writeFuzzResponse(c, echo, codings, framing, splits, places, prefix, suffix)
		})
		raw := fetchRaw(t, h, fmt.Sprintf("GET http://%s/ HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", hp, hp), 1<<20)
		_, views := clientViews(raw, "GET")
		if got := leak(views, tok); got != "" {
			t.Fatalf("the client read %q of the credential %q: %q", got, tok, raw)
		}
	})
}

// writeFuzzResponse writes the response FuzzScrub describes, in pieces of
// the sizes splits gives.
func writeFuzzResponse(c net.Conn, echo, codings string, framing uint8, splits []byte, places uint16, prefix, suffix string) {
	_, tok, _ := strings.Cut(echo, " ")
	if tok == "" {
		tok = echo
	}
	body := prefix + echo + suffix
	if places&placeTokenOnly != 0 {
		body = prefix + tok + suffix
	}
	var head strings.Builder
	proto := "HTTP/1.1"
	if framing%frameCount == frameClose {
		proto = "HTTP/1.0"
	}
	if places&placeInfo != 0 {
		fmt.Fprintf(&head, "HTTP/1.1 103 Early Hints\r\nLink: </%s>\r\n\r\n", echo)
	}
	reason := "OK"
	if places&placeReason != 0 {
		reason = echo
	}
	status := "200"
	if places&placeLocation != 0 {
		status = "302"
		fmt.Fprintf(&head, "%s %s %s\r\nLocation: /cb?a=%s&b=%s\r\n", proto, status, reason, strings.ReplaceAll(echo, " ", "%20"), strings.ReplaceAll(echo, " ", "+"))
	} else {
		fmt.Fprintf(&head, "%s %s %s\r\n", proto, status, reason)
	}
	if places&placeHeader != 0 {
		fmt.Fprintf(&head, "X-Echo: %s\r\nSet-Cookie: s=%s\r\n", echo, echo)
	}
	if places&placeName != 0 && !strings.Contains(echo, " ") {
		fmt.Fprintf(&head, "%s: 1\r\n", echo)
	}
	for _, line := range strings.Split(codings, "|") {
		// Each coding the upstream names is applied for real where it
		// can be: the label is honest, so the client could undo it.
		for _, cd := range strings.Split(line, ",") {
			switch strings.ToLower(strings.TrimSpace(cd)) {
			case "gzip", "x-gzip":
				body = gz(body)
			case "deflate":
				body = deflated(body)
			}
		}
		fmt.Fprintf(&head, "Content-Encoding: %s\r\n", line)
	}
	var out string
	switch framing % frameCount {
	case frameLength:
		out = fmt.Sprintf("%sContent-Length: %d\r\n\r\n%s", head.String(), len(body), body)
	case frameClose:
		out = head.String() + "\r\n" + body
	default:
		var b strings.Builder
		b.WriteString(head.String() + "Transfer-Encoding: chunked\r\n\r\n")
		for i, k := 0, 0; i < len(body); k++ {
			n := 16
			if len(splits) > 0 {
				n = int(splits[k%len(splits)]) + 1
			}
			n = min(n, len(body)-i)
			fmt.Fprintf(&b, "%x\r\n%s\r\n", n, body[i:i+n])
			i += n
		}
		b.WriteString("0\r\n")
		if framing%frameCount == frameTrailer || places&placeTrailer != 0 {
			fmt.Fprintf(&b, "X-Trailer: %s\r\n", echo)
		}
		b.WriteString("\r\n")
		out = b.String()
	}
	for i, k := 0, 0; i < len(out); k++ {
		n := len(out)
		if len(splits) > 0 {
			n = int(splits[k%len(splits)])*7 + 1
		}
		n = min(n, len(out)-i)
		if _, err := c.Write([]byte(out[i : i+n])); err != nil {
			return
		}
		i += n
		if k < 8 {
			time.Sleep(100 * time.Microsecond) // the first few pieces reach the proxy apart
		}
	}
}
