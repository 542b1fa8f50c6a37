package urlopt

import (
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"

	"github.com/eventbus-go/bus/backend"
)

// mask replaces a secret.
const mask = "xxxxx"

// Redact returns u for errors, logs and events: a password is masked, and
// so is a user part given without a password (NATS and others use that
// form for a token). An opaque URL (scheme:opaque) keeps only its scheme,
// since its credentials cannot be told apart from the rest.
func Redact(u *url.URL) string {
	if u == nil {
		return ""
	}
	if u.Opaque != "" {
		return u.Scheme + ":" + mask
	}
	c := *u
	if c.Fragment != "" || c.RawFragment != "" {
		// A misplaced '#' turns the rest of a URL, credentials included,
		// into a fragment.
		c.Fragment, c.RawFragment = mask, ""
	}
	if c.RawQuery != "" && suspiciousQuery(c.RawQuery) {
		c.RawQuery = mask
	}
	if !plainPath(c.Path) {
		// No backend URL has a path beyond a database number; a path
		// holding anything else may be misplaced credentials.
		c.Path, c.RawPath = "/"+mask, ""
	}
	if u.User == nil {
		return c.String()
	}
	if pw, has := u.User.Password(); has && pw != "" && plainUser(u.User.Username()) {
		c.User = url.UserPassword(u.User.Username(), mask)
	} else {
		// No password, or an empty one: the user part is the secret.
		c.User = url.User(mask)
	}
	return c.String()
}

// plainUser reports whether a user name can be shown: it holds none of the
// characters that suggest a misplaced password or token.
func plainUser(name string) bool {
	return !strings.ContainsAny(name, "@:/?#%")
}

// suspiciousQuery reports whether a query may hold credentials: a key
// that is not a plain parameter name (letters, digits, '_', '-', '.'), such
// as one with '@', ':' or '/' from a misplaced user part or path, or a key
// that names a credential.
func suspiciousQuery(raw string) bool {
	for kv := range strings.SplitSeq(raw, "&") {
		k, _, _ := strings.Cut(kv, "=")
		if !plainName(k) {
			return true
		}
		switch strings.ToLower(k) {
		case "password", "pass", "pwd", "token", "secret", "auth", "user", "username":
			return true
		}
	}
	return false
}

// plainPath reports whether p is empty, "/" or "/" and a number.
func plainPath(p string) bool {
	if p == "" || p == "/" {
		return true
	}
	if p[0] != '/' {
		return false
	}
	for i := 1; i < len(p); i++ {
		if p[i] < '0' || p[i] > '9' {
			return false
		}
	}
	return true
}

// RedactString parses raw and redacts it; a URL that does not parse is
// shown only by its scheme, if any.
func RedactString(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		if i := strings.Index(raw, ":"); i > 0 && !strings.ContainsAny(raw[:i], "/@?#") {
			return raw[:i] + ":" + mask
		}
		return mask
	}
	return Redact(u)
}

// Secrets returns the secrets of u: its password, or its user part when it
// has no password (a token), and the user info of an opaque URL. Empty
// strings are left out.
func Secrets(u *url.URL) []string {
	if u == nil {
		return nil
	}
	var out []string
	if u.Fragment != "" {
		out = append(out, u.Fragment, u.EscapedFragment())
	}
	if !plainPath(u.Path) {
		out = append(out, u.Path, u.EscapedPath(), strings.TrimPrefix(u.Path, "/"))
	}
	if u.RawQuery != "" && suspiciousQuery(u.RawQuery) {
		out = append(out, u.RawQuery)
	}
	if u.Opaque != "" {
		out = append(out, u.Opaque)
		if at := strings.LastIndex(u.Opaque, "@"); at > 0 {
			out = append(out, u.Opaque[:at])
			if _, pw, ok := strings.Cut(u.Opaque[:at], ":"); ok && pw != "" {
				out = append(out, pw)
			}
		}
	}
	if u.User != nil {
		pw, has := u.User.Password()
		if has && pw != "" {
			out = append(out, pw, url.QueryEscape(pw), url.PathEscape(pw))
		}
		if name := u.User.Username(); name != "" && (!has || pw == "" || !plainUser(name)) {
			out = append(out, name, url.QueryEscape(name), url.PathEscape(name))
		}
	}
	return out
}

// RedactError returns err with every secret of u masked in its text. The
// result keeps err's identity for errors.Is and errors.As. Only the
// secrets are masked: a user name that has a password is left alone.
func RedactError(err error, u *url.URL) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	clean := msg
	secrets := Secrets(u)
	// Longest first, so a short secret inside a longer one does not break
	// the longer one's match.
	slices.SortFunc(secrets, func(a, b string) int { return len(b) - len(a) })
	for _, s := range secrets {
		clean = replaceFold(clean, s, mask)
	}
	// Any user part of any URL quoted in the text, however it is escaped.
	clean = userInfoInText.ReplaceAllString(clean, "${1}"+mask+"@")
	var ue *url.Error
	if errors.As(err, &ue) {
		// A url.Error quotes the whole URL.
		clean = strings.ReplaceAll(clean, ue.URL, RedactString(ue.URL))
	}
	if clean == msg {
		return err
	}
	return &redactedError{msg: clean, err: err}
}

// userInfoInText matches the user part of a URL quoted in a text. A user
// part may hold an apostrophe (a sub-delimiter url.Parse accepts there,
// written as is): the match runs up to white space, '"', '<' or '>',
// none of which a URL that parsed can hold.
var userInfoInText = regexp.MustCompile(`(?i)([a-z][a-z0-9+.-]*://)[^\s"<>]*@`)

// replaceFold replaces the occurrences of old in s, ignoring ASCII case
// (percent-escapes may be written %2f or %2F). An occurrence of a short
// secret (under 8 bytes) inside a longer word is left alone, so that a
// password such as "on" never turns "Violation" into "Violatixxxxx".
func replaceFold(s, old, repl string) string {
	if old == "" {
		return s
	}
	lower, lowOld := strings.ToLower(s), strings.ToLower(old)
	if len(lower) != len(s) || len(lowOld) != len(old) {
		lower, lowOld = s, old // non-ASCII case mapping changed lengths
	}
	short := len(old) < 8
	var b strings.Builder
	from := 0 // s[:from] is written
	for at := 0; ; {
		i := strings.Index(lower[at:], lowOld)
		if i < 0 {
			b.WriteString(s[from:])
			return b.String()
		}
		i += at
		end := i + len(old)
		inWord := short && ((i > 0 && isAlnum(s[i-1]) && isAlnum(old[0])) ||
			(end < len(s) && isAlnum(s[end]) && isAlnum(old[len(old)-1])))
		if inWord {
			at = i + 1
			continue
		}
		b.WriteString(s[from:i])
		b.WriteString(repl)
		from, at = end, end
	}
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

// ParseError is the error for a URL that url.Parse refused. The parser's
// own error text quotes the URL or a piece of it, which may be part of a
// password, so it is not used: only the redacted scheme is shown.
func ParseError(raw string) error {
	return fmt.Errorf("%w: url %q does not parse as scheme://[user[:password]@]host[:port][/path][?query]", backend.ErrInvalidOption, RedactString(raw))
}
