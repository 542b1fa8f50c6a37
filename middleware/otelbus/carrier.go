package otelbus

import (
	"maps"
	"strings"
	"sync"

	"github.com/eventbus-go/bus"
)

// headerCarrier reads trace context from received headers.
type headerCarrier map[string]string

func (h headerCarrier) Get(key string) string {
	if v, ok := h[key]; ok {
		return v
	}
	// Some transports change the case of header keys.
	for k, v := range h {
		if strings.EqualFold(k, key) {
			return v
		}
	}
	return ""
}

func (h headerCarrier) Set(key, value string) { h[key] = value }

func (h headerCarrier) Keys() []string {
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	return keys
}

// injector writes trace context into the messages of a publish without
// changing the caller's messages: the first Set on a message replaces it,
// in a copy of the batch slice, by a copy with its own header map.
type injector struct {
	orig   []*bus.Message
	out    []*bus.Message
	i      int
	copied bool // out[i] is already a copy
}

var injectors = sync.Pool{New: func() any { return new(injector) }}

// getInjector returns a pooled injector for msgs: passing a pointer to an
// interface method would otherwise allocate one per publish.
func getInjector(msgs []*bus.Message) *injector {
	c := injectors.Get().(*injector)
	c.orig, c.out, c.i, c.copied = msgs, msgs, 0, false
	return c
}

func putInjector(c *injector) {
	c.orig, c.out = nil, nil
	injectors.Put(c)
}

func (c *injector) at(i int) { c.i, c.copied = i, false }

func (c *injector) Get(key string) string {
	if m := c.out[c.i]; m != nil {
		return m.Headers[key]
	}
	return ""
}

func (c *injector) Set(key, value string) {
	if c.out[c.i] == nil {
		return
	}
	if !c.copied {
		if len(c.out) > 0 && len(c.orig) > 0 && &c.out[0] == &c.orig[0] {
			c.out = append([]*bus.Message(nil), c.orig...)
		}
		cp := *c.out[c.i]
		cp.Headers = make(map[string]string, len(cp.Headers)+2)
		maps.Copy(cp.Headers, c.out[c.i].Headers)
		c.out[c.i] = &cp
		c.copied = true
	}
	c.out[c.i].Headers[key] = value
}

func (c *injector) Keys() []string {
	m := c.out[c.i]
	if m == nil {
		return nil
	}
	keys := make([]string, 0, len(m.Headers))
	for k := range m.Headers {
		keys = append(keys, k)
	}
	return keys
}
