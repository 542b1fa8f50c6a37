package middleware

import (
	"container/list"
	"context"
	"sync"
	"time"
)

// DefaultMemoryStoreSize is the capacity of NewMemoryStore(0).
const DefaultMemoryStoreSize = 100_000

// MemoryStore is a Store in process memory: an LRU of at most size keys,
// each with its own expiry. It is safe for concurrent use.
//
// When full it forgets the least recently used key, committed or claimed;
// a forgotten key is handled again if its message comes back. It suits a
// single consumer process; several processes need a shared store such as
// redisdedup.Store.
type MemoryStore struct {
	mu    sync.Mutex
	size  int
	ll    *list.List // front = most recently used
	items map[string]*list.Element
	now   func() time.Time
}

type memEntry struct {
	key     string
	done    bool
	token   string
	expires time.Time
}

// NewMemoryStore returns a MemoryStore holding at most size keys (size <= 0
// means DefaultMemoryStoreSize).
func NewMemoryStore(size int) *MemoryStore {
	if size <= 0 {
		size = DefaultMemoryStoreSize
	}
	return &MemoryStore{size: size, ll: list.New(), items: map[string]*list.Element{}, now: time.Now}
}

// Len returns how many keys the store holds, expired ones included until
// they are looked up or evicted.
func (s *MemoryStore) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ll.Len()
}

// Begin implements Store.
func (s *MemoryStore) Begin(_ context.Context, key, token string, lease time.Duration) (DedupState, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if el, ok := s.items[key]; ok {
		e := el.Value.(*memEntry)
		if now.Before(e.expires) {
			s.ll.MoveToFront(el)
			if e.done {
				return DedupDone, nil
			}
			return DedupBusy, nil
		}
		e.done, e.token, e.expires = false, token, now.Add(lease)
		s.ll.MoveToFront(el)
		return DedupClaimed, nil
	}
	s.items[key] = s.ll.PushFront(&memEntry{key: key, token: token, expires: now.Add(lease)})
	for s.ll.Len() > s.size {
		s.removeLocked(s.ll.Back())
	}
	return DedupClaimed, nil
}

// Commit implements Store.
func (s *MemoryStore) Commit(_ context.Context, key string, ttl time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	exp := s.now().Add(ttl)
	if el, ok := s.items[key]; ok {
		e := el.Value.(*memEntry)
		e.done, e.token, e.expires = true, "", exp
		s.ll.MoveToFront(el)
		return nil
	}
	s.items[key] = s.ll.PushFront(&memEntry{key: key, done: true, expires: exp})
	for s.ll.Len() > s.size {
		s.removeLocked(s.ll.Back())
	}
	return nil
}

// Abort implements Store.
func (s *MemoryStore) Abort(_ context.Context, key, token string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if el, ok := s.items[key]; ok {
		if e := el.Value.(*memEntry); !e.done && e.token == token {
			s.removeLocked(el)
		}
	}
	return nil
}

func (s *MemoryStore) removeLocked(el *list.Element) {
	s.ll.Remove(el)
	delete(s.items, el.Value.(*memEntry).key)
}
