package main

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"mime"
	"net"
	"net/http"
	"strings"
)

// The dashboard's write API (replay, purge) must not be drivable by any
// other web page open in a browser on the same machine. A request passes
// the guard when:
//   - its Host names the dashboard (localhost, a loopback address or the
//     listening address), so a DNS-rebinding page under another name is
//     refused; with --auth any Host is accepted, the credentials protect;
//   - it carries the --auth credentials, when set (every route);
// and a write also needs:
//   - Content-Type application/json (a cross-site form cannot send it
//     without a CORS preflight, which the dashboard never answers);
//   - no foreign Origin, and no Sec-Fetch-Site other than same-origin;
//   - the per-process token in the X-Bus-Token header: the page reads it
//     from /api/state, which no other origin can read.

// tokenHeader carries the per-process write token.
const tokenHeader = "X-Bus-Token"

// guard checks the requests of the dashboard; it is safe for concurrent
// use once built.
type guard struct {
	token      string
	user, pass string // --auth; empty: none
	hosts      map[string]bool
}

// newGuard returns the guard of a dashboard listening on addr, with auth
// "user:pass" or "".
func newGuard(addr net.Addr, auth string) (*guard, error) {
	g := &guard{hosts: map[string]bool{"localhost": true, "127.0.0.1": true, "::1": true}}
	if auth != "" {
		var ok bool
		g.user, g.pass, ok = strings.Cut(auth, ":")
		if !ok || g.user == "" || g.pass == "" {
			return nil, fmt.Errorf("--auth wants user:password")
		}
	}
	if tcp, ok := addr.(*net.TCPAddr); ok && !tcp.IP.IsUnspecified() {
		g.hosts[tcp.IP.String()] = true
	}
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, fmt.Errorf("write token: %w", err)
	}
	g.token = hex.EncodeToString(b[:])
	return g, nil
}

// isLoopback reports whether the dashboard listens on loopback only.
func isLoopback(addr net.Addr) bool {
	tcp, ok := addr.(*net.TCPAddr)
	return ok && tcp.IP.IsLoopback()
}

// wrap applies the host and credential checks to every route.
func (g *guard) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if g.user == "" && !g.hosts[hostOnly(r.Host)] {
			writeAPI(w, http.StatusForbidden, map[string]string{"error": "this dashboard is served for localhost only (Host " + r.Host + " refused)"})
			return
		}
		if g.user != "" {
			u, p, ok := r.BasicAuth()
			if !ok || !equal(u, g.user) || !equal(p, g.pass) {
				w.Header().Set("WWW-Authenticate", `Basic realm="bus ui", charset="UTF-8"`)
				writeAPI(w, http.StatusUnauthorized, map[string]string{"error": "credentials required"})
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// writeAllowed reports why a write request is refused, or "" when it may
// go on.
func (g *guard) writeAllowed(r *http.Request) string {
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		return "writes must be application/json"
	}
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" {
		return "cross-site write refused (Sec-Fetch-Site: " + site + ")"
	}
	if o := r.Header.Get("Origin"); o != "" && o != "http://"+r.Host && o != "https://"+r.Host {
		return "cross-origin write refused (Origin " + o + ")"
	}
	if !equal(r.Header.Get(tokenHeader), g.token) {
		return "missing or wrong " + tokenHeader + " (reload the dashboard)"
	}
	return ""
}

// hostOnly is the host of a Host header, without port or brackets.
func hostOnly(hostport string) string {
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		return h
	}
	return strings.Trim(hostport, "[]")
}

// equal compares secrets in constant time.
func equal(a, b string) bool { return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1 }
