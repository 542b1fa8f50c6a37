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
// did you mean "redis://localhost:6379"?). raw is shown only when it holds
// no credentials ('@').
func MissingScheme(raw string, schemes []string) error {
	if strings.Contains(raw, "@") {
		return fmt.Errorf("the URL has no scheme: write it as scheme://[user:password@]host:port (schemes: %s)", strings.Join(schemes, ", "))
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
