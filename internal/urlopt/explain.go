package urlopt

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// wellKnownPorts names the servers usually found on a port, for the hint
// of a connection to a server that speaks another protocol.
var wellKnownPorts = map[string]string{
	"6379": "Redis", "6380": "Redis", "4222": "NATS", "5432": "PostgreSQL",
	"3306": "MySQL or MariaDB", "5672": "RabbitMQ", "1883": "MQTT", "80": "HTTP", "443": "HTTPS",
}

// Explain says what a failed connection to hostport most likely means, for
// a client of protocol (for example "NATS" or "Redis"): nothing listening,
// a host that does not resolve, or a server that does not speak the
// protocol (a timeout before its greeting, or a reply the client cannot
// read). The cause is kept (errors.Is works through it); err is returned
// as is when there is nothing to add.
func Explain(err error, protocol, hostport string) error {
	if err == nil {
		return nil
	}
	_, port, _ := net.SplitHostPort(hostport)
	other := ""
	if name := wellKnownPorts[port]; name != "" && name != protocol {
		other = fmt.Sprintf(" port %s is usually %s's", port, name)
	}
	var dns *net.DNSError
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Errorf("nothing listens on %s (is the %s server running, and is the port right?): %w", hostport, protocol, err)
	case errors.As(err, &dns):
		return fmt.Errorf("cannot resolve the host of %s: %w", hostport, err)
	case errors.Is(err, os.ErrDeadlineExceeded) || isTimeout(err):
		return fmt.Errorf("no %s server answered at %s in time (does it speak %s?%s): %w", protocol, hostport, protocol, other, err)
	case other != "" && (strings.Contains(err.Error(), "can't parse") || strings.Contains(err.Error(), "protocol")):
		return fmt.Errorf("the server at %s does not speak %s (%s): %w", hostport, protocol, strings.TrimSpace(other), err)
	case strings.Contains(err.Error(), "can't parse") || strings.Contains(err.Error(), "protocol"):
		return fmt.Errorf("the server at %s does not speak %s: %w", hostport, protocol, err)
	}
	return err
}

func isTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}

// MissingScheme is the error of a URL without "scheme://": it lists the
// schemes and suggests the URL with the likely one (for "localhost:6379":
// did you mean "redis://localhost:6379"?). A URL that starts with a
// scheme whose "://" is mistyped ("redis//host:6379", "redis:host:6379")
// gets that scheme with "://". raw is shown only when it holds no
// credentials ('@').
func MissingScheme(raw string, schemes []string) error {
	scheme, rest := mistypedScheme(raw, schemes)
	if strings.Contains(raw, "@") {
		if scheme != "" {
			return fmt.Errorf("the URL's scheme %q is not followed by \"://\": write it as %s://[user:password@]host:port", scheme, scheme)
		}
		return fmt.Errorf("the URL has no scheme: write it as scheme://[user:password@]host:port (schemes: %s)", strings.Join(schemes, ", "))
	}
	if scheme != "" {
		return fmt.Errorf("%q: the scheme %q is not followed by \"://\"; did you mean %q?", raw, scheme, scheme+"://"+rest)
	}
	var tries []string
	_, port, _ := net.SplitHostPort(raw)
	switch wellKnownPorts[port] {
	case "Redis":
		tries = []string{"redis://" + raw}
	case "NATS":
		tries = []string{"nats://" + raw}
	default:
		tries = []string{"redis://" + raw, "nats://" + raw}
	}
	for i, t := range tries {
		tries[i] = strconv.Quote(t)
	}
	return fmt.Errorf("%q has no scheme (schemes: %s); did you mean %s?", raw, strings.Join(schemes, ", "), strings.Join(tries, " or "))
}

// knownSchemes are the schemes of the backends that ship with the bus,
// recognised in a mistyped URL whether or not their package is linked.
var knownSchemes = []string{"redis", "rediss", "nats", "postgres", "postgresql", "mem"}

// mistypedScheme returns the scheme raw starts with, followed by ':' or
// '/' but not by "://", and what follows those characters; "" when raw
// starts with no scheme of schemes or knownSchemes. The longest scheme
// wins ("rediss" over "redis").
func mistypedScheme(raw string, schemes []string) (scheme, rest string) {
	lower := strings.ToLower(raw)
	for _, s := range append(append([]string(nil), schemes...), knownSchemes...) {
		if len(s) <= len(scheme) || !strings.HasPrefix(lower, s) {
			continue
		}
		after := raw[len(s):]
		trimmed := strings.TrimLeft(after, ":/")
		if trimmed == after || trimmed == "" {
			continue
		}
		scheme, rest = s, trimmed
	}
	return scheme, rest
}
