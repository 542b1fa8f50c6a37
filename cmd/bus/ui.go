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
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/eventbus-go/bus"
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
	listen := fs.String("listen", "127.0.0.1:8080", "address to serve the dashboard on (loopback by default)")
	allowWrites := fs.Bool("allow-writes", false, "enable the replay and purge buttons")
	interval := fs.Duration("interval", 2*time.Second, "how often the dashboard samples the backend")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: bus ui [--url U] [--listen 127.0.0.1:8080] [--allow-writes]\n\nServes a live dashboard: topics, groups with lag and in flight, a chart of\nlag and rates, and a dead-letter browser.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if fs.NArg() > 0 || *interval <= 0 {
		fmt.Fprintln(stderr, "bus ui: takes no arguments, and --interval must be > 0")
		return exitUsage
	}
	b, err := bus.Open(ctx, *rawURL)
	if err != nil {
		fmt.Fprintf(stderr, "bus ui: %v\n", err)
		return exitFailure
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = b.Close(cctx)
	}()
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintf(stderr, "bus ui: %v\n", err)
		return exitFailure
	}
	fmt.Fprintf(stdout, "bus ui: serving http://%s (writes %s)\n", ln.Addr(), map[bool]string{true: "enabled", false: "disabled"}[*allowWrites])
	if err := serveUI(ctx, ln, b, *allowWrites, *interval); err != nil {
		fmt.Fprintf(stderr, "bus ui: %v\n", err)
		return exitFailure
	}
	return exitOK
}

// serveUI serves the dashboard on ln until ctx ends.
func serveUI(ctx context.Context, ln net.Listener, b *bus.Bus, allowWrites bool, interval time.Duration) error {
	u := &uiServer{b: b, allowWrites: allowWrites}
	srv := &http.Server{Handler: u.routes(), ReadHeaderTimeout: 10 * time.Second}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		u.sample(ctx, interval)
	}()
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case <-ctx.Done():
	case err := <-errc:
		wg.Wait()
		return err
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := srv.Shutdown(sctx)
	<-errc
	wg.Wait()
	return err
}

type uiServer struct {
	b           *bus.Bus
	allowWrites bool

	mu      sync.Mutex
	last    *snapshot
	history []uiSample
	lastErr string
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
		cancel()
		u.mu.Lock()
		if err != nil {
			u.lastErr = err.Error()
		} else {
			snap.withRates(u.last)
			u.last, u.lastErr = snap, ""
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
	mux.HandleFunc("POST /api/dlq/{op}", u.dlqWrite)
	return mux
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
	writeAPI(w, http.StatusOK, map[string]any{
		"backend": u.b.Capabilities().Name, "allow_writes": u.allowWrites,
		"snapshot": u.last, "history": u.history, "error": u.lastErr,
	})
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
	dls, err := u.b.DeadLetters(r.Context(), topic, 500)
	if err != nil {
		writeAPI(w, http.StatusBadGateway, map[string]string{"error": err.Error()})
		return
	}
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
	writeAPI(w, http.StatusOK, out)
}

func (u *uiServer) dlqWrite(w http.ResponseWriter, r *http.Request) {
	if !u.allowWrites {
		writeAPI(w, http.StatusForbidden, map[string]string{"error": "writes are disabled; start bus ui with --allow-writes"})
		return
	}
	var req struct {
		Topic string   `json:"topic"`
		IDs   []string `json:"ids"`
		All   bool     `json:"all"`
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&req); err != nil {
		writeAPI(w, http.StatusBadRequest, map[string]string{"error": "bad request body"})
		return
	}
	if req.All == (len(req.IDs) > 0) || !strings.HasSuffix(req.Topic, ".dlq") {
		writeAPI(w, http.StatusBadRequest, map[string]string{"error": "give a .dlq topic and either all or ids"})
		return
	}
	var n int
	var err error
	switch r.PathValue("op") {
	case "replay":
		n, err = u.b.ReplayDeadLetters(r.Context(), req.Topic, req.IDs...)
	case "purge":
		n, err = u.b.PurgeDeadLetters(r.Context(), req.Topic, req.IDs...)
	default:
		writeAPI(w, http.StatusNotFound, map[string]string{"error": "unknown operation"})
		return
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		writeAPI(w, http.StatusBadGateway, map[string]any{"done": n, "error": err.Error()})
		return
	}
	writeAPI(w, http.StatusOK, map[string]any{"done": n})
}
