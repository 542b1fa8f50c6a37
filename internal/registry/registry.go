// Package registry holds the URL schemes of the backends that bus.Open
// can open: bus.Register adds one, bus.Open looks one up, and the command
// line tool lists them.
package registry

import (
	"context"
	"net/url"
	"slices"
	"sync"

	"github.com/eventbus-go/bus/backend"
)

// OpenFunc opens a backend from a URL. It must not keep ctx.
type OpenFunc = func(ctx context.Context, u *url.URL) (backend.Backend, error)

var (
	mu      sync.RWMutex
	schemes = map[string]OpenFunc{}
)

// Add registers open under scheme. It panics if open is nil or the
// scheme is taken.
func Add(scheme string, open OpenFunc) {
	if open == nil {
		panic("bus: Register open func is nil")
	}
	mu.Lock()
	defer mu.Unlock()
	if _, dup := schemes[scheme]; dup {
		panic("bus: Register called twice for scheme " + scheme)
	}
	schemes[scheme] = open
}

// Lookup returns the open func of scheme.
func Lookup(scheme string) (OpenFunc, bool) {
	mu.RLock()
	defer mu.RUnlock()
	open, ok := schemes[scheme]
	return open, ok
}

// Schemes returns the registered URL schemes, sorted.
func Schemes() []string {
	mu.RLock()
	defer mu.RUnlock()
	s := make([]string, 0, len(schemes))
	for k := range schemes {
		s = append(s, k)
	}
	slices.Sort(s)
	return s
}
