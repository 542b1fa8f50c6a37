package bus_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/backend"
)

// fakeBackend is a scripted backend for testing the portable layer alone:
// tests push messages into queue and read back every SPI call.
type fakeBackend struct {
	caps bus.Capabilities

	mu           sync.Mutex
	queue        []*bus.BackendMessage
	wake         chan struct{}
	acked        []string
	ackCalls     int // Ack calls made
	nacks        []fakeNack
	published    map[string][]*bus.BackendMessage
	receives     []int // max of each Receive call
	outstand     int   // delivered and not settled
	maxOut       int
	closedSub    bool
	ackedAtClose int
}

type fakeNack struct {
	ID    string
	Delay time.Duration
}

func newFakeBackend() *fakeBackend {
	return &fakeBackend{
		caps:      bus.Capabilities{Name: "fake", Redelivery: true, ConsumerGroups: true, NackDelay: true},
		wake:      make(chan struct{}, 1),
		published: map[string][]*bus.BackendMessage{},
	}
}

func (f *fakeBackend) push(msgs ...*bus.BackendMessage) {
	f.mu.Lock()
	for _, m := range msgs {
		if m.Attempt == 0 {
			m.Attempt = 1
		}
		m.AckID = m.ID
	}
	f.queue = append(f.queue, msgs...)
	f.mu.Unlock()
	select {
	case f.wake <- struct{}{}:
	default:
	}
}

func (f *fakeBackend) Publish(_ context.Context, topic string, msgs []*bus.BackendMessage) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, m := range msgs {
		cp := *m
		f.published[topic] = append(f.published[topic], &cp)
	}
	return nil
}

func (f *fakeBackend) Subscribe(context.Context, string, backend.SubscribeConfig) (backend.Subscription, error) {
	return &fakeSub{f: f}, nil
}

func (f *fakeBackend) Capabilities() bus.Capabilities { return f.caps }
func (f *fakeBackend) Close() error                   { return nil }

func (f *fakeBackend) snapshot() (acked []string, nacks []fakeNack, maxOut int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.acked...), append([]fakeNack(nil), f.nacks...), f.maxOut
}

func (f *fakeBackend) publishedTo(topic string) []*bus.BackendMessage {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*bus.BackendMessage(nil), f.published[topic]...)
}

func (f *fakeBackend) receiveCalls() []int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]int(nil), f.receives...)
}

type fakeSub struct{ f *fakeBackend }

func (s *fakeSub) Receive(ctx context.Context, max int) ([]*bus.BackendMessage, error) {
	f := s.f
	for {
		f.mu.Lock()
		if len(f.queue) > 0 {
			n := min(max, len(f.queue))
			out := f.queue[:n:n]
			f.queue = f.queue[n:]
			f.receives = append(f.receives, max)
			f.outstand += n
			f.maxOut = maxInt(f.maxOut, f.outstand)
			f.mu.Unlock()
			return out, nil
		}
		f.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-f.wake:
		case <-time.After(200 * time.Millisecond):
			return nil, nil
		}
	}
}

func maxInt(a, b int) int {
	if a > b {
		return a
	}
	return b
}

func (s *fakeSub) Ack(_ context.Context, ids []backend.AckID) error {
	s.f.mu.Lock()
	defer s.f.mu.Unlock()
	s.f.ackCalls++
	for _, id := range ids {
		s.f.acked = append(s.f.acked, id.(string))
		s.f.outstand--
	}
	return nil
}

func (s *fakeSub) Nack(_ context.Context, id backend.AckID, delay time.Duration) error {
	s.f.mu.Lock()
	defer s.f.mu.Unlock()
	s.f.nacks = append(s.f.nacks, fakeNack{ID: id.(string), Delay: delay})
	s.f.outstand--
	return nil
}

func (s *fakeSub) Close() error {
	s.f.mu.Lock()
	defer s.f.mu.Unlock()
	s.f.closedSub = true
	s.f.ackedAtClose = len(s.f.acked)
	return nil
}

// within returns the next value of ch, failing the test with "no WHAT
// within 10s" when none comes by then.
func within[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("no %s within 10s", what)
		var zero T
		return zero
	}
}

// queueLen counts the messages not handed out yet.
func (f *fakeBackend) queueLen() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.queue)
}
