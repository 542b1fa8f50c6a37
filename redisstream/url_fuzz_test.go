package redisstream

import (
	"errors"
	"net/url"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/internal/urlopt"
)

// urlSecret marks the password in the URLs of FuzzParseURL.
const urlSecret = "Zq9s3cretXk7"

// FuzzParseURL: parsing a redis URL of any form, with a marked secret as
// password, never panics; every error wraps backend.ErrInvalidOption and
// holds no form of the secret; the client options of a URL that parses
// build a go-redis client without a panic (single node; cluster pool
// settings are checked) and honour ctx deadlines.
func FuzzParseURL(f *testing.F) {
	f.Add(0, "redis", "default", "h:6379", "", "")
	f.Add(0, "rediss", "u", "h:6380", "2", "pool_size=10&read_timeout=-1")
	f.Add(0, "redis", "u", "h", "", "pool_size=-1")
	f.Add(0, "redis", "u", "h", "", "pool_size=0&min_idle_conns=-5&max_retries=-2")
	f.Add(0, "redis", "u", "h", "x", "protocol=4&dial_timeout=0s")
	f.Add(0, "redis", "u", "h", "", "cluster=true&addr=h2:6379&addr=:1")
	f.Add(0, "redis", "u", "h", "", "addr=h2:6379")
	f.Add(1, "redis", "default", "h:6390", "", "")
	f.Add(2, "redis", "", "", "", "")
	f.Add(3, "redis", "u", "h", "", "retention=maxlen&maxlen=0&block=1ns")
	f.Add(0, "redis", "u", "h", "", "bogus=1&prefix=a&prefix=b")
	f.Fuzz(func(t *testing.T, form int, scheme, user, host, db, query string) {
		var raw string
		switch form & 3 {
		case 0: // user and password
			raw = scheme + "://" + url.PathEscape(user) + ":" + urlSecret + "@" + host + "/" + db + "?" + query
		case 1: // opaque
			raw = scheme + ":" + user + ":" + urlSecret + "@" + host + "?" + query
		case 2: // password only
			raw = scheme + "://:" + urlSecret + "@" + host + "/" + db + "?" + query
		default: // secret in a misplaced part
			raw = scheme + "://" + host + "/" + urlSecret + "?" + query
		}
		public := scheme + user + host + db + query
		u, err := url.Parse(raw)
		if err != nil {
			checkNoSecret(t, raw, public, urlopt.ParseError(raw).Error())
			return
		}
		pu, err := parseURL(u)
		if err != nil {
			if !errors.Is(err, backend.ErrInvalidOption) {
				t.Fatalf("error %q for %q does not wrap ErrInvalidOption", err, raw)
			}
			checkNoSecret(t, raw, public, err.Error())
			return
		}
		checkNoSecret(t, raw, public, urlopt.Redact(u))
		if pu.cluster != nil {
			if !pu.cluster.ContextTimeoutEnabled {
				t.Fatalf("the cluster client of %q does not honour ctx deadlines", raw)
			}
			// A cluster client loads the cluster state in the background
			// (a dial), so only its pool settings are checked here; they
			// are the ones go-redis would panic on.
			if c := pu.cluster; c.PoolSize < 0 || c.MinIdleConns < 0 || c.MaxIdleConns < 0 || c.MaxActiveConns < 0 {
				t.Fatalf("the cluster pool settings of %q are negative", raw)
			}
			return
		}
		if !pu.single.ContextTimeoutEnabled {
			t.Fatalf("the client of %q does not honour ctx deadlines", raw)
		}
		pu.single.MinIdleConns = 0 // no dial from a fuzz target
		_ = redis.NewClient(pu.single).Close()
	})
}

func checkNoSecret(t *testing.T, raw, public, text string) {
	t.Helper()
	if strings.Contains(public, urlSecret) {
		return // the fuzzer copied the secret into a public part
	}
	for _, s := range []string{urlSecret, url.PathEscape(urlSecret), url.QueryEscape(urlSecret)} {
		if strings.Contains(text, s) {
			t.Fatalf("the secret leaked in %q (url %q)", text, raw)
		}
	}
}
