package nats

import (
	"errors"
	"net/url"
	"strings"
	"testing"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/internal/urlopt"
)

// urlSecret marks the credential in the URLs of FuzzParseURL.
const urlSecret = "Zq9s3cretXk7"

// FuzzParseURL: parsing a NATS URL of any form, with a marked secret as
// token or password, never panics; every error wraps
// backend.ErrInvalidOption and holds no form of the secret; a URL that
// parses yields a server URL without query, path or fragment.
func FuzzParseURL(f *testing.F) {
	f.Add(0, "nats", "", "h:4222", "")
	f.Add(1, "nats", "u", "h:4222", "prefix=app&streams=shared")
	f.Add(2, "tls", "u", "h", "publish_window=0")
	f.Add(3, "nats+tls", "", "", "")
	f.Add(0, "nats", "", "h", "prefix=a%00b")
	f.Add(1, "nats", "u", "h", "prefix=caf%C3%A9&prefix=x")
	f.Add(2, "nats", "u", "h", "max_age=-1s&bogus=1")
	f.Add(3, "nats", "u", "h/path", "")
	f.Add(0, "nats", "", "h", "jetstream=maybe&storage=disk&replicas=9")
	f.Fuzz(func(t *testing.T, form int, scheme, user, host, query string) {
		var raw string
		switch form & 3 {
		case 0: // token
			raw = scheme + "://" + urlSecret + "@" + host + "?" + query
		case 1: // user and password
			raw = scheme + "://" + url.PathEscape(user) + ":" + urlSecret + "@" + host + "?" + query
		case 2: // opaque
			raw = scheme + ":" + user + ":" + urlSecret + "@" + host + "?" + query
		default: // secret in a misplaced part
			raw = scheme + "://" + host + "/" + urlSecret + "?" + query
		}
		u, err := url.Parse(raw)
		if err != nil {
			checkNoSecret(t, raw, urlopt.ParseError(raw).Error())
			return
		}
		_, server, _, err := parseURL(u, nil)
		if err != nil {
			if !errors.Is(err, backend.ErrInvalidOption) {
				t.Fatalf("error %q for %q does not wrap ErrInvalidOption", err, raw)
			}
			if !strings.Contains(scheme+user+host+query, urlSecret) {
				checkNoSecret(t, raw, err.Error())
			}
			return
		}
		if server.RawQuery != "" || server.Path != "" || server.Fragment != "" {
			t.Fatalf("server URL %q of %q keeps a query, path or fragment", redacted(&server), raw)
		}
		if !strings.Contains(scheme+user+host+query, urlSecret) {
			checkNoSecret(t, raw, redacted(u))
		}
	})
}

func checkNoSecret(t *testing.T, raw, text string) {
	t.Helper()
	for _, s := range []string{urlSecret, url.PathEscape(urlSecret), url.QueryEscape(urlSecret)} {
		if strings.Contains(text, s) {
			t.Fatalf("the secret leaked in %q (url %q)", text, raw)
		}
	}
}
