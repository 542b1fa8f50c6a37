package urlopt_test

import (
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/internal/urlopt"
)

func TestRedactMasksOnlySecrets(t *testing.T) {
	t.Parallel()
	tests := []struct {
		raw, want string
	}{
		{"redis://default:s3cret@h:6379/0", "redis://default:xxxxx@h:6379/0"},
		{"nats://t0ken@h:4222", "nats://xxxxx@h:4222"},
		{"nats://h:4222?prefix=a", "nats://h:4222?prefix=a"},
		{"mem:user:s3cret@x", "mem:xxxxx"},
		{"redis:default:s3cret@h:6390", "redis:xxxxx"},
		{"mem://", "mem:"}, // net/url drops an empty authority
	}
	for _, tt := range tests {
		u, err := url.Parse(tt.raw)
		require.NoError(t, err, tt.raw)
		assert.Equal(t, tt.want, urlopt.Redact(u), "redact %q", tt.raw)
	}
	assert.Equal(t, "nats:xxxxx", urlopt.RedactString("nats:user:%zzPW@h"), "an unparsable URL keeps only its scheme")
}

func TestRedactShowsPostgreSQLDatabaseAndRoleAndMasksThePassword(t *testing.T) {
	t.Parallel()
	tests := []struct{ raw, want string }{
		{"postgres://bus:s3cret@h:5432/orders", "postgres://bus:xxxxx@h:5432/orders"},
		{"postgresql://bus@h/orders_v2?sslmode=disable", "postgresql://bus@h/orders_v2?sslmode=disable"},
		{"postgres://bus:s3cret@h/a%20b", "postgres://bus:xxxxx@h/xxxxx"}, // not a plain name
		{"postgres://b%40d:s3cret@h/db", "postgres://xxxxx@h/db"},         // not a plain role
	}
	for _, tt := range tests {
		u, err := url.Parse(tt.raw)
		require.NoError(t, err, tt.raw)
		assert.Equal(t, tt.want, urlopt.Redact(u), "redact %q", tt.raw)
	}
	u, _ := url.Parse("postgres://bus:s3cret@h/orders")
	err := urlopt.RedactError(errors.New(`connect to user=bus database=orders (postgres://bus:s3cret@h/orders): password authentication failed`), u)
	assert.Equal(t, `connect to user=bus database=orders (postgres://bus:xxxxx@h/orders): password authentication failed`, err.Error(),
		"only the password is masked: the role and the database name are shown")
	u, _ = url.Parse("postgres://bus@h/orders")
	err = urlopt.RedactError(errors.New(`connect to user=bus database=orders`), u)
	assert.Equal(t, `connect to user=bus database=orders`, err.Error(), "a role without a password is not a secret")
	// Elsewhere a user part without a password is a token.
	tok, _ := url.Parse("nats://bus@h")
	assert.Equal(t, "nats://xxxxx@h", urlopt.Redact(tok))
}

func TestRedactErrorMasksThePasswordNotTheUser(t *testing.T) {
	t.Parallel()
	u, _ := url.Parse("nats://Au:pw@h")
	base := errors.New("nats: Authorization Violation for Au with pw")
	err := urlopt.RedactError(base, u)
	assert.Equal(t, "nats: Authorization Violation for Au with xxxxx", err.Error(), "only the password is masked, never a substring of other words")
	assert.ErrorIs(t, err, base, "the error keeps its identity")

	short, _ := url.Parse("nats://Au:on@h")
	err = urlopt.RedactError(errors.New("nats: Authorization Violation for Au with on; ON"), short)
	assert.Equal(t, "nats: Authorization Violation for Au with xxxxx; xxxxx", err.Error(), "a short password is masked as a word, never inside other words")

	long, _ := url.Parse("redis://u:Zq9s3cretXk7@h")
	err = urlopt.RedactError(errors.New("got xZQ9S3CRETXK7x"), long)
	assert.Equal(t, "got xxxxxxx", err.Error(), "a long secret is masked wherever it appears, in any case")

	tok, _ := url.Parse("nats://s3cretTok@h")
	err = urlopt.RedactError(errors.New("disconnected from nats://s3cretTok@h"), tok)
	assert.NotContains(t, err.Error(), "s3cretTok", "a token is masked")
}

func TestCheckFormRefusesOpaqueAndHostless(t *testing.T) {
	t.Parallel()
	for _, raw := range []string{"nats:user:PW@h", "mem:user:PW@x", "rediss:PW@h", "redis:default:PW@h:6390"} {
		u, err := url.Parse(raw)
		require.NoError(t, err)
		err = urlopt.CheckForm(u, true)
		require.ErrorIs(t, err, backend.ErrInvalidOption, raw)
		assert.NotContains(t, err.Error(), "PW", "no secret in the error for %q", raw)
	}
	u, _ := url.Parse("redis://")
	assert.ErrorIs(t, urlopt.CheckForm(u, true), backend.ErrInvalidOption, "a host is required")
	assert.NoError(t, urlopt.CheckForm(u, false), "unless the backend needs none")
}

func TestParamsRejectUnknownRepeatedAndOutOfRange(t *testing.T) {
	t.Parallel()
	q, _ := url.ParseQuery("pool_size=-1&dur=0s&b=maybe&rep=1&rep=2&zzz=1&e=x&ok=5")
	p := urlopt.New(q)
	_, ok := p.Int("pool_size", 1, 100)
	assert.False(t, ok)
	_, ok = p.Duration("dur", time.Millisecond)
	assert.False(t, ok)
	_, ok = p.Bool("b")
	assert.False(t, ok)
	_, ok = p.String("rep")
	assert.False(t, ok)
	_, ok = p.Enum("e", "a", "b")
	assert.False(t, ok)
	n, ok := p.Int("ok", 1, 10)
	assert.True(t, ok)
	assert.Equal(t, 5, n)
	_, ok = p.Int("absent", 1, 10)
	assert.False(t, ok, "an absent parameter is not set")
	err := p.Err()
	require.ErrorIs(t, err, backend.ErrInvalidOption)
	for _, want := range []string{"pool_size", "dur", "b=", "rep", `"zzz"`, "e="} {
		assert.Contains(t, err.Error(), want, "the error names %s", want)
	}
}

// FuzzRedact: for URLs of every form the backends see, built around a
// marked secret, redaction never panics and never lets the secret through
// Redact, RedactError, CheckForm or ParseError.
func FuzzRedact(f *testing.F) {
	f.Add(0, "default", "pw", "h:6379", "db=1")
	f.Add(1, "", "tok", "h:4222", "")
	f.Add(2, "u", "p@ss:w/rd", "x", "a=b")
	f.Add(3, "u", "%zz", "h", "")
	f.Fuzz(func(t *testing.T, form int, user, pw, host, query string) {
		secret := "Zq9" + pw + "Xk7"
		var raw string
		switch form & 3 {
		case 0:
			raw = "redis://" + url.PathEscape(user) + ":" + url.PathEscape(secret) + "@" + host + "?" + query
		case 1:
			raw = "nats://" + url.PathEscape(secret) + "@" + host + "?" + query
		case 2:
			raw = "mem:" + user + ":" + secret + "@" + host
		default:
			raw = "rediss://" + user + ":" + secret + "@" + host + "/" + query
		}
		public := user + " " + host + " " + query
		forms := []string{secret, url.PathEscape(secret), url.QueryEscape(secret)}
		var out []string
		u, err := url.Parse(raw)
		if err != nil {
			out = append(out, urlopt.ParseError(raw).Error(), urlopt.RedactString(raw))
		} else {
			out = append(out, urlopt.Redact(u))
			if err := urlopt.CheckForm(u, true); err != nil {
				out = append(out, err.Error())
			} else {
				// Only a URL of a sound form is ever dialled, so only its
				// errors can quote it.
				out = append(out, urlopt.RedactError(errors.New("dial "+raw+" failed"), u).Error())
			}
		}
		for _, s := range forms {
			if strings.Contains(public, s) {
				continue // the fuzzer copied the secret into a public part
			}
			for _, o := range out {
				if strings.Contains(o, s) {
					t.Fatalf("secret %q leaked in %q (url %q)", s, o, raw)
				}
			}
		}
	})
}

// TestRedactErrorMasksUserPartsWhateverElseIsMasked: the forms fuzzing
// found leaking. A user part quoted in the text is masked even when it
// holds an apostrophe, and even when a secret path or query of the same
// URL is masked too; a query value with an '@' is a misplaced user part.
func TestRedactErrorMasksUserPartsWhateverElseIsMasked(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ raw, secret string }{
		{"rediss://u:pw'%00Secret@h/0", "pw'%00Secret"},        // apostrophe in the user part
		{"rediss://$:pw!%00Secret@h/$", "pw!%00Secret"},        // secret path "/$" next to the user part
		{"rediss://u?0@:pw Secret@h/0", "pw Secret"},           // '?' in the user name: the rest is a query
		{"rediss://?u=:pwSecret@h/0", "pwSecret"},              // an empty host: the user part is a query value
		{"redis://h:6379?addr=u:pwSecret@h2:6379", "pwSecret"}, // a seed address with a user part
	} {
		u, err := url.Parse(tt.raw)
		require.NoError(t, err, tt.raw)
		got := urlopt.RedactError(errors.New("dial "+tt.raw+" failed"), u).Error()
		assert.NotContains(t, got, tt.secret, "RedactError of %q", tt.raw)
		assert.NotContains(t, urlopt.Redact(u), tt.secret, "Redact of %q", tt.raw)
	}
}
