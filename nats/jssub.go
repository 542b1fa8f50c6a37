package nats

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/observer"
)

// Pull timing. Receive sends a request that the server holds up to
// longPoll for the first message and ends as soon as it has delivered
// what the stream holds, up to the batch ("no_wait" with "expires"): one
// round trip whether messages wait or not. While messages flow faster
// than such requests can be answered one by one, it asks instead for as
// many as the flow brings in half of briefWait, with a request that
// waits until it is full ("expires" alone, briefWait): a steady stream
// fills it and it ends without a status message, as the client
// library's Consume keeps its requests open. Receive returns once it
// has taken a message and the inbox is momentarily empty: the rest of
// the requests is coming (see Coming), and the next Receive collects it.
// A request whose end the server does not confirm within its wait plus
// responseGrace is abandoned (the connection is probably down); one
// that waits until full, within its wait plus briefGrace, as a server
// before 2.10 drops a request that expires as a message comes without
// a status message.
const (
	longPoll      = 800 * time.Millisecond
	briefWait     = 100 * time.Millisecond
	briefGrace    = 20 * time.Millisecond
	responseGrace = 250 * time.Millisecond
	setupTimeout  = 5 * time.Second
	// briefMin is the fewest messages a request that waits until it
	// is full asks for.
	briefMin = 32
)

// Bodies of the JetStream acknowledgement protocol.
var (
	ackBody      = []byte("+ACK")
	nakBody      = []byte("-NAK")
	progressBody = []byte("+WPI")
	termBody     = []byte("+TERM")
)

// jsAckID is one delivery: its ack subject and the end of its lease, as
// far as this member knows (receipt, or the last successful Extend, plus
// the consumer's AckWait, less a margin for the server having started the
// clock a little earlier). JetStream does not tell a member that its
// delivery was redelivered, so a Nack, Extend or DeadLetter after that
// point is refused as stale: it could otherwise act on the newer
// delivery. An Ack is always sent: the server settles the message if it
// is still pending.
type jsAckID struct {
	reply    string
	deadline atomic.Int64 // monoNow nanoseconds
	// released is the key of this message's release record (see
	// release.go) when it had one: settling the message deletes it.
	released string
}

// leaseMargin is taken off the lease this member assumes it holds.
func leaseMargin(ackWait time.Duration) time.Duration {
	return min(ackWait/10, 250*time.Millisecond)
}

func (a *jsAckID) renew(ackWait time.Duration) { a.renewFrom(monoNow(), ackWait) }

// renewFrom starts the lease at now, a monoNow reading taken no later
// than when the member took the delivery from its inbox.
func (a *jsAckID) renewFrom(now int64, ackWait time.Duration) {
	a.deadline.Store(now + int64(ackWait-leaseMargin(ackWait)))
}

func (a *jsAckID) stale() bool { return monoNow() > a.deadline.Load() }

// monoEpoch is the origin of monoNow.
var monoEpoch = time.Now()

// monoNow reads the monotonic clock alone, which is cheaper than time.Now:
// nanoseconds since monoEpoch.
func monoNow() int64 { return int64(time.Since(monoEpoch)) }

// openPull is a pull request that may not have ended: reply is the
// subject its end arrives on, asked how many messages it asked for, and
// until when the server answers it. An extra one was sent while an older
// request was open. left is how many it still owes if the server served
// the open requests oldest first.
type openPull struct {
	reply       string
	kind        pullKind
	asked, left int
	until       time.Time
	extra       bool
}

// jsSub is one member of a group: a durable pull consumer read through a
// private inbox, with pull requests that together ask for no more
// messages than the capacity the bus reserved.
type jsSub struct {
	b        *Backend
	topic    string
	cfg      backend.SubscribeConfig
	stream   string
	consumer string
	nextSubj string
	inbox    string // "<inbox>." ; request n replies to inbox+n
	idScope  string // prefix of Nats-Msg-Id in this topic's stream
	in       *inboxSub
	// subMu orders moveInbox's swap of in (on Receive's goroutine,
	// which alone reads in otherwise) with Close.
	subMu sync.Mutex
	// inboxLen is the room of the inbox's channel and maxBatch the most
	// messages a pull asks for (see inboxRoom).
	inboxLen, maxBatch int

	seq     uint64 // pull request counter; Receive's goroutine only
	lastSeq uint64 // highest stream sequence received; Receive's goroutine only
	// unanswered is when the consumer's pull requests first went
	// unanswered (no responders, or no answer in time) since the last
	// answer, zero while they are answered: a replicated consumer
	// answers none while it elects its leader (see electing).
	// Receive's goroutine only.
	unanswered time.Time
	spare      []jsAckID // allocated for deliveries to come; Receive's goroutine only
	// msgs holds the messages of the last Receive, which the next one
	// reuses, as the SPI allows; handed of them are in use, and out is
	// the slice the last Receive returned. Only the AckIDs, which live
	// until settled, are allocated per delivery. Receive's goroutine
	// only.
	msgs   []backend.Message
	handed int
	out    []*backend.Message
	// excess are deliveries beyond what Receive may return, handed back
	// before it returns (handBackExcess); Receive's goroutine only.
	excess []*natsgo.Msg
	// open are the pull requests that may not have ended, oldest
	// first, and owed how many messages they may still bring, together.
	// The server hands its open requests one delivery each in turn, and
	// a delivery does not name its request, so only their sum is known:
	// a request ends full without a word, and a status message that
	// ends one says how many it still owed. The first filled of them
	// are counted full (their left reached 0, oldest first): the server
	// may still owe them messages, as it serves its requests in turn,
	// so a status message for one may still come. Receive's goroutine
	// only.
	open   []openPull
	owed   int
	filled int
	// The flow of deliveries: flowN counted since flowFrom (monoNow),
	// and the rate of the last window of briefWait, per second.
	// Receive's goroutine only.
	flowFrom int64
	flowN    int
	rate     float64

	// recvMu is held by Receive: Close reads open and unsure only when
	// it can take it (no Receive runs).
	recvMu sync.Mutex
	// unsure: the member, connected to a cluster, moved to a fresh inbox
	// while a pull request it gave up on was open (moveInbox). A server
	// other than the member's may deliver to the old one before the
	// unsubscribe reaches it, and the delivery stays pending until its
	// AckWait. Receive's goroutine only.
	unsure bool

	closeOnce sync.Once
	closed    chan struct{}
}

func (b *Backend) subscribeJS(ctx context.Context, topic string, cfg backend.SubscribeConfig) (*jsSub, error) {
	if _, err := b.ensureConsumer(ctx, topic, cfg, nil); err != nil {
		return nil, err
	}
	s := &jsSub{
		b: b, topic: topic, cfg: cfg,
		stream:   b.streamFor(topic),
		consumer: b.consumerFor(topic, cfg.Group),
		inbox:    b.nc.NewInbox() + ".",
		idScope:  b.idScope(topic),
		closed:   make(chan struct{}),
	}
	s.nextSubj = "$JS.API.CONSUMER.MSG.NEXT." + s.stream + "." + s.consumer
	s.inboxLen, s.maxBatch = inboxRoom(cfg.MaxInFlight)
	in, err := subscribeInbox(b.nc, s.inbox+"*", s.inboxLen)
	if err != nil {
		return nil, fmt.Errorf("subscribe inbox: %w", err)
	}
	s.in = in
	b.track(s)
	b.startPromoter(topic, cfg.Observer)
	return s, nil
}

func (s *jsSub) connectionEvent(err error) {
	s.cfg.Observer.Observe(context.Background(), observer.Event{Scope: observer.ScopeConnection, Topic: s.topic, Group: s.cfg.Group, Err: err})
}

func (s *jsSub) isClosed() bool { return isDone(s.closed) }

// Receive implements backend.Subscription. The Attempt of a redelivery
// has the releases of the message taken off (see Release).
func (s *jsSub) Receive(ctx context.Context, max int) ([]*backend.Message, error) {
	s.recvMu.Lock()
	defer s.recvMu.Unlock()
	last, lastHanded := s.out, s.handed
	s.handed = 0
	out, err := s.receive(ctx, max, last[:0])
	// Drop the references of the last Receive's messages beyond this
	// one's, so that the collector can take their payloads.
	if s.handed < lastHanded {
		clear(s.msgs[s.handed:min(lastHanded, len(s.msgs))])
	}
	clear(last[min(len(out), len(last)):])
	s.out = out
	if len(s.excess) > 0 {
		s.handBackExcess(ctx)
	}
	if len(out) > 0 {
		s.unanswered = time.Time{} // the consumer answers
		s.correctAttempts(ctx, out)
	}
	return out, err
}

func (s *jsSub) receive(ctx context.Context, n int, out []*backend.Message) ([]*backend.Message, error) {
	if s.isClosed() || s.b.closed.Load() {
		s.forgetRequests() // what is coming is left to its lease
		return out, fmt.Errorf("nats: receive %q: %w", s.topic, backend.ErrClosed)
	}
	max := min(n, s.maxBatch)
	if max < 1 {
		max = 1
	}
	if len(s.open) > 0 {
		// Messages are coming: collect them, after asking for more when
		// the capacity beyond them is worth a request.
		if more := min(n-s.Coming(), s.maxBatch); s.filling() == 1 && more > 0 && more >= s.maxBatch/4 {
			if kind := s.open[len(s.open)-1].kind; kind != pullBrief {
				_ = s.openRequest(more, kind, true) // on failure, the open one goes on
			} else if brief := s.briefBatch() - s.owed; brief > 0 {
				// The open requests share the flow: together they ask
				// for what it brings in half of briefWait.
				_ = s.openRequest(min(more, brief), kind, true)
			}
		}
		out, err := s.collect(ctx, out, n, true)
		return out, s.wrap(err)
	}
	// Messages of an abandoned request that arrived since the last call.
	out = s.drain(out, max)
	if len(out) > 0 {
		return out, nil
	}
	kind, ask := pullUntilFirst, max
	if brief := s.briefBatch(); brief > 0 {
		kind, ask = pullBrief, min(max, brief)
	}
	out, err := s.pull(ctx, out, max, ask, kind)
	if !errors.Is(err, errRequestsPending) {
		return out, s.wrap(err)
	}
	// The server refused a request that returns early because an older
	// one of this member, abandoned, is still open there: wait for the
	// first message with a plain request, then take what else is there.
	out, err = s.pull(ctx, out, max, 1, pullWait)
	if err != nil || len(out) == 0 || max == 1 {
		return out, s.wrap(err)
	}
	out, err = s.pull(ctx, out, max, max-len(out), pullNoWait)
	return out, s.wrap(err)
}

// Coming implements backend.PartialReceiver: the messages the open pull
// requests may still bring.
func (s *jsSub) Coming() int { return s.owed }

// openRequest sends a pull request of kind for n messages and adds it to
// the open ones.
func (s *jsSub) openRequest(n int, kind pullKind, extra bool) error {
	reply, err := s.request(n, kind)
	if err != nil {
		return err
	}
	now := time.Now()
	// A request counted full whose time is up has ended: the server
	// answers it within that time.
	i := 0
	for i < s.filled && now.After(s.open[i].until) {
		i++
	}
	s.open = append(s.open[:0], s.open[i:]...)
	s.filled -= i
	wait := longPoll + responseGrace
	if kind == pullBrief {
		wait = briefWait + briefGrace
	}
	s.open = append(s.open, openPull{reply: reply, kind: kind, asked: n, left: n, until: now.Add(wait), extra: extra})
	s.owed += n
	return nil
}

// filling returns how many open requests have not been counted full.
func (s *jsSub) filling() int { return len(s.open) - s.filled }

// delivered counts a delivery, taken at now (monoNow), against the open
// requests: once they owe nothing, they have all ended full.
func (s *jsSub) delivered(now int64) {
	s.flowN++
	if d := now - s.flowFrom; d >= int64(briefWait) {
		s.rate = float64(s.flowN) * float64(time.Second) / float64(d)
		s.flowFrom, s.flowN = now, 0
	}
	if s.filled < len(s.open) {
		p := &s.open[s.filled]
		if p.left--; p.left <= 0 {
			s.filled++
		}
	}
	if s.owed--; s.owed <= 0 {
		s.forgetRequests()
	}
}

// briefBatch returns how many messages a request that waits until it is
// full asks for: what the flow of the last window brings in half of
// briefWait, or 0 (a request that ends with what the stream holds) when
// that is fewer than briefMin or the window is more than one window
// old.
func (s *jsSub) briefBatch() int {
	if monoNow()-s.flowFrom > 2*int64(briefWait) {
		return 0
	}
	n := int(s.rate * briefWait.Seconds() / 2)
	if n < briefMin {
		return 0
	}
	return n
}

// endRequest forgets the open request i, which a status message ended;
// msg says how many messages it still owed (all it asked for when the
// header is missing: the server ended it, so what else is coming is at
// most what the others owe).
func (s *jsSub) endRequest(i int, msg *natsgo.Msg) {
	owed := s.open[i].asked
	if n, err := strconv.Atoi(msg.Header.Get(hdrPendingMsgs)); err == nil && n >= 0 {
		owed = n
	}
	s.open = append(s.open[:i], s.open[i+1:]...)
	if i < s.filled {
		s.filled--
	}
	s.owed -= owed
	if len(s.open) == 0 || s.owed <= 0 {
		s.forgetRequests()
	}
}

// forgetRequests forgets the open requests: they ended, or what they
// still bring is left to drain and to the leases.
func (s *jsSub) forgetRequests() {
	s.open = s.open[:0]
	s.owed, s.filled = 0, 0
}

// Kinds of pull request.
type pullKind int

const (
	// pullUntilFirst waits up to longPoll for the first message and ends
	// when the stream has nothing more to deliver.
	pullUntilFirst pullKind = iota
	// pullWait waits up to longPoll until the batch is full.
	pullWait
	// pullNoWait takes what is there now.
	pullNoWait
	// pullBrief waits up to briefWait until the batch is full.
	pullBrief
)

// errRequestsPending is the server's refusal of a pullUntilFirst request
// while older requests of the member are open.
var errRequestsPending = errors.New("pull: server status 408 Requests Pending")

func (s *jsSub) wrap(err error) error {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	if s.isClosed() || s.b.closed.Load() {
		// Closed while the pull was in progress: whatever the
		// connection said, the answer is that the member is closed.
		return fmt.Errorf("nats: receive %q: %w", s.topic, backend.ErrClosed)
	}
	return fmt.Errorf("nats: receive %q: %w", s.topic, err)
}

// drain takes messages already waiting in the inbox, up to max.
func (s *jsSub) drain(out []*backend.Message, max int) []*backend.Message {
	now := monoNow()
	for {
		msg, ok := s.in.poll()
		if !ok {
			return out
		}
		if !isJSDelivery(msg) {
			continue // the end of an abandoned request
		}
		out = s.accept(out, max, msg, 1, now)
	}
}

// pull sends one pull request of kind for n messages and collects its
// messages into out (never beyond max). A pullUntilFirst request
// returns once it has taken a message and the inbox is momentarily
// empty: the rest of the request is coming (see Coming), and the next
// Receive collects it.
func (s *jsSub) pull(ctx context.Context, out []*backend.Message, max, n int, kind pullKind) ([]*backend.Message, error) {
	if err := s.openRequest(n, kind, false); err != nil {
		return out, err
	}
	return s.collect(ctx, out, max, kind == pullUntilFirst || kind == pullBrief)
}

// collect takes the messages of the open requests into out (never beyond
// max), until they end, or, when early, until the inbox is empty after
// at least one message (the requests stay open). A request the server
// neither fills nor ends in time is abandoned with an error: the
// connection is down or the server is overloaded (this is the pull's
// heartbeat: the server always answers a live request). When ctx has
// ended, collect returns its error with what it took, also when the
// requests ended full before it noticed.
func (s *jsSub) collect(ctx context.Context, out []*backend.Message, max int, early bool) ([]*backend.Message, error) {
	var wctx context.Context // made when collect first waits
	took := 0
	// now is read when a wait for the next message ends: the deliveries
	// already in the inbox then share it, a reading taken after they
	// arrived.
	now := monoNow()
	for len(s.open) > 0 {
		msg, ok := s.in.poll()
		var err error
		if !ok {
			if early && took > 0 && ctx.Err() == nil {
				return out, nil
			}
			if wctx == nil {
				var cancel context.CancelFunc
				wctx, cancel = context.WithDeadline(ctx, s.open[len(s.open)-1].until)
				defer cancel()
			}
			msg, err = s.in.next(wctx)
			now = monoNow()
		}
		if err != nil {
			brief := s.open[len(s.open)-1].kind == pullBrief
			if ctx.Err() != nil && !s.isClosed() {
				out = s.abandon(out, max)
			}
			s.forgetRequests()
			if brief && ctx.Err() == nil && wctx.Err() != nil && s.b.nc.IsConnected() {
				// Expired without a word (see briefGrace): the next
				// Receive asks again.
				return out, nil
			}
			return out, s.waitErr(ctx, wctx, err)
		}
		if isJSDelivery(msg) {
			// A delivery of an older, abandoned request counts against
			// the open ones too.
			out = s.accept(out, max, msg, s.owed, now)
			s.delivered(now)
			took++
			continue
		}
		i := s.openIndex(msg.Subject)
		if i < 0 {
			continue // the end of an older, abandoned request
		}
		done, err := s.status(ctx, msg, s.open[i].kind)
		if s.open[i].extra && errors.Is(err, errRequestsPending) {
			// The server refused the extra request: the older one
			// takes what the stream holds.
			done, err = true, nil
		}
		if err != nil {
			s.forgetRequests()
			return out, err
		}
		if done {
			s.endRequest(i, msg)
		}
	}
	// The requests ended with everything they asked for: a Receive whose
	// ctx ended meanwhile still reports it, with what they delivered.
	return out, ctx.Err()
}

// openIndex returns the index of the open request answered on reply, or
// -1.
func (s *jsSub) openIndex(reply string) int {
	for i := range s.open {
		if s.open[i].reply == reply {
			return i
		}
	}
	return -1
}

// abandonWait bounds how long abandon waits for the end of the requests
// cut short: the server ends a request that waits for its first message
// as soon as it has delivered what the stream holds. Requests that wait
// until they are full are waited for until they expire (briefWait plus
// briefGrace).
const abandonWait = 50 * time.Millisecond

// abandon collects into out what the open requests that ctx cut short
// still deliver, and Receive returns it
// with ctx's error. The server hands a request the messages it holds as
// soon as it gets it: left in the inbox, they stayed pending until their
// AckWait when no Receive followed (the bus stops fetching when it closes
// a member), and a key-ordered group's next member, taking the lock this
// member releases, went on with the messages after them. The bus handles
// (a closing member of a key-ordered group) or gives back what Receive
// returns. The member waits up to abandonWait for the requests' end,
// and when they do not end (one waits for messages that are not there
// yet) moves to a fresh inbox and drains the old one (a delivery the
// server sends after the unsubscribe goes back to the group by itself).
// The requests are forgotten.
func (s *jsSub) abandon(out []*backend.Message, max int) []*backend.Message {
	var got []*natsgo.Msg
	now := monoNow()
	until := time.Now().Add(abandonWait)
	if last := s.open[len(s.open)-1]; last.kind == pullBrief && last.until.After(until) {
		until = last.until
	}
	wait, cancel := context.WithDeadline(context.Background(), until)
	for len(s.open) > 0 {
		msg, err := s.in.next(wait)
		if err != nil {
			break
		}
		if isJSDelivery(msg) {
			got = append(got, msg)
			s.delivered(now) // requests that owe nothing have ended full
		} else if i := s.openIndex(msg.Subject); i >= 0 && msg.Header.Get(hdrStatus) != "100" {
			s.endRequest(i, msg) // not a heartbeat
		}
	}
	cancel()
	ended := len(s.open) == 0
	s.forgetRequests()
	if !ended {
		// A lone server delivers nothing more once it has the
		// unsubscribe; in a cluster the consumer's leader may still.
		s.unsure = s.unsure || s.b.nc.ConnectedClusterName() != ""
		got = s.moveInbox(got)
	}
	for _, msg := range got {
		out = s.accept(out, max, msg, 1, now)
	}
	return out
}

// moveInbox moves the member to a fresh inbox and drains the old one
// into back: the server delivers nothing to it once it has the
// unsubscribe, and what it delivered before arrives before the drain's
// flush returns. It waits at most responseGrace.
func (s *jsSub) moveInbox(back []*natsgo.Msg) []*natsgo.Msg {
	prefix := s.b.nc.NewInbox() + "."
	in, err := subscribeInbox(s.b.nc, prefix+"*", s.inboxLen)
	if err != nil {
		return back // the next Receive drains the old inbox instead
	}
	s.subMu.Lock()
	if s.isClosed() {
		s.subMu.Unlock()
		_ = in.sub.Unsubscribe()
		return back
	}
	old := s.in
	s.in, s.inbox = in, prefix
	s.subMu.Unlock()
	defer func() { _ = old.sub.Unsubscribe() }()
	if err := old.sub.Drain(); err != nil {
		return back
	}
	wait, cancel := context.WithTimeout(context.Background(), responseGrace)
	defer cancel()
	for {
		msg, err := old.next(wait)
		if err != nil {
			return back // drained, or out of time
		}
		if isJSDelivery(msg) {
			back = append(back, msg)
		}
	}
}

// request sends a pull request for n messages and returns the subject its
// end is answered on.
func (s *jsSub) request(n int, kind pullKind) (string, error) {
	if !s.b.nc.IsConnected() {
		// A request written now would wait in the reconnect buffer and
		// reach the server late, after Receive gave up on it.
		return "", fmt.Errorf("pull: %w (%s)", natsgo.ErrDisconnected, s.b.nc.Status())
	}
	s.seq++
	var buf [80]byte
	reply := string(strconv.AppendUint(append(buf[:0], s.inbox...), s.seq, 10))
	req := strconv.AppendInt(append(buf[:0], `{"batch":`...), int64(n), 10)
	switch kind {
	case pullUntilFirst:
		req = strconv.AppendInt(append(req, `,"no_wait":true,"expires":`...), longPoll.Nanoseconds(), 10)
	case pullWait:
		req = strconv.AppendInt(append(req, `,"expires":`...), longPoll.Nanoseconds(), 10)
	case pullNoWait:
		req = append(req, `,"no_wait":true`...)
	case pullBrief:
		req = strconv.AppendInt(append(req, `,"expires":`...), briefWait.Nanoseconds(), 10)
	}
	req = append(req, '}')
	if err := s.b.nc.PublishRequest(s.nextSubj, reply, req); err != nil {
		if errors.Is(err, natsgo.ErrConnectionClosed) {
			return "", fmt.Errorf("pull: %w", backend.ErrClosed)
		}
		return "", fmt.Errorf("pull: %w", err)
	}
	return reply, nil
}

// waitErr is pull's error when waiting for the next message failed.
func (s *jsSub) waitErr(ctx, wctx context.Context, err error) error {
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case wctx.Err() != nil:
		state := "connected"
		if !s.b.nc.IsConnected() {
			state = "not connected: " + s.b.nc.Status().String()
		} else if s.electing(ctx) {
			// A leader that stepped down may drop the requests it
			// held, or get one as it steps down.
			return nil
		}
		return fmt.Errorf("pull: no answer from the server within %v (%s)", longPoll+responseGrace, state)
	case errors.Is(err, natsgo.ErrNoResponders):
		// The client library turns the 503 status into this error:
		// nobody serves this consumer's pull requests.
		return s.recover(ctx, "no responders for pull requests")
	case s.isClosed() || errors.Is(err, natsgo.ErrBadSubscription) || errors.Is(err, natsgo.ErrConnectionClosed):
		return backend.ErrClosed
	}
	return err
}

// status reads a status message that ends (or not) the request: done
// reports that the request is over.
func (s *jsSub) status(ctx context.Context, msg *natsgo.Msg, kind pullKind) (done bool, err error) {
	code := msg.Header.Get(hdrStatus)
	if code != "503" {
		s.unanswered = time.Time{}
	}
	switch code {
	case "408":
		if kind == pullUntilFirst && msg.Header.Get(hdrDescription) == "Requests Pending" {
			return true, errRequestsPending
		}
		// The request expired, or (before server 2.10) ended after
		// delivering what there was: done.
		return true, nil
	case "404":
		return true, nil // no messages
	case "100":
		return false, nil // heartbeat
	case "503":
		return true, s.recover(ctx, "no responders for pull requests")
	case "409":
		desc := msg.Header.Get(hdrDescription)
		switch {
		case desc == "Consumer Deleted":
			return true, s.recover(ctx, "consumer deleted")
		case strings.EqualFold(desc, "Leadership Change"):
			// The consumer's leader moved: the request ended, and the
			// next one goes to the new leader.
			return true, nil
		}
		return true, fmt.Errorf("pull: server status 409 %s", desc)
	default:
		return true, fmt.Errorf("pull: server status %s %s", code, msg.Header.Get(hdrDescription))
	}
}

// recover re-creates a consumer (and stream) that the server lost. When
// the consumer exists after all, the error goes back to the bus, which
// backs off before the next Receive, unless the consumer is replicated
// and was electing its leader (see electing): then the Receive ends
// with what it has, and no error.
func (s *jsSub) recover(ctx context.Context, why string) error {
	if s.electing(ctx) {
		return nil // the next Receive asks the leader
	}
	rctx, cancel := context.WithTimeout(ctx, setupTimeout)
	defer cancel()
	s.b.forgetStream(s.stream)
	r := &resume{afterSeq: s.lastSeq}
	created, err := s.b.ensureConsumer(rctx, s.topic, s.cfg, r)
	if err != nil {
		return fmt.Errorf("%s; re-creating consumer %q: %w", why, s.consumer, err)
	}
	if !created {
		return fmt.Errorf("pull: %s, but consumer %q exists", why, s.consumer)
	}
	s.cfg.Observer.Observe(ctx, observer.Event{
		Scope: observer.ScopeReclaim, Topic: s.topic, Group: s.cfg.Group,
		Err: fmt.Errorf("nats: consumer %q on stream %q was missing (%s); re-created from %s", s.consumer, s.stream, why, r.from),
	})
	return nil
}

// electing reports whether the consumer, which did not answer a pull
// request, is a replicated one that has (or gets within setupTimeout) a
// leader, while its requests have gone unanswered for less than
// setupTimeout: the cluster was electing the consumer's leader, or
// telling its servers where the leader is, which takes moments after
// the consumer is made and whenever its leader moves. While there is
// no leader, the server answers no request about the consumer, so each
// look-up is given a short time, doubling. It waits a pause of retry's
// once the leader is there, so that the requests that follow find it.
func (s *jsSub) electing(ctx context.Context) bool {
	if s.b.opts.Replicas < 2 {
		return false // nothing is elected
	}
	now := time.Now()
	if s.unanswered.IsZero() {
		s.unanswered = now
	}
	if now.Sub(s.unanswered) >= setupTimeout {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, setupTimeout)
	defer cancel()
	var r retry
	for wait := responseGrace; ; wait *= 2 {
		lctx, lcancel := context.WithTimeout(ctx, wait)
		c, err := s.b.js.Consumer(lctx, s.stream, s.consumer)
		lcancel()
		switch {
		case err == nil && c.CachedInfo().Cluster != nil && c.CachedInfo().Cluster.Leader != "":
			return r.pause(ctx) == nil
		case err != nil && !errors.Is(err, context.DeadlineExceeded) && !unavailable(err):
			return false // missing, or another failure: recover handles it
		case ctx.Err() != nil || r.pause(ctx) != nil:
			return false
		}
	}
}

// unavailable reports the server's answer while a replicated asset has
// no leader: status 503, "JetStream system temporarily unavailable".
func unavailable(err error) bool {
	var api *jetstream.APIError
	return errors.As(err, &api) && api.Code == 503
}

// accept turns a delivered message into a backend message whose lease
// this member assumes to start at now (monoNow): when the member took
// the message from its inbox, or earlier. Deliveries
// beyond max (only possible after an abandoned request) are kept for
// handBackExcess; entries that are not JetStream deliveries are reported.
func (s *jsSub) accept(out []*backend.Message, max int, msg *natsgo.Msg, coming int, now int64) []*backend.Message {
	meta, err := parseAckSubject(msg.Reply)
	if err != nil {
		s.cfg.Observer.Observe(context.Background(), observer.Event{
			Scope: observer.ScopeDecode, Topic: s.topic, Group: s.cfg.Group,
			Err: fmt.Errorf("nats: dropped a message without JetStream metadata: %w", err),
		})
		return out
	}
	if len(out) >= max {
		s.excess = append(s.excess, msg)
		return out
	}
	if meta.streamSeq > s.lastSeq {
		s.lastSeq = meta.streamSeq
	}
	a := s.newAckID(coming)
	a.reply = msg.Reply
	a.renewFrom(now, s.cfg.AckTimeout)
	m := s.nextMessage()
	*m = backend.Message{
		Payload:     msg.Data,
		PublishedAt: meta.timestamp,
		AckID:       a,
		Attempt:     meta.delivered,
	}
	decodeHeaders(msg.Header, m, s.idScope)
	if m.ID == "" {
		// Written by a foreign producer without an ID: the stream
		// sequence is stable across redeliveries.
		m.ID = meta.stream + ":" + strconv.FormatUint(meta.streamSeq, 10)
	}
	return append(out, m)
}

// excessTimeout bounds the hand-back of excess deliveries
// (handBackExcess): the recording of their releases, and the wait for
// the server's confirmation of their nacks.
const excessTimeout = time.Second

// handBackExcess gives back the deliveries Receive got beyond its max:
// those a request the member gave up on (it timed out, or ctx ended)
// brought after it, next to those of the request that followed. They
// are recorded as releases (see Release), since no handler saw them, then
// nacked in the order they came, each nack asking for the server's
// confirmation, which Receive waits for: the server handles acks apart
// from pull requests, and a nack it has not handled yet would let the
// next pull take the messages after them first. Once handled, the server
// hands them out again before anything after them, with the Attempt they
// had. Whatever is not done within excessTimeout is left (a release not
// recorded counts the redelivery).
func (s *jsSub) handBackExcess(ctx context.Context) {
	excess := s.excess
	s.excess = nil
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), excessTimeout)
	defer cancel()
	each(len(excess), func(i int) {
		if meta, err := parseAckSubject(excess[i].Reply); err == nil {
			_ = s.recordRelease(rctx, s.releaseKey(meta.streamSeq))
		}
	})
	inbox := s.b.nc.NewInbox()
	confirmed, err := s.b.nc.SubscribeSync(inbox)
	if err != nil {
		for _, msg := range excess {
			_ = s.b.nc.Publish(msg.Reply, nakBody)
		}
		return
	}
	defer func() { _ = confirmed.Unsubscribe() }()
	sent := 0
	for _, msg := range excess {
		if s.b.nc.PublishRequest(msg.Reply, inbox, nakBody) == nil {
			sent++
		}
	}
	for range sent {
		if _, err := confirmed.NextMsgWithContext(rctx); err != nil {
			return
		}
	}
}

// deliveryChunk bounds how many AckIDs share one allocation; one that is
// still unsettled keeps its chunk in memory.
const deliveryChunk = 32

// newAckID returns a zero AckID. AckIDs are allocated in chunks sized by
// how many more the current request may bring (coming).
func (s *jsSub) newAckID(coming int) *jsAckID {
	if len(s.spare) == 0 {
		s.spare = make([]jsAckID, min(max(coming, 1), deliveryChunk))
	}
	a := &s.spare[0]
	s.spare = s.spare[1:]
	return a
}

// nextMessage returns the next message struct of this Receive, to be
// assigned whole. When the structs of the last Receive run out, the
// member moves to a larger array, which the next Receive reuses; the
// messages already handed out stay where they are.
func (s *jsSub) nextMessage() *backend.Message {
	if s.handed == len(s.msgs) {
		s.msgs = make([]backend.Message, max(2*len(s.msgs), deliveryChunk))
		s.handed = 0
	}
	m := &s.msgs[s.handed]
	s.handed++
	return m
}

func (s *jsSub) ackID(id backend.AckID) (*jsAckID, error) {
	a, ok := id.(*jsAckID)
	if !ok || a == nil {
		return nil, fmt.Errorf("nats: ack id of type %T is not from this backend", id)
	}
	return a, nil
}

// live returns the delivery of id, or an error wrapping ErrStale when its
// lease has ended.
func (s *jsSub) live(op string, id backend.AckID) (*jsAckID, error) {
	a, err := s.ackID(id)
	if err != nil {
		return nil, err
	}
	if a.stale() {
		return nil, fmt.Errorf("nats: %s %q: %w: the lease of the delivery ended", op, s.topic, backend.ErrStale)
	}
	return a, nil
}

func (s *jsSub) send(op string, id backend.AckID, body []byte) error {
	a, err := s.ackID(id)
	if err != nil {
		return err
	}
	if err := s.b.nc.Publish(a.reply, body); err != nil {
		if errors.Is(err, natsgo.ErrConnectionClosed) {
			err = fmt.Errorf("%w: %w", backend.ErrClosed, err)
		}
		return fmt.Errorf("nats: %s %q: %w", op, s.topic, err)
	}
	return nil
}

// Ack implements backend.Subscription. Acks are fire-and-forget: a lost
// ack means a redelivery, never a loss.
func (s *jsSub) Ack(ctx context.Context, ids []backend.AckID) error {
	var errs []error
	for _, id := range ids {
		if err := s.send("ack", id, ackBody); err != nil {
			errs = append(errs, err)
		}
	}
	s.forgetReleases(ctx, ids)
	return errors.Join(errs...)
}

// Nack implements backend.Subscription with a server-side delay.
func (s *jsSub) Nack(ctx context.Context, id backend.AckID, delay time.Duration) error {
	if _, err := s.live("nack", id); err != nil {
		return err
	}
	if delay <= 0 {
		return s.send("nack", id, nakBody)
	}
	return s.send("nack", id, fmt.Appendf(nil, `-NAK {"delay": %d}`, delay.Nanoseconds()))
}

// Extend implements backend.Extender: the server restarts the AckWait of
// the delivery.
func (s *jsSub) Extend(ctx context.Context, id backend.AckID) error {
	a, err := s.live("extend", id)
	if err != nil {
		return err
	}
	if err := s.send("extend", id, progressBody); err != nil {
		return err
	}
	a.renew(s.cfg.AckTimeout)
	return nil
}

// DeadLetter implements backend.DeadLetterer: the copy is stored in the
// dead-letter topic's stream (deduplicated by its ID, so a retry after a
// crash adds no second copy within the duplicates window), then the
// original is terminated so the server never delivers it again.
func (s *jsSub) DeadLetter(ctx context.Context, id backend.AckID, topic string, msg *backend.Message) error {
	if _, err := s.live("dead-letter", id); err != nil {
		return err
	}
	tn, err := s.b.ensureStream(ctx, topic)
	if err != nil {
		return fmt.Errorf("nats: dead-letter to %q: %w", topic, err)
	}
	nm, err := encode(tn.subject, msg, false, tn.idScope)
	if err != nil {
		return fmt.Errorf("nats: dead-letter to %q: %w", topic, err)
	}
	if _, err := s.b.js.PublishMsg(ctx, nm); err != nil {
		return fmt.Errorf("nats: dead-letter to %q: %w", topic, err)
	}
	if err := s.send("terminate", id, termBody); err != nil {
		return err
	}
	s.forgetReleases(ctx, []backend.AckID{id})
	return nil
}

// Close implements backend.Subscription. Unsettled deliveries are
// redelivered by the server after their AckWait. The last subscription of
// the Backend on the topic stops the topic's promoter (promote.go). When
// the member may leave deliveries behind (leavesBehind), the Backend's
// UnlockGroup of the group then lets its lock lapse rather than release
// it: the next member takes it over and waits for them (see
// backend.GroupLocker).
func (s *jsSub) Close() error {
	s.subMu.Lock()
	defer s.subMu.Unlock()
	if !s.isClosed() {
		s.b.stopPromoter(s.topic)
		if s.leavesBehind() {
			s.b.leaveBehind(s.topic, s.cfg.Group)
		}
	}
	return s.b.closeSub(s, &s.closeOnce, s.closed, s.in.sub, s.topic)
}

// leavesBehind reports whether closing the member may leave deliveries
// that no Receive returned pending at the server until their AckWait: a
// pull request is open (its messages are coming; a Receive with an
// ended ctx would have collected or abandoned it), one it gave up on
// may still be answered (unsure), the inbox holds messages no Receive
// took, or a Receive still runs. The caller holds subMu.
func (s *jsSub) leavesBehind() bool {
	if !s.recvMu.TryLock() {
		return true
	}
	defer s.recvMu.Unlock()
	return s.unsure || len(s.open) > 0 || len(s.in.ch) > 0
}

// inboxSub is a subscription to a member's inbox subjects with a channel of
// its own, sized for the member's pulls (inboxRoom): a subscription of
// the client library's own (SubscribeSync) has a channel of 65,536
// messages, which the garbage collector scans whole in every cycle.
type inboxSub struct {
	nc  *natsgo.Conn
	sub *natsgo.Subscription
	ch  chan *natsgo.Msg
	// gone is closed once the subscription has ended (unsubscribed,
	// drained, or its connection closed): the client library then
	// sends nothing more to ch.
	gone chan struct{}
}

// inboxRoom returns the room of a member's inbox for at most maxInFlight
// deliveries at once, and the most messages one pull asks for: the
// inbox holds the deliveries of sixteen such pulls, left by requests
// the member gave up on (their messages come later) next to the current
// one. The client library drops what does not fit (the server then
// delivers it again after its AckWait).
func inboxRoom(maxInFlight int) (room, batch int) {
	room = min(max(16*maxInFlight, 4096), 65536)
	return room, room / 16
}

func subscribeInbox(nc *natsgo.Conn, subject string, room int) (*inboxSub, error) {
	in := &inboxSub{nc: nc, ch: make(chan *natsgo.Msg, room), gone: make(chan struct{})}
	sub, err := nc.ChanSubscribe(subject, in.ch)
	if err != nil {
		return nil, err
	}
	var once sync.Once
	sub.SetClosedHandler(func(string) { once.Do(func() { close(in.gone) }) })
	if !sub.IsValid() {
		// Ended before the handler was set.
		once.Do(func() { close(in.gone) })
	}
	in.sub = sub
	return in, nil
}

// poll returns a message already in the inbox, if there is one.
func (in *inboxSub) poll() (*natsgo.Msg, bool) {
	select {
	case msg := <-in.ch:
		return msg, true
	default:
		return nil, false
	}
}

// next waits for the next message, until ctx ends or the subscription
// has ended and its messages were taken: the errors are those of the
// client library's NextMsgWithContext.
func (in *inboxSub) next(ctx context.Context) (*natsgo.Msg, error) {
	if msg, ok := in.poll(); ok {
		return msg, nil
	}
	select {
	case msg := <-in.ch:
		return msg, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-in.gone:
		if msg, ok := in.poll(); ok {
			return msg, nil
		}
		if in.nc.IsClosed() {
			return nil, natsgo.ErrConnectionClosed
		}
		return nil, natsgo.ErrBadSubscription
	}
}
