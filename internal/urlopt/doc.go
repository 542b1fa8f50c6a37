// Package urlopt is the one parser of backend URLs: it checks the URL's
// form, reads its query parameters with typed, range-checked getters, and
// redacts credentials for errors, logs and events. The mem, redis and
// nats backends all use it, so they refuse the same mistakes the same way:
// an unknown or repeated parameter, a value out of range, an opaque URL
// (scheme without "//", where a password would not be recognised as
// one), or a missing host. Every error wraps backend.ErrInvalidOption and
// none contains a secret.
package urlopt
