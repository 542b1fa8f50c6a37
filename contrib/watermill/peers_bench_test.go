package watermill

// BenchmarkPeers puts the bus beside the raw client and Watermill's
// Pub/Sub of the same backend, in one run:
//
//	go test -run '^$' -bench 'BenchmarkPeers/redis' -benchtime 3x ./contrib/watermill/
//
// Each iteration is a round: the raw client loop (internal/rawclient),
// the bus (its own API, peersInFlight in flight, AckOnSuccess) and
// Watermill's Pub/Sub (its publisher, and its subscriber's channel read
// by one goroutine that acks each message) each publish -peers.n
// messages (10,000 by default) of peersSize bytes, peersBatch to a call
// from one goroutine, to a new topic while their consumer takes and acks
// them. The rounds rotate
// which side goes first, so load from elsewhere on the machine hits all
// three alike. A side's msgs/s counts from its first publish to the last
// message's first delivery; latency runs from the Publish call of a
// message's batch to its first delivery. The benchmark reports each
// side's median msgs/s, p50 and p99, the medians of the rounds' bus/raw
// and watermill/raw ratios and the messages lost and delivered twice
// (which fail it), and logs them as a table.
//
// The sub-benchmarks (mem, redis, nats, postgres, amqp, kafka) start a
// private server each; -peers.url runs only the sub-benchmark of that
// URL's scheme, against that server (every topic a round makes is new and
// deleted after it).

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/internal/median"
	"github.com/eventbus-go/bus/internal/rawclient"
)

var (
	peersURL = flag.String("peers.url", "", "BenchmarkPeers: the server to run against, instead of a private one (its scheme picks the sub-benchmark)")
	peersN   = flag.Int("peers.n", 10000, "BenchmarkPeers: messages per side and round")
)

const (
	peersSize     = 256
	peersBatch    = 16
	peersInFlight = 256
	peersGroup    = "peers"
	// peersWait bounds how long a pass waits for its last message.
	peersWait = 2 * time.Minute
)

// peerSide is one client of a backend: the raw client, the bus or
// Watermill's Pub/Sub. Its close is registered with the test's Cleanup
// by whoever opens it.
type peerSide interface {
	// pass makes a new topic (stream, table, queue) for one pass and
	// starts consuming it, passing every payload to h, which may run on
	// several goroutines at once and must not keep the slice.
	pass(ctx context.Context, h func([]byte)) (peerPass, error)
}

// peerPass is one side's topic during one pass.
type peerPass interface {
	publish(ctx context.Context, payloads [][]byte) error
	// ended is closed when the consumer ends on its own, on a failure.
	ended() <-chan struct{}
	// close stops the consumer, waits for it and deletes what the pass
	// made; it returns the consumer's failure, if any.
	close(ctx context.Context) error
}

// peerSides are a backend's three clients, in the order of the report.
type peerSides struct {
	raw, bus, watermill peerSide
	// names of the raw client and of Watermill's Pub/Sub
	rawName, watermillName string
}

// peerBackend is one sub-benchmark of BenchmarkPeers.
type peerBackend struct {
	name    string
	schemes []string
	// start starts a private server and returns its URL.
	start func(tb testing.TB) string
	open  func(tb testing.TB, url string) peerSides
}

var peerBackends = []peerBackend{
	{"mem", []string{"mem"}, func(testing.TB) string { return "mem://" }, openMemPeers},
	{"redis", []string{"redis", "rediss"}, startRedisPeer, openRedisPeers},
	{"nats", []string{"nats", "tls", "nats+tls"}, startNATSPeer, openNATSPeers},
	{"postgres", []string{"postgres", "postgresql"}, startPGPeer, openPGPeers},
	{"amqp", []string{"amqp", "amqps"}, startAMQPPeer, openAMQPPeers},
	{"kafka", []string{"kafka"}, startKafkaPeer, openKafkaPeers},
}

func BenchmarkPeers(b *testing.B) {
	for _, be := range peerBackends {
		b.Run(be.name, func(b *testing.B) {
			u := peerURL(b, be)
			sides := be.open(b, u)
			var rounds []peerRound
			for b.Loop() {
				r, err := runRound(sides, len(rounds), *peersN)
				if err != nil {
					b.Fatal(err)
				}
				rounds = append(rounds, r)
			}
			s := summarize(rounds)
			s.report(b)
			b.Log(s.table(be.name, sides, len(rounds), *peersN))
			if s.lost > 0 || s.dups > 0 {
				b.Errorf("lost %d, duplicates %d", s.lost, s.dups)
			}
		})
	}
}

// peerURL is -peers.url when its scheme is the backend's, otherwise a
// private server's URL; it skips the backend when -peers.url names
// another.
func peerURL(tb testing.TB, be peerBackend) string {
	if *peersURL == "" {
		return be.start(tb)
	}
	u, err := url.Parse(*peersURL)
	if err != nil {
		tb.Fatalf("-peers.url: %v", err)
	}
	if !slices.Contains(be.schemes, u.Scheme) {
		tb.Skipf("-peers.url is a %s:// URL", u.Scheme)
	}
	return *peersURL
}

// peerResult is one pass of one side.
type peerResult struct {
	msgsPerSec float64
	p50, p99   time.Duration
	lost, dups int64
}

// peerRound is one round: the raw client, the bus and Watermill.
type peerRound [3]peerResult

// peerSideNames name the sides of a peerRound.
var peerSideNames = [3]string{"raw", "bus", "watermill"}

// runRound runs a pass of each side, starting with side i%3.
func runRound(s peerSides, i, n int) (peerRound, error) {
	sides := []peerSide{s.raw, s.bus, s.watermill}
	var r peerRound
	for k := range 3 {
		j := (i + k) % 3
		res, err := runPass(sides[j], n)
		if err != nil {
			return r, fmt.Errorf("%s, round %d: %w", peerSideNames[j], i+1, err)
		}
		r[j] = res
	}
	return r, nil
}

// runPass publishes n messages through side and counts what its consumer
// receives, until every message arrived once or peersWait passed.
func runPass(side peerSide, n int) (peerResult, error) {
	ctx, cancel := context.WithTimeout(context.Background(), peersWait+time.Minute)
	defer cancel()
	t := newTally(n)
	p, err := side.pass(ctx, t.handle)
	if err != nil {
		return peerResult{}, err
	}
	t.first = time.Since(t.epoch)
	perr := publishAll(ctx, p, t.epoch, n)
	var ended error
	if perr == nil {
		select {
		case <-t.all:
		case <-p.ended():
			ended = errors.New("the consumer ended")
		case <-time.After(peersWait):
		}
	}
	cerr := p.close(ctx)
	if err := errors.Join(perr, ended, cerr); err != nil {
		return peerResult{}, err
	}
	return t.result(), nil
}

// publishAll publishes n messages in batches of peersBatch. Each payload
// carries its sequence number and the time of its batch's Publish call
// since epoch; every message has a payload of its own, which Watermill's
// messages keep.
func publishAll(ctx context.Context, p peerPass, epoch time.Time, n int) error {
	for seq := 0; seq < n; {
		batch := make([][]byte, min(peersBatch, n-seq))
		sent := uint64(time.Since(epoch))
		for i := range batch {
			pl := make([]byte, peersSize)
			binary.LittleEndian.PutUint64(pl, uint64(seq))
			binary.LittleEndian.PutUint64(pl[8:], sent)
			batch[i] = pl
			seq++
		}
		if err := p.publish(ctx, batch); err != nil {
			return fmt.Errorf("publish: %w", err)
		}
	}
	return nil
}

// tally counts one pass's deliveries by sequence number. Its handle may
// run on several goroutines at once.
type tally struct {
	epoch    time.Time     // set before the consumer starts
	first    time.Duration // since epoch, the first Publish call
	seen     []atomic.Uint32
	lat      []time.Duration // of each message's first delivery
	distinct atomic.Int64
	dups     atomic.Int64
	foreign  atomic.Int64 // payloads of no message of the pass
	end      atomic.Int64 // since epoch, when the last message arrived
	all      chan struct{}
}

func newTally(n int) *tally {
	return &tally{epoch: time.Now(), seen: make([]atomic.Uint32, n), lat: make([]time.Duration, n), all: make(chan struct{})}
}

func (t *tally) handle(p []byte) {
	now := time.Since(t.epoch)
	if len(p) < 16 {
		t.foreign.Add(1)
		return
	}
	seq := binary.LittleEndian.Uint64(p)
	if seq >= uint64(len(t.seen)) {
		t.foreign.Add(1)
		return
	}
	if t.seen[seq].Add(1) > 1 {
		t.dups.Add(1)
		return
	}
	t.lat[seq] = now - time.Duration(binary.LittleEndian.Uint64(p[8:]))
	if t.distinct.Add(1) == int64(len(t.seen)) {
		t.end.Store(int64(now))
		close(t.all)
	}
}

// result is read once the consumer stopped.
func (t *tally) result() peerResult {
	n := len(t.seen)
	r := peerResult{lost: int64(n) - t.distinct.Load(), dups: t.dups.Load() + t.foreign.Load()}
	if end := time.Duration(t.end.Load()); end > t.first {
		r.msgsPerSec = float64(n) / (end - t.first).Seconds()
	}
	lat := make([]time.Duration, 0, n)
	for i := range t.seen {
		if t.seen[i].Load() > 0 {
			lat = append(lat, t.lat[i])
		}
	}
	if len(lat) > 0 {
		slices.Sort(lat)
		r.p50, r.p99 = lat[len(lat)/2], lat[len(lat)*99/100]
	}
	return r
}

// peerSummary folds the rounds: medians of each side's figures and of
// the rounds' ratios, and the deliveries lost and repeated over all.
type peerSummary struct {
	sides                  [3]peerResult
	busRatio, wmRatio      float64
	lost, dups             int64
	lostBySide, dupsBySide [3]int64
}

func summarize(rounds []peerRound) peerSummary {
	var s peerSummary
	for j := range 3 {
		s.sides[j] = peerResult{
			msgsPerSec: median.Of(rounds, func(r peerRound) float64 { return r[j].msgsPerSec }),
			p50:        time.Duration(median.Of(rounds, func(r peerRound) float64 { return float64(r[j].p50) })),
			p99:        time.Duration(median.Of(rounds, func(r peerRound) float64 { return float64(r[j].p99) })),
		}
		for _, r := range rounds {
			s.lostBySide[j] += r[j].lost
			s.dupsBySide[j] += r[j].dups
		}
		s.lost += s.lostBySide[j]
		s.dups += s.dupsBySide[j]
	}
	ratio := func(j int) func(peerRound) float64 {
		return func(r peerRound) float64 {
			if r[0].msgsPerSec == 0 {
				return 0
			}
			return r[j].msgsPerSec / r[0].msgsPerSec
		}
	}
	s.busRatio, s.wmRatio = median.Of(rounds, ratio(1)), median.Of(rounds, ratio(2))
	return s
}

func (s peerSummary) report(b *testing.B) {
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	for j, name := range peerSideNames {
		b.ReportMetric(s.sides[j].msgsPerSec, name+"-msgs/s")
		b.ReportMetric(ms(s.sides[j].p50), name+"-p50-ms")
		b.ReportMetric(ms(s.sides[j].p99), name+"-p99-ms")
	}
	b.ReportMetric(s.busRatio, "bus/raw")
	b.ReportMetric(s.wmRatio, "watermill/raw")
	b.ReportMetric(float64(s.lost), "lost")
	b.ReportMetric(float64(s.dups), "dups")
}

// table lays the summary out for the benchmark's log.
func (s peerSummary) table(backend string, sides peerSides, rounds, n int) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "%s, rounds: %d, messages of %d bytes a side and round: %d; medians over the rounds\n", backend, rounds, peersSize, n)
	w := tabwriter.NewWriter(&sb, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "side\tclient\tmsgs/s\tp50\tp99\tagainst raw\tlost\tdups\t")
	names := [3]string{sides.rawName, "bus", sides.watermillName}
	ratios := [3]float64{1, s.busRatio, s.wmRatio}
	for j, side := range peerSideNames {
		r := s.sides[j]
		fmt.Fprintf(w, "%s\t%s\t%.0f\t%s\t%s\t%.2f\t%d\t%d\t\n", side, names[j], r.msgsPerSec,
			short(r.p50), short(r.p99), ratios[j], s.lostBySide[j], s.dupsBySide[j])
	}
	_ = w.Flush()
	return sb.String()
}

// short writes d with three figures or fewer: 870µs, 13.1ms, 1.01s.
func short(d time.Duration) string {
	switch {
	case d >= time.Second:
		return fmt.Sprintf("%.3gs", d.Seconds())
	case d >= time.Millisecond:
		return fmt.Sprintf("%.3gms", float64(d)/float64(time.Millisecond))
	default:
		return fmt.Sprintf("%dµs", d.Microseconds())
	}
}

// busSide is the bus, through its own API.
type busSide struct{ b *bus.Bus }

// openBusSide opens a bus on url, closed when tb ends.
func openBusSide(tb testing.TB, url string) *busSide {
	b, closeBus := openBenchBus(tb, url)
	tb.Cleanup(closeBus)
	return &busSide{b}
}

type busPass struct {
	b     *bus.Bus
	topic string
	sub   *bus.Subscription
}

func (s *busSide) pass(ctx context.Context, h func([]byte)) (peerPass, error) {
	topic := "peers-" + watermill.NewShortUUID()
	sub, err := s.b.Subscribe(ctx, topic, func(_ context.Context, d *bus.Delivery) error {
		h(d.Payload)
		return nil
	}, bus.WithGroup(peersGroup), bus.WithMaxInFlight(peersInFlight))
	if err != nil {
		return nil, err
	}
	return &busPass{b: s.b, topic: topic, sub: sub}, nil
}

func (p *busPass) publish(ctx context.Context, payloads [][]byte) error {
	msgs := make([]*bus.Message, len(payloads))
	for i, pl := range payloads {
		msgs[i] = &bus.Message{Payload: pl}
	}
	return p.b.Publish(ctx, p.topic, msgs...)
}

func (p *busPass) ended() <-chan struct{} { return p.sub.Done() }

func (p *busPass) close(ctx context.Context) error {
	err := p.sub.Close(ctx)
	if derr := p.b.DeleteTopic(ctx, p.topic); derr != nil && !errors.Is(derr, bus.ErrUnsupported) {
		err = cmp.Or(err, derr)
	}
	return err
}

// watermillSide is one of Watermill's Pub/Subs: its publisher, and its
// subscriber's channel read by one goroutine that acks each message.
type watermillSide struct {
	pub message.Publisher
	sub message.Subscriber
	// forget deletes what a topic left at the server; nil when there is
	// nothing to delete. It runs after the subscriber closed, which
	// waits for its readers: a reader that finds its topic gone before
	// may pause before it sees its context end.
	forget func(ctx context.Context, topic string) error
	topics []string // made by the passes
}

// newWatermillSide takes pub and sub, closed when tb ends, and then
// forgets the topics of the passes.
func newWatermillSide(tb testing.TB, pub message.Publisher, sub message.Subscriber) *watermillSide {
	s := &watermillSide{pub: pub, sub: sub}
	tb.Cleanup(func() {
		err := errors.Join(sub.Close(), pub.Close())
		if s.forget != nil {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			for _, topic := range s.topics {
				err = errors.Join(err, s.forget(ctx, topic))
			}
		}
		if err != nil {
			tb.Error(err)
		}
	})
	return s
}

type watermillPass struct {
	s      *watermillSide
	topic  string
	cancel context.CancelFunc // ends the subscription
	loop   *rawclient.Loop    // the reader
}

func (s *watermillSide) pass(_ context.Context, h func([]byte)) (peerPass, error) {
	topic := "peers_" + watermill.NewShortUUID()
	s.topics = append(s.topics, topic)
	if si, ok := s.sub.(message.SubscribeInitializer); ok {
		if err := si.SubscribeInitialize(topic); err != nil {
			return nil, err
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	msgs, err := s.sub.Subscribe(ctx, topic)
	if err != nil {
		cancel()
		return nil, err
	}
	loop := rawclient.StartLoop(func(ctx context.Context) error {
		for {
			select {
			case m, ok := <-msgs:
				if !ok {
					return errors.New("the subscriber's channel closed")
				}
				h(m.Payload)
				m.Ack()
			case <-ctx.Done():
				return nil
			}
		}
	})
	return &watermillPass{s: s, topic: topic, cancel: cancel, loop: loop}, nil
}

func (p *watermillPass) publish(_ context.Context, payloads [][]byte) error {
	msgs := make([]*message.Message, len(payloads))
	for i, pl := range payloads {
		msgs[i] = message.NewMessage(watermill.NewUUID(), pl)
	}
	return p.s.pub.Publish(p.topic, msgs...)
}

func (p *watermillPass) ended() <-chan struct{} { return p.loop.Ended() }

// close stops the reader, then the subscription: a message the reader
// left unacked is the subscriber's to give up.
func (p *watermillPass) close(ctx context.Context) error {
	err := errors.Join(p.loop.Stop(ctx), p.loop.Err())
	p.cancel()
	return err
}
