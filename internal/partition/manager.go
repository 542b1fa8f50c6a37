package partition

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/internal/shutdown"
	"github.com/eventbus-go/bus/observer"
)

// Runner is the subscription of one partition (package bus's consumer).
type Runner interface {
	Start()
	// Close stops the partition; holding the partition's lock, it handles
	// what it fetched before it releases the lock (a handover).
	Close(ctx context.Context) error
	Force(cause error)
	Done() <-chan struct{}
	Err() error
}

// Config is what a Manager runs with.
type Config struct {
	Topic, Group string
	Partitions   int
	// Member names this member in the group, unique to the subscription.
	Member string
	// TTL is how long a heartbeat keeps the member in the group; it
	// beats every third of it, at most every second.
	TTL   time.Duration
	Store backend.Partitioner
	// Open subscribes partition p (not started yet). Its ctx is the
	// Subscribe ctx: when that ends, the partition's subscription closes
	// itself.
	Open func(ctx context.Context, p int) (Runner, error)
	// Handover bounds how long a partition moved to another member may
	// take to drain.
	Handover time.Duration
	// Assigned, when set, is told the partitions this member owns after
	// each heartbeat, before new ones start.
	Assigned func(owned []int)
	Observe  func(observer.Event)
	// Ended is called once, when the manager is done.
	Ended func()
}

// Manager runs the partitions a member owns. See the package doc.
type Manager struct {
	cfg Config

	mu      sync.Mutex
	running map[int]Runner
	leaving map[Runner]struct{} // partitions draining for a handover or the close
	closing bool
	err     error // why the manager ended on its own; nil after a Close
	// closeErr is the shutdown's error, returned by the Close that
	// started it.
	closeErr   error
	closeByAPI bool

	ended    chan Runner    // partitions whose subscription ended by itself
	handing  sync.WaitGroup // handovers and partition watchers
	stop     chan struct{}  // closed by the first Close
	quit     chan struct{}  // closed when the shutdown starts
	stopOnce sync.Once
	done     chan struct{} // closed when everything has ended
}

// Start joins the group, starts the partitions this member owns, and
// keeps them in step with the group until ctx ends or Close. It fails when
// the first heartbeat or the first subscriptions fail.
func Start(ctx context.Context, cfg Config) (*Manager, error) {
	m := &Manager{cfg: cfg, running: map[int]Runner{}, leaving: map[Runner]struct{}{},
		ended: make(chan Runner), stop: make(chan struct{}), quit: make(chan struct{}), done: make(chan struct{})}
	if err := m.round(ctx, true); err != nil {
		_ = m.shutdown()
		return nil, err
	}
	go m.run(ctx)
	return m, nil
}

// run beats until Close, until ctx ends or until a partition fails, then
// shuts the partitions down.
func (m *Manager) run(ctx context.Context) {
	defer func() {
		if m.cfg.Ended != nil {
			m.cfg.Ended()
		}
		close(m.done)
	}()
	t := time.NewTicker(beat(m.cfg.TTL))
	defer t.Stop()
	for {
		select {
		case <-t.C:
			if err := m.round(ctx, false); err != nil {
				m.observe(observer.ScopeLease, err)
			}
			continue
		case r := <-m.ended:
			if !m.failed(r) {
				continue
			}
		case <-ctx.Done():
		case <-m.stop:
		}
		err := m.shutdown()
		m.mu.Lock()
		m.closeErr = err
		m.mu.Unlock()
		return
	}
}

// failed handles a partition whose subscription ended by itself: a
// failure (Err set) ends the manager; it reports whether it did.
func (m *Manager) failed(r Runner) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	for p, cur := range m.running {
		if cur == r {
			delete(m.running, p)
			if err := r.Err(); err != nil && m.err == nil {
				m.err = fmt.Errorf("bus: partition %d of %q: %w", p, m.cfg.Topic, err)
				return true
			}
		}
	}
	return false
}

// shutdown closes every partition (a Close's Force cuts it short), waits
// for the handovers and leaves the group.
func (m *Manager) shutdown() error {
	m.mu.Lock()
	m.closing = true
	close(m.quit)
	rs := make([]Runner, 0, len(m.running))
	for _, r := range m.running {
		rs = append(rs, r)
		m.leaving[r] = struct{}{}
	}
	m.running = map[int]Runner{}
	m.mu.Unlock()
	errs := make([]error, len(rs))
	var wg sync.WaitGroup
	for i, r := range rs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = r.Close(context.Background())
		}()
	}
	wg.Wait()
	m.handing.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), m.cfg.TTL/3)
	defer cancel()
	if err := m.cfg.Store.Leave(ctx, m.cfg.Topic, m.cfg.Group, m.cfg.Member); err != nil {
		m.observe(observer.ScopeShutdown, fmt.Errorf("bus: leave partitioned group %q on %q: %w (the others wait for the heartbeat to lapse)", m.cfg.Group, m.cfg.Topic, err))
	}
	return errors.Join(errs...)
}

// Close stops the manager as Subscription.Close does for one
// subscription: every partition drains, within ctx; when ctx ends their
// handlers are cancelled. It returns by ctx's deadline plus a short grace.
func (m *Manager) Close(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() { m.Force(context.Cause(ctx)) })
	defer stop()
	first := false
	m.stopOnce.Do(func() {
		first = true
		m.mu.Lock()
		m.closeByAPI = true
		m.mu.Unlock()
		close(m.stop)
	})
	hard, cancel := shutdown.WithGrace(ctx)
	defer cancel()
	if !shutdown.WaitOrDone(hard, m.done) {
		return fmt.Errorf("bus: close partitioned subscription %q: %w", m.cfg.Topic, ctx.Err())
	}
	if !first {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.closeErr
}

// Force cancels the handlers of every partition still running or
// draining, with cause.
func (m *Manager) Force(cause error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range m.running {
		r.Force(cause)
	}
	for r := range m.leaving {
		r.Force(cause)
	}
}

// Done is closed when the manager and all its partitions have ended.
func (m *Manager) Done() <-chan struct{} { return m.done }

// Runners returns the partitions' subscriptions that run now, those
// draining for a handover included.
func (m *Manager) Runners() []Runner {
	m.mu.Lock()
	defer m.mu.Unlock()
	rs := make([]Runner, 0, len(m.running)+len(m.leaving))
	for _, r := range m.running {
		rs = append(rs, r)
	}
	for r := range m.leaving {
		rs = append(rs, r)
	}
	return rs
}

// Err returns why the manager ended on its own (a partition that failed
// for good); nil while it runs and after a Close.
func (m *Manager) Err() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closeByAPI {
		return nil
	}
	return m.err
}

func (m *Manager) observe(scope observer.Scope, err error) {
	if m.cfg.Observe != nil {
		m.cfg.Observe(observer.Event{Scope: scope, Topic: m.cfg.Topic, Group: m.cfg.Group, Err: err})
	}
}

// beat is how often a member beats: a third of the ttl, at most a second,
// so that a member that joins or leaves is seen within a second.
func beat(ttl time.Duration) time.Duration { return min(ttl/3, time.Second) }

// round beats once and brings the running partitions in line with the
// assignment. The first round fails on any error; later ones keep what
// runs and try again at the next beat.
func (m *Manager) round(ctx context.Context, first bool) error {
	// A beat has a third of the ttl, so that a late one is retried before
	// the member lapses. The first may take the whole ttl: no partition
	// runs on it yet, and a backend may create its membership store then.
	bound := m.cfg.TTL / 3
	if first {
		bound = m.cfg.TTL
	}
	hctx, cancel := context.WithTimeout(ctx, bound)
	members, err := m.cfg.Store.Heartbeat(hctx, m.cfg.Topic, m.cfg.Group, m.cfg.Member, m.cfg.TTL)
	cancel()
	if err != nil {
		return fmt.Errorf("bus: heartbeat of partitioned group %q on %q: %w", m.cfg.Group, m.cfg.Topic, err)
	}
	want := backend.AssignPartitions(members, m.cfg.Member, m.cfg.Partitions)
	m.mu.Lock()
	if m.closing {
		m.mu.Unlock()
		return nil
	}
	var lost []Runner
	for p, r := range m.running {
		if !slices.Contains(want, p) {
			lost = append(lost, r)
			delete(m.running, p)
		}
	}
	m.mu.Unlock()
	for _, r := range lost {
		m.handOver(r)
	}
	if m.cfg.Assigned != nil {
		m.cfg.Assigned(want)
	}
	var errs []error
	for _, p := range want {
		if err := m.startPartition(ctx, p); err != nil {
			errs = append(errs, err)
		}
	}
	if first {
		return errors.Join(errs...)
	}
	for _, err := range errs {
		m.observe(observer.ScopeReceive, err)
	}
	return nil
}

// startPartition starts partition p unless it runs.
func (m *Manager) startPartition(ctx context.Context, p int) error {
	m.mu.Lock()
	_, ok := m.running[p]
	m.mu.Unlock()
	if ok {
		return nil
	}
	r, err := m.cfg.Open(ctx, p)
	if err != nil {
		return fmt.Errorf("bus: subscribe partition %d of %q: %w", p, m.cfg.Topic, err)
	}
	m.mu.Lock()
	if m.closing {
		m.mu.Unlock()
		_ = r.Close(context.Background())
		return nil
	}
	m.running[p] = r
	m.mu.Unlock()
	r.Start()
	m.handing.Add(1)
	go func() {
		defer m.handing.Done()
		<-r.Done()
		select {
		case m.ended <- r:
		case <-m.quit:
		}
	}()
	return nil
}

// handOver drains r in the background, within the handover bound; its
// partition's lock is released when it has drained.
func (m *Manager) handOver(r Runner) {
	m.mu.Lock()
	m.leaving[r] = struct{}{}
	m.mu.Unlock()
	m.handing.Add(1)
	go func() {
		defer m.handing.Done()
		defer func() {
			m.mu.Lock()
			delete(m.leaving, r)
			m.mu.Unlock()
		}()
		ctx, cancel := context.WithTimeout(context.Background(), m.cfg.Handover)
		defer cancel()
		if err := r.Close(ctx); err != nil {
			m.observe(observer.ScopeShutdown, fmt.Errorf("bus: hand over a partition of %q: %w", m.cfg.Topic, err))
		}
	}()
}
