package urlopt

import (
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/eventbus-go/bus/backend"
)

// CheckForm refuses URLs whose form the backends cannot read safely: an
// opaque URL ("nats:user:pw@host", a scheme without "//"), a fragment, and,
// when needHost is set, an empty host. The error holds the redacted URL.
func CheckForm(u *url.URL, needHost bool) error {
	switch {
	case u.Opaque != "":
		return fmt.Errorf("%w: %q is not of the form %s://...: a URL without \"//\" is refused, so that credentials in it are never taken for a host",
			backend.ErrInvalidOption, Redact(u), u.Scheme)
	case u.Fragment != "":
		return fmt.Errorf("%w: %q has a fragment", backend.ErrInvalidOption, Redact(u))
	case needHost && u.Hostname() == "":
		// Without a host, what follows the scheme is misplaced and may
		// hold a credential: only the scheme is shown.
		return fmt.Errorf("%w: %s://%s... has no host", backend.ErrInvalidOption, u.Scheme, mask)
	}
	return nil
}

// Params reads the query parameters of a URL. Each getter consumes one
// parameter: a parameter given twice is an error, and Err reports every
// parameter that no getter consumed as unknown. Errors wrap
// backend.ErrInvalidOption and quote values only of parameters that hold
// no secret.
type Params struct {
	q    url.Values
	used map[string]bool
	errs []error
}

// New returns the parameters of q.
func New(q url.Values) *Params {
	return &Params{q: q, used: map[string]bool{}}
}

// raw consumes name and returns its single value.
func (p *Params) raw(name string) (string, bool) {
	p.used[name] = true
	vs, ok := p.q[name]
	if !ok {
		return "", false
	}
	if len(vs) != 1 {
		p.errs = append(p.errs, fmt.Errorf("%w: parameter %q given %d times", backend.ErrInvalidOption, name, len(vs)))
		return "", false
	}
	return vs[0], true
}

func (p *Params) bad(name, v, want string) {
	p.errs = append(p.errs, fmt.Errorf("%w: %s=%q: want %s", backend.ErrInvalidOption, name, shorten(v), want))
}

func shorten(v string) string {
	if len(v) > 64 {
		return v[:64] + "..."
	}
	return v
}

// String returns the value of name, if given.
func (p *Params) String(name string) (string, bool) { return p.raw(name) }

// Secret returns the value of name, if given; errors never quote it.
func (p *Params) Secret(name string) (string, bool) { return p.raw(name) }

// Has consumes name and reports whether it was given (with any value).
func (p *Params) Has(name string) bool {
	p.used[name] = true
	_, ok := p.q[name]
	return ok
}

// Int returns the integer value of name, which must lie in [min, max].
func (p *Params) Int(name string, min, max int) (int, bool) {
	v, ok := p.raw(name)
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < min || n > max {
		p.bad(name, v, fmt.Sprintf("an integer from %d to %d", min, max))
		return 0, false
	}
	return n, true
}

// Int64 is Int for int64 values.
func (p *Params) Int64(name string, min, max int64) (int64, bool) {
	v, ok := p.raw(name)
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < min || n > max {
		p.bad(name, v, fmt.Sprintf("an integer from %d to %d", min, max))
		return 0, false
	}
	return n, true
}

// Duration returns the duration value of name (Go syntax, such as 1.5s),
// which must be at least min and more than zero.
func (p *Params) Duration(name string, min time.Duration) (time.Duration, bool) {
	v, ok := p.raw(name)
	if !ok {
		return 0, false
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < min || d <= 0 {
		p.bad(name, v, fmt.Sprintf("a duration of at least %v, such as 30s", max(min, time.Nanosecond)))
		return 0, false
	}
	return d, true
}

// Window returns the duration value of name for a window that 0 turns
// off: 0, or a positive duration such as 2m.
func (p *Params) Window(name string) (time.Duration, bool) {
	v, ok := p.raw(name)
	if !ok {
		return 0, false
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		p.bad(name, v, "0 (off) or a duration such as 2m")
		return 0, false
	}
	return d, true
}

// DurationOrOff is Duration that also accepts -1 (or any negative
// duration) and 0, for go-redis timeouts where those mean "none" and
// "default".
func (p *Params) DurationOrOff(name string) (time.Duration, bool) {
	v, ok := p.raw(name)
	if !ok {
		return 0, false
	}
	if v == "-1" {
		return -1, true
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		p.bad(name, v, "a duration such as 30s, or -1 for none")
		return 0, false
	}
	return d, true
}

// Bool returns the boolean value of name (true, false, 1, 0).
func (p *Params) Bool(name string) (bool, bool) {
	v, ok := p.raw(name)
	if !ok {
		return false, false
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		p.bad(name, v, "true or false")
		return false, false
	}
	return b, true
}

// Enum returns the value of name, which must be one of allowed.
func (p *Params) Enum(name string, allowed ...string) (string, bool) {
	v, ok := p.raw(name)
	if !ok {
		return "", false
	}
	if !slices.Contains(allowed, v) {
		p.bad(name, v, "one of "+strings.Join(allowed, ", "))
		return "", false
	}
	return v, true
}

// Fail records an error about a parameter that the caller checked itself.
func (p *Params) Fail(err error) { p.errs = append(p.errs, err) }

// Err returns every error so far, plus one for each parameter that no
// getter consumed, or nil.
func (p *Params) Err() error {
	errs := slices.Clone(p.errs)
	var unknown []string
	for k := range p.q {
		if !p.used[k] {
			// A key that is no parameter name may be a misplaced
			// credential: it is not quoted.
			if !plainName(k) {
				k = mask
			}
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		slices.Sort(unknown)
		known := make([]string, 0, len(p.used))
		for k := range p.used {
			known = append(known, k)
		}
		slices.Sort(known)
		errs = append(errs, fmt.Errorf("%w: unknown parameter(s) %q (known: %s)", backend.ErrInvalidOption, unknown, strings.Join(known, ", ")))
	}
	return errors.Join(errs...)
}

// plainName reports whether k can be a parameter name: at most 64
// letters, digits, '_', '-' and '.'.
func plainName(k string) bool {
	return k != "" && len(k) <= 64 && strings.IndexFunc(k, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' || r == '.')
	}) < 0
}
