package main

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/internal/lifecycle"
)

//go:embed ui
var uiFiles embed.FS

// uiHistory is how many samples the dashboard keeps for its chart.
const uiHistory = 300

// maxPreview caps the payload preview the dashboard shows.
const maxPreview = 2048

func uiCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bus ui", flag.ContinueOnError)
	fs.SetOutput(stderr)
	rawURL := fs.String("url", defaultURL(), "backend URL (default $BUS_URL, else mem://)")
	listen := fs.String("listen", "127.0.0.1:8080", "address to serve the dashboard on (loopback by default; any other address needs --auth)")
	allowWrites := fs.Bool("allow-writes", false, "enable the replay, purge and release buttons")
	auth := fs.String("auth", "", "user:password for HTTP basic authentication on every page and call (required to listen beyond loopback)")
	interval := fs.Duration("interval", 2*time.Second, "how often the dashboard samples the backend")
	outboxDB := fs.String("db", "", "also show the transactional outbox in this PostgreSQL database")
	events := fs.String("events", defaultEventsTopic, "the lifecycle events topic (bus.WithEvents) that the message history reads")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: bus ui [--url U] [--listen 127.0.0.1:8080] [--allow-writes] [--auth user:pass]\n\nServes a live dashboard: topics, groups with lag and in flight, a chart of\nlag and rates, a dead-letter browser with the held keys\n(bus.KeyHold), and the history of a message (by ID or\nkey, from the lifecycle events topic). Writes (replay, purge, release) need\n--allow-writes, and only the dashboard's own page can make them: they\ncarry a per-process token and are refused from other origins and hosts.\nEvery replay, purge and release is logged on stderr.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if fs.NArg() > 0 || *interval <= 0 {
		fmt.Fprintln(stderr, "bus ui: takes no arguments, and --interval must be > 0")
		return exitUsage
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintf(stderr, "bus ui: %v\n", err)
		return exitFailure
	}
	defer ln.Close()
	if !isLoopback(ln.Addr()) && *auth == "" {
		fmt.Fprintf(stderr, "bus ui: listening on %s reaches beyond this machine; give --auth user:password\n", ln.Addr())
		return exitUsage
	}
	if err := bus.ValidateTopic(*events); err != nil {
		fmt.Fprintf(stderr, "bus ui: --events: %v\n", err)
		return exitUsage
	}
	b, err := openUIBus(ctx, fs, *rawURL, *events, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "bus ui: %v\n", err)
		return exitFailure
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		_ = b.Close(cctx)
	}()
	in, closeIn, err := openInspector(ctx, *rawURL)
	if err != nil {
		fmt.Fprintf(stderr, "bus ui: %v\n", err)
		return exitFailure
	}
	defer closeIn()
	cfg := uiConfig{allowWrites: *allowWrites, interval: *interval, auth: *auth, log: slog.New(slog.NewTextHandler(stderr, nil)),
		inspector: in, events: *events, outboxDB: *outboxDB}
	fmt.Fprintf(stdout, "bus ui: serving http://%s (writes %s)\n", ln.Addr(), map[bool]string{true: "enabled", false: "disabled"}[*allowWrites])
	if err := serveUI(ctx, ln, b, cfg); err != nil {
		fmt.Fprintf(stderr, "bus ui: %v\n", err)
		return exitFailure
	}
	return exitOK
}

// openUIBus opens the dashboard's bus. Its replays write their replayed
// events to the events topic when --events names it or it is there
// already (see eventsToWrite).
func openUIBus(ctx context.Context, fs *flag.FlagSet, rawURL, events string, stderr io.Writer) (*bus.Bus, error) {
	given := ""
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "events" {
			given = events
		}
	})
	write, err := eventsToWrite(ctx, rawURL, given, 10*time.Second)
	if err != nil {
		return nil, err
	}
	if write == "" {
		fmt.Fprintf(stderr, "bus ui: there is no events topic %s: replays write no replayed event (--events names one)\n", events)
		return bus.Open(ctx, rawURL)
	}
	return bus.Open(ctx, rawURL, bus.WithEvents(write))
}

// uiConfig is how the dashboard serves.
type uiConfig struct {
	allowWrites bool
	interval    time.Duration
	auth        string       // "user:pass", or "" for none
	log         *slog.Logger // replays and purges are logged here
	outboxDB    string       // the outbox's PostgreSQL URL, or "" for no outbox panel
	// inspector reads the events and dead-letter topics for the message
	// history, and events names the events topic; without an inspector
	// the history is unavailable.
	inspector backend.Inspector
	events    string
}

// serveUI serves the dashboard on ln until ctx ends.
func serveUI(ctx context.Context, ln net.Listener, b *bus.Bus, cfg uiConfig) error {
	g, err := newGuard(ln.Addr(), cfg.auth)
	if err != nil {
		return err
	}
	if cfg.log == nil {
		cfg.log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	u := &uiServer{b: b, allowWrites: cfg.allowWrites, guard: g, log: cfg.log, inspector: cfg.inspector, events: cfg.events, outboxDB: cfg.outboxDB}
	srv := &http.Server{Handler: u.routes(), ReadHeaderTimeout: 10 * time.Second}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		u.sample(ctx, cfg.interval)
	}()
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case <-ctx.Done():
	case err := <-errc:
		wg.Wait()
		return err
	}
	// Polling browsers keep connections open: give requests in progress a
	// moment, then close what is left.
	sctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		_ = srv.Close()
	}
	<-errc
	wg.Wait()
	return nil
}

type uiServer struct {
	b           *bus.Bus
	allowWrites bool
	guard       *guard
	log         *slog.Logger
	outboxDB    string
	inspector   backend.Inspector  // for the message history; nil: none
	events      string             // the events topic
	scaling     *lifecycle.Scaling // the members' bounds; the sampler's own

	mu      sync.Mutex
	last    *snapshot
	history []uiSample
	lastErr string
	dlqs    []string // the topics that hold dead letters, by their headers
}

// uiSample is one point of the chart.
type uiSample struct {
	At      time.Time `json:"at"`
	Lag     int64     `json:"lag"`     // known lags added up
	Pending int64     `json:"pending"` // known in-flight counts added up
	Rate    float64   `json:"rate"`    // publish rate, all topics
}

func (u *uiServer) sample(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		sctx, cancel := context.WithTimeout(ctx, interval+5*time.Second)
		snap, err := takeSnapshot(sctx, u.b)
		var dlqs []string
		if err == nil {
			dlqs, err = deadLetterTopicNames(sctx, u.b)
		}
		if err == nil {
			err = u.addBounds(sctx, snap)
		}
		cancel()
		u.mu.Lock()
		if err != nil {
			u.lastErr = err.Error()
		} else {
			snap.withRates(u.last)
			u.last, u.lastErr, u.dlqs = snap, "", dlqs
			s := uiSample{At: snap.At}
			for _, tp := range snap.Topics {
				if tp.PublishRate != nil {
					s.Rate += *tp.PublishRate
				}
				for _, g := range tp.Groups {
					if g.Lag.Known() {
						s.Lag += int64(g.Lag)
					}
					if g.Pending.Known() {
						s.Pending += int64(g.Pending)
					}
				}
			}
			u.history = append(u.history, s)
			if len(u.history) > uiHistory {
				u.history = u.history[len(u.history)-uiHistory:]
			}
		}
		u.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (u *uiServer) routes() http.Handler {
	mux := http.NewServeMux()
	static, _ := fs.Sub(uiFiles, "ui")
	mux.Handle("GET /", http.FileServerFS(static))
	mux.HandleFunc("GET /api/state", u.state)
	mux.HandleFunc("GET /api/dlq", u.dlq)
	mux.HandleFunc("GET /api/history", u.timeline)
	mux.HandleFunc("POST /api/dlq/{op}", u.dlqWrite)
	mux.HandleFunc("GET /api/keys", u.heldKeys)
	mux.HandleFunc("POST /api/keys/release", u.releaseKey)
	mux.HandleFunc("GET /api/outbox", u.outbox)
	return u.guard.wrap(mux)
}

// deadLetterTopicNames names the topics that hold dead letters.
func deadLetterTopicNames(ctx context.Context, b *bus.Bus) ([]string, error) {
	ts, err := b.Topics(ctx)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, t := range ts {
		if t.DeadLetters {
			names = append(names, t.Name)
		}
	}
	return names, nil
}

func writeAPI(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func (u *uiServer) state(w http.ResponseWriter, r *http.Request) {
	u.mu.Lock()
	defer u.mu.Unlock()
	st := map[string]any{
		"backend": u.b.Capabilities().Name, "allow_writes": u.allowWrites,
		"snapshot": u.last, "history": u.history, "error": u.lastErr,
		"dead_letter_topics": u.dlqs,
	}
	if u.allowWrites {
		st["token"] = u.guard.token // readable by this origin only
	}
	writeAPI(w, http.StatusOK, st)
}

// uiDeadLetter is a dead letter as the dashboard shows it: the payload is
// a capped preview, as text when it is valid UTF-8 (the page inserts it as
// text, never as HTML) and as base64 otherwise.
type uiDeadLetter struct {
	deadLetterJSON
	Truncated bool `json:"truncated"`
}

func (u *uiServer) dlq(w http.ResponseWriter, r *http.Request) {
	topic := r.URL.Query().Get("topic")
	if err := bus.ValidateTopic(topic); err != nil {
		writeAPI(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	offset, limit, why := dlqPage(r.URL.Query())
	if why != "" {
		writeAPI(w, http.StatusBadRequest, map[string]string{"error": why})
		return
	}
	// One more than the page says whether a next page exists.
	dls, err := u.b.DeadLetters(r.Context(), topic, offset+limit+1)
	if err != nil {
		writeAPI(w, http.StatusBadGateway, map[string]string{"error": err.Error()})
		return
	}
	more := len(dls) > offset+limit
	dls = dls[min(offset, len(dls)):min(offset+limit, len(dls))]
	out := make([]uiDeadLetter, 0, len(dls))
	for _, d := range dls {
		p, truncated := d.Payload, false
		if len(p) > maxPreview {
			p, truncated = p[:maxPreview], true
			for len(p) > 0 && !utf8.Valid(p) && utf8.Valid(d.Payload) {
				p = p[:len(p)-1] // keep a valid UTF-8 prefix
			}
		}
		text, enc := encodePayload(p)
		out = append(out, uiDeadLetter{deadLetterJSON: deadLetterJSON{
			ID: d.ID, Key: d.Key, Headers: d.Headers, Payload: text, Encoding: enc,
			Reason: d.Reason, Code: string(d.Code), Topic: d.Topic, Group: d.Group, Attempt: d.Attempt, Time: d.Time,
		}, Truncated: truncated})
	}
	writeAPI(w, http.StatusOK, uiDeadLetterPage{Items: out, Offset: offset, Limit: limit, More: more})
}

// The dead-letter list's pages: dlqPageSize rows by default, at most
// dlqMaxPage; a page reads the dead letters before it too, so the offset
// is bounded by dlqMaxOffset.
const (
	dlqPageSize  = 50
	dlqMaxPage   = 500
	dlqMaxOffset = 100_000
)

// uiDeadLetterPage is one page of the dead-letter list, oldest first:
// Items from Offset, at most Limit of them; More says a next page has
// some.
type uiDeadLetterPage struct {
	Items  []uiDeadLetter `json:"items"`
	Offset int            `json:"offset"`
	Limit  int            `json:"limit"`
	More   bool           `json:"more"`
}

// dlqPage reads the offset and limit of a dead-letter page request, or
// says what is wrong with them.
func dlqPage(q url.Values) (offset, limit int, why string) {
	offset, limit = 0, dlqPageSize
	if s := q.Get("offset"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 || n > dlqMaxOffset {
			return 0, 0, fmt.Sprintf("offset %q: want 0..%d", s, dlqMaxOffset)
		}
		offset = n
	}
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > dlqMaxPage {
			return 0, 0, fmt.Sprintf("limit %q: want 1..%d", s, dlqMaxPage)
		}
		limit = n
	}
	return offset, limit, ""
}

// historyTimeout bounds the scan of one history request.
const historyTimeout = 10 * time.Second

// timeline returns the history of the messages whose ID or key is q.
func (u *uiServer) timeline(w http.ResponseWriter, r *http.Request) {
	q := strings.TrimSpace(r.URL.Query().Get("q"))
	if q == "" || len(q) > bus.MaxTopicLen*4 {
		writeAPI(w, http.StatusBadRequest, map[string]string{"error": "give a message ID or key"})
		return
	}
	if u.inspector == nil {
		writeAPI(w, http.StatusNotImplemented, map[string]string{"error": "the message history needs a backend that can be inspected"})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), historyTimeout)
	defer cancel()
	h, err := lifecycle.Read(ctx, u.inspector, u.events, lifecycle.Query{ID: q, Key: q})
	if err != nil {
		writeAPI(w, http.StatusBadGateway, map[string]string{"error": err.Error()})
		return
	}
	if h.Entries == nil {
		h.Entries = []lifecycle.Entry{}
	}
	writeAPI(w, http.StatusOK, map[string]any{"events": u.events, "history": h})
}

// dlqWriteRequest is the body of a replay or purge.
type dlqWriteRequest struct {
	Topic string   `json:"topic"`
	IDs   []string `json:"ids"`
	All   bool     `json:"all"`
	// Confirm must repeat Topic when All is set: a replay or purge of a
	// whole topic is confirmed by the request, not only by the page.
	Confirm string `json:"confirm"`
}

func (u *uiServer) dlqWrite(w http.ResponseWriter, r *http.Request) {
	if !u.allowWrites {
		writeAPI(w, http.StatusForbidden, map[string]string{"error": "writes are disabled; start bus ui with --allow-writes"})
		return
	}
	if why := u.guard.writeAllowed(r); why != "" {
		u.log.Warn("bus ui: write refused", "op", r.PathValue("op"), "remote", r.RemoteAddr, "why", why)
		writeAPI(w, http.StatusForbidden, map[string]string{"error": why})
		return
	}
	var req dlqWriteRequest
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&req); err != nil {
		writeAPI(w, http.StatusBadRequest, map[string]string{"error": "bad request body"})
		return
	}
	if why := req.check(); why != "" {
		writeAPI(w, http.StatusBadRequest, map[string]string{"error": why})
		return
	}
	op := r.PathValue("op")
	var n int
	var err error
	switch op {
	case "replay":
		n, err = u.b.ReplayDeadLetters(r.Context(), req.Topic, req.IDs...)
	case "purge":
		n, err = u.b.PurgeDeadLetters(r.Context(), req.Topic, req.IDs...)
	default:
		writeAPI(w, http.StatusNotFound, map[string]string{"error": "unknown operation"})
		return
	}
	u.log.Info("bus ui: "+op, "topic", req.Topic, "ids", strings.Join(req.IDs, ","), "all", req.All, "done", n, "remote", r.RemoteAddr, "error", errText(err))
	if err != nil {
		writeAPI(w, http.StatusBadGateway, map[string]any{"done": n, "error": err.Error()})
		return
	}
	writeAPI(w, http.StatusOK, map[string]any{"done": n})
}

// check says what is wrong with a write request, or "".
func (req *dlqWriteRequest) check() string {
	switch {
	case bus.ValidateTopic(req.Topic) != nil:
		return "give a valid dead-letter topic"
	case req.All == (len(req.IDs) > 0):
		return "give either all or ids"
	case req.All && req.Confirm != req.Topic:
		return "a replay or purge of all needs confirm set to the topic"
	}
	return ""
}

// errText is err's text, or "" for nil.
func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// heldKeys lists the keys held by the subscriptions whose dead-letter
// topic is the query's topic (bus.KeyHold).
func (u *uiServer) heldKeys(w http.ResponseWriter, r *http.Request) {
	topic := r.URL.Query().Get("topic")
	if err := bus.ValidateTopic(topic); err != nil {
		writeAPI(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	keys, err := u.b.HeldKeys(r.Context(), topic)
	if err != nil {
		writeAPI(w, http.StatusBadGateway, map[string]string{"error": err.Error()})
		return
	}
	out := make([]heldKeyJSON, len(keys))
	for i, k := range keys {
		out[i] = heldKeyJSON{Topic: k.Topic, Group: k.Group, Key: k.Key, Head: k.Head, Parked: k.Parked, Since: k.Since}
	}
	writeAPI(w, http.StatusOK, out)
}

// releaseRequest is the body of a key release: the dead-letter topic
// (DLQ) and the held key.
type releaseRequest struct {
	DLQ   string `json:"dlq"`
	Topic string `json:"topic"`
	Group string `json:"group"`
	Key   string `json:"key"`
}

// releaseKey releases a held key (bus.Bus.ReleaseKey), as a write.
func (u *uiServer) releaseKey(w http.ResponseWriter, r *http.Request) {
	if !u.allowWrites {
		writeAPI(w, http.StatusForbidden, map[string]string{"error": "writes are disabled; start bus ui with --allow-writes"})
		return
	}
	if why := u.guard.writeAllowed(r); why != "" {
		u.log.Warn("bus ui: write refused", "op", "release", "remote", r.RemoteAddr, "why", why)
		writeAPI(w, http.StatusForbidden, map[string]string{"error": why})
		return
	}
	var req releaseRequest
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&req); err != nil {
		writeAPI(w, http.StatusBadRequest, map[string]string{"error": "bad request body"})
		return
	}
	n, err := u.b.ReleaseKey(r.Context(), req.DLQ, req.Topic, req.Group, req.Key)
	u.log.Info("bus ui: release", "dlq", req.DLQ, "topic", req.Topic, "group", req.Group, "key", req.Key, "done", n, "remote", r.RemoteAddr, "error", errText(err))
	switch {
	case errors.Is(err, bus.ErrInvalidOption), errors.Is(err, bus.ErrInvalidTopic):
		writeAPI(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
	case errors.Is(err, bus.ErrNotFound):
		writeAPI(w, http.StatusNotFound, map[string]string{"error": err.Error()})
	case err != nil:
		writeAPI(w, http.StatusBadGateway, map[string]any{"done": n, "error": err.Error()})
	default:
		writeAPI(w, http.StatusOK, map[string]any{"done": n})
	}
}
