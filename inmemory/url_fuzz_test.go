package inmemory

import (
	"errors"
	"net/url"
	"strings"
	"testing"

	"github.com/eventbus-go/bus/backend"
)

// urlSecret marks the credential in the URLs of FuzzOpenURL.
const urlSecret = "Zq9s3cretXk7"

// FuzzOpenURL: opening a mem URL of any form, with a marked secret in a
// user part or a misplaced part, never panics; every error wraps
// backend.ErrInvalidOption and holds no form of the secret; a URL that
// opens gives a backend that closes.
func FuzzOpenURL(f *testing.F) {
	f.Add(0, "mem", "", "")
	f.Add(0, "mem", "fuzzbroker", "max_backlog=10&backlog_policy=error")
	f.Add(0, "mem", "", "max_backlog=-1")
	f.Add(0, "mem", "", "max_backlog=1&max_backlog=2")
	f.Add(0, "mem", "", "max_backlog_bytes=0&backlog_policy=drop&bogus=1")
	f.Add(1, "mem", "x", "")
	f.Add(2, "mem", "x", "")
	f.Add(3, "mem", "x", "")
	f.Fuzz(func(t *testing.T, form int, scheme, host, query string) {
		var raw string
		switch form & 3 {
		case 0: // no secret
			raw = scheme + "://" + host + "?" + query
		case 1: // user and password
			raw = scheme + "://user:" + urlSecret + "@" + host + "?" + query
		case 2: // opaque
			raw = scheme + ":user:" + urlSecret + "@" + host + "?" + query
		default: // secret in a misplaced part
			raw = scheme + "://" + host + "/" + urlSecret + "?" + query
		}
		u, err := url.Parse(raw)
		if err != nil {
			return
		}
		b, err := openURL(u)
		if err != nil {
			if !errors.Is(err, backend.ErrInvalidOption) {
				t.Fatalf("error %q for %q does not wrap ErrInvalidOption", err, raw)
			}
			if strings.Contains(scheme+host+query, urlSecret) {
				return // the fuzzer copied the secret into a public part
			}
			for _, s := range []string{urlSecret, url.PathEscape(urlSecret), url.QueryEscape(urlSecret)} {
				if strings.Contains(err.Error(), s) {
					t.Fatalf("the secret leaked in %q (url %q)", err, raw)
				}
			}
			return
		}
		if err := b.Close(); err != nil {
			t.Fatalf("close the backend of %q: %v", raw, err)
		}
	})
}
