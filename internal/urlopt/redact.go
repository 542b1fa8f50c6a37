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
	if !plainPath(c.Path) && !databasePath(u) {
		// No backend URL has a path beyond a database number or name; a
		// path holding anything else may be misplaced credentials.
		c.Path, c.RawPath = "/"+mask, ""
	}
	if u.User == nil {
		return c.String()
	}
	if pw, has := u.User.Password(); has && pw != "" && plainUser(u.User.Username()) {
		c.User = url.UserPassword(u.User.Username(), mask)
	} else if !has && namedUser(u) {
		// A PostgreSQL user given without a password is a role name.
		c.User = url.User(u.User.Username())
	} else {
		// No password, or an empty one: the user part is the secret.
		c.User = url.User(mask)
	}
	return c.String()
}

// namesDatabase reports whether u is a PostgreSQL URL, whose path names
// a database and whose user part names a role: neither is a secret, only
// the password is.
func namesDatabase(u *url.URL) bool {
	s := strings.ToLower(u.Scheme)
	return s == "postgres" || s == "postgresql"
}

// databasePath reports whether u's path is a plain database name of a
// PostgreSQL URL ("/orders"), shown as it is.
func databasePath(u *url.URL) bool {
	return namesDatabase(u) && u.RawPath == "" && strings.HasPrefix(u.Path, "/") && plainName(u.Path[1:])
}

// namedUser reports whether u's user part is a plain role name of a
// PostgreSQL URL, shown as it is.
func namedUser(u *url.URL) bool {
	return namesDatabase(u) && u.User != nil && plainName(u.User.Username())
}

// plainUser reports whether a user name can be shown: it holds none of the
// characters that suggest a misplaced password or token.
func plainUser(name string) bool {
	return !strings.ContainsAny(name, "@:/?#%")
}

// suspiciousQuery reports whether a query may hold credentials: a key
// that is not a plain parameter name (letters, digits, '_', '-', '.'), such
// as one with '@', ':' or '/' from a misplaced user part or path, a key
// that names a credential, or a value with an '@' (a user part: a
// misplaced one, as in "redis://?u=:pw@h", or one of a seed address).
func suspiciousQuery(raw string) bool {
	for kv := range strings.SplitSeq(raw, "&") {
		k, v, _ := strings.Cut(kv, "=")
		if !plainName(k) || strings.Contains(v, "@") || strings.Contains(v, "%40") {
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
	if !plainPath(u.Path) && !databasePath(u) {
		out = append(out, u.Path, u.EscapedPath(), strings.TrimPrefix(u.Path, "/"))
		if u.RawPath != "" {
			// The path as the URL wrote it, when no escaping of the path
			// gives it back (a space or other character url.Parse lets
			// through unescaped).
			out = append(out, u.RawPath)
		}
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
		if name := u.User.Username(); name != "" && (!has || pw == "" || !plainUser(name)) && !(!has && namedUser(u)) {
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
	clean := redactText(msg, Secrets(u))
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

// redactText masks in msg the user part of every URL quoted in it and
// every occurrence of the secrets. All spans are found in the original
// text and masked together: masking one first could cut through another
// (a secret path through the "scheme://" of a quoted URL, or a quoted
// URL's user part through a secret query), hiding it from its search.
func redactText(msg string, secrets []string) string {
	var spans [][2]int
	for _, m := range userInfoInText.FindAllStringSubmatchIndex(msg, -1) {
		// From after "scheme://" to before the last '@'; in a PostgreSQL
		// URL, only what follows a plain role name and ':'.
		start := m[3]
		if scheme := strings.ToLower(msg[m[2] : m[3]-3]); scheme == "postgres" || scheme == "postgresql" {
			role, _, hasPW := strings.Cut(msg[start:m[1]-1], ":")
			if plainName(role) {
				start += len(role)
				if hasPW {
					start++
				}
			}
		}
		if start < m[1]-1 {
			spans = append(spans, [2]int{start, m[1] - 1})
		}
	}
	for _, sec := range secrets {
		spans = appendFoldSpans(spans, msg, sec)
	}
	if len(spans) == 0 {
		return msg
	}
	slices.SortFunc(spans, func(a, b [2]int) int { return a[0] - b[0] })
	var b strings.Builder
	from := 0 // msg[:from] is written or masked
	for i := 0; i < len(spans); {
		start, end := spans[i][0], spans[i][1]
		for i++; i < len(spans) && spans[i][0] <= end; i++ {
			end = max(end, spans[i][1])
		}
		b.WriteString(msg[from:start])
		b.WriteString(mask)
		from = end
	}
	b.WriteString(msg[from:])
	return b.String()
}

// appendFoldSpans appends the spans of s where old occurs, ignoring ASCII
// case (percent-escapes may be written %2f or %2F). An occurrence of a
// short secret (under 8 bytes) inside a longer word is left out, so that
// a password such as "on" never turns "Violation" into "Violatixxxxx".
func appendFoldSpans(spans [][2]int, s, old string) [][2]int {
	if old == "" {
		return spans
	}
	lower, lowOld := strings.ToLower(s), strings.ToLower(old)
	if len(lower) != len(s) || len(lowOld) != len(old) {
		lower, lowOld = s, old // non-ASCII case mapping changed lengths
	}
	short := len(old) < 8
	for at := 0; ; {
		i := strings.Index(lower[at:], lowOld)
		if i < 0 {
			return spans
		}
		i += at
		end := i + len(old)
		inWord := short && ((i > 0 && isAlnum(s[i-1]) && isAlnum(old[0])) ||
			(end < len(s) && isAlnum(s[end]) && isAlnum(old[len(old)-1])))
		if inWord {
			at = i + 1
			continue
		}
		spans = append(spans, [2]int{i, end})
		at = end
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
