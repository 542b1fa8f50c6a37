package urlopt_test

import (
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/internal/urlopt"
)

// FuzzParseURL: any URL, read with every getter, never panics; a value a
// getter returns lies in its range; every error wraps
// backend.ErrInvalidOption; the value of a Secret parameter (marked, and
// possibly given twice) never appears in an error. The secrets of the
// URL's own parts are FuzzRedact's subject.
func FuzzParseURL(f *testing.F) {
	f.Add("redis://u:pw@h:6379/0?n=5&d=1s&b=true&e=a", "s3", false)
	f.Add("nats://tok@h?n=0&n=1&d=-1s&b=maybe&e=z", "s3", true)
	f.Add("mem:user:pw@x?n=99999999999999999999", "", false)
	f.Add("redis://h?d=1ns&o=-1&o=5m&unknown=1&%2Fpw=1", "x y", true)
	f.Add("redis://h#frag?n=1", "", false)
	f.Add("nats://?/pw?0", "&=", false)
	f.Fuzz(func(t *testing.T, raw, tok string, twice bool) {
		u, err := url.Parse(raw)
		if err != nil {
			checkErr(t, raw, "", urlopt.ParseError(raw))
			return
		}
		if err := urlopt.CheckForm(u, true); err != nil {
			checkErr(t, raw, "", err)
		}
		q := u.Query()
		secret := "Zq9" + tok + "Xk7"
		q.Add("tok", secret)
		if twice {
			q.Add("tok", secret)
		}
		p := urlopt.New(q)
		if n, ok := p.Int("n", 1, 100); ok && (n < 1 || n > 100) {
			t.Fatalf("Int n=%d out of [1, 100] for %q", n, raw)
		}
		if n, ok := p.Int64("m", -5, 5); ok && (n < -5 || n > 5) {
			t.Fatalf("Int64 m=%d out of [-5, 5] for %q", n, raw)
		}
		if d, ok := p.Duration("d", time.Millisecond); ok && d < time.Millisecond {
			t.Fatalf("Duration d=%v under 1ms for %q", d, raw)
		}
		p.DurationOrOff("o")
		p.Bool("b")
		if v, ok := p.Enum("e", "a", "b"); ok && v != "a" && v != "b" {
			t.Fatalf("Enum e=%q not allowed for %q", v, raw)
		}
		p.String("s")
		if v, ok := p.Secret("tok"); ok && v != secret {
			t.Fatalf("Secret tok=%q, want %q", v, secret)
		}
		if err := p.Err(); err != nil {
			if strings.Contains(raw, secret) {
				return // the fuzzer wrote the secret into the URL itself
			}
			checkErr(t, raw, secret, err)
		}
	})
}

func checkErr(t *testing.T, raw, secret string, err error) {
	t.Helper()
	if !errors.Is(err, backend.ErrInvalidOption) {
		t.Fatalf("error %q for %q does not wrap ErrInvalidOption", err, raw)
	}
	if secret != "" && strings.Contains(err.Error(), secret) {
		t.Fatalf("the secret parameter leaked in %q (url %q)", err, raw)
	}
}
