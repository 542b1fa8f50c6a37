package rabbitmq

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strings"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/eventbus-go/bus/backend"
)

var _ backend.Inspector = (*Backend)(nil)

// checkManagement validates the management API's base URL before any I/O.
func checkManagement(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return fmt.Errorf("%w: management %q: want the management API's base URL, e.g. http://127.0.0.1:15672", backend.ErrInvalidOption, redactURL(raw))
	}
	return nil
}

// redactURL is raw without its password.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return raw
	}
	if _, ok := u.User.Password(); ok {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	}
	return u.String()
}

// errNoManagement is the error of inspection without a management API.
var errNoManagement = fmt.Errorf("%w: inspection reads the RabbitMQ management API: set the management URL parameter (e.g. ?management=http://127.0.0.1:15672) or Options.Management", backend.ErrUnsupported)

// errNoPeek is the error of Peek and Delete.
var errNoPeek = fmt.Errorf("%w: RabbitMQ reads a queue's messages only by consuming them, which counts a delivery", backend.ErrUnsupported)

// mgmtGet reads the management API's path (under /api/, its parts
// escaped by the caller) into v. found is false for a 404.
func (b *Backend) mgmtGet(ctx context.Context, path string, v any) (found bool, err error) {
	if b.opts.Management == "" {
		return false, errNoManagement
	}
	base, _ := url.Parse(b.opts.Management) // checked by New
	user, pass := "", ""
	if base.User != nil {
		user = base.User.Username()
		pass, _ = base.User.Password()
		base.User = nil
	} else if uri, err := amqp.ParseURI(b.url); err == nil {
		user, pass = uri.Username, uri.Password
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(base.String(), "/")+"/api/"+path, nil)
	if err != nil {
		return false, err
	}
	req.SetBasicAuth(user, pass)
	resp, err := b.http.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // the URL may carry a password
		}
		return false, fmt.Errorf("management API: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
		return false, nil
	}
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return false, fmt.Errorf("management API: GET /api/%s: %s: %s", path, resp.Status, strings.TrimSpace(string(msg)))
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		return false, fmt.Errorf("management API: GET /api/%s: %w", path, err)
	}
	return true, nil
}

// vhost is the escaped virtual host of the backend's URL.
func (b *Backend) vhost() string {
	vh := "/"
	if uri, err := amqp.ParseURI(b.url); err == nil && uri.Vhost != "" {
		vh = uri.Vhost
	}
	return url.PathEscape(vh)
}

// mgmtQueue is what the management API reports of a queue.
type mgmtQueue struct {
	Name      string `json:"name"`
	Ready     *int64 `json:"messages_ready"`
	Unacked   *int64 `json:"messages_unacknowledged"`
	Bytes     *int64 `json:"message_bytes"`
	Consumers *int64 `json:"consumers"`
}

type mgmtBinding struct {
	Source          string `json:"source"`
	Destination     string `json:"destination"`
	DestinationType string `json:"destination_type"`
}

type mgmtExchange struct {
	Name  string             `json:"name"`
	Stats *mgmtExchangeStats `json:"message_stats"`
}

// mgmtExchangeStats is an exchange's message_stats. The management API
// writes an exchange without any as an empty list ([]) rather than an
// empty object: that reads as no figures.
type mgmtExchangeStats struct {
	PublishIn *int64 `json:"publish_in"`
}

func (s *mgmtExchangeStats) UnmarshalJSON(data []byte) error {
	if t := bytes.TrimSpace(data); len(t) > 0 && t[0] == '[' {
		var list []json.RawMessage
		if err := json.Unmarshal(t, &list); err != nil {
			return err
		}
		if len(list) > 0 {
			return fmt.Errorf("message_stats: a list of %d, not an object", len(list))
		}
		*s = mgmtExchangeStats{}
		return nil
	}
	type plain mgmtExchangeStats
	return json.Unmarshal(data, (*plain)(s))
}

func figure(v *int64) backend.Figure {
	if v == nil {
		return backend.Unknown
	}
	return backend.Figure(*v)
}

// Topics implements backend.Inspector through the management API: the
// topics are the backend's exchanges. A topic stores nothing of its own:
// Messages and Bytes are those of its group queue that holds the most
// (ready and unacknowledged), Published the exchange's count of
// messages published into it since the node started (unknown before
// its first publish), Scheduled unknown (a DeliverAt message waits in a
// hold queue every topic shares). The figures are the management API's,
// which it refreshes every collect_statistics_interval (5 s by default).
func (b *Backend) Topics(ctx context.Context) ([]backend.TopicInfo, error) {
	var exs []mgmtExchange
	if _, err := b.mgmtGet(ctx, "exchanges/"+b.vhost()+"?columns=name,message_stats.publish_in", &exs); err != nil {
		return nil, fmt.Errorf("rabbitmq: topics: %w", err)
	}
	var binds []mgmtBinding
	if _, err := b.mgmtGet(ctx, "bindings/"+b.vhost(), &binds); err != nil {
		return nil, fmt.Errorf("rabbitmq: topics: %w", err)
	}
	var qs []mgmtQueue
	if _, err := b.mgmtGet(ctx, "queues/"+b.vhost()+"?columns=name,messages_ready,messages_unacknowledged,message_bytes,consumers", &qs); err != nil {
		return nil, fmt.Errorf("rabbitmq: topics: %w", err)
	}
	byName := make(map[string]mgmtQueue, len(qs))
	for _, q := range qs {
		byName[q.Name] = q
	}
	pre := b.opts.Prefix + ".t."
	var out []backend.TopicInfo
	for _, ex := range exs {
		topic, ok := strings.CutPrefix(ex.Name, pre)
		if !ok || backend.ValidateTopic(topic) != nil {
			continue
		}
		ti := backend.TopicInfo{Name: topic, Published: backend.Unknown, Scheduled: backend.Unknown}
		if ex.Stats != nil {
			ti.Published = figure(ex.Stats.PublishIn)
		}
		for _, bd := range binds {
			if bd.Source != ex.Name || bd.DestinationType != "queue" {
				continue
			}
			q, ok := byName[bd.Destination]
			if !ok {
				continue
			}
			if q.Ready == nil || q.Unacked == nil {
				ti.Messages = backend.Unknown
			} else if ti.Messages.Known() {
				ti.Messages = max(ti.Messages, backend.Figure(*q.Ready+*q.Unacked))
			}
			if q.Bytes == nil {
				ti.Bytes = backend.Unknown
			} else if ti.Bytes.Known() {
				ti.Bytes = max(ti.Bytes, backend.Figure(*q.Bytes))
			}
		}
		out = append(out, ti)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Groups implements backend.Inspector through the management API: the
// groups are the group queues bound to the topic's exchange, named by
// the group (a queue whose name was hashed, for a name over 255 bytes, by
// its queue name); no other queue of the backend is listed. Lag is the queue's ready messages, Pending its
// unacknowledged ones (those a member holds), Consumers its consumers;
// a delayed retry waiting in a hold queue is in neither. The figures lag
// by up to the management API's collect_statistics_interval.
func (b *Backend) Groups(ctx context.Context, topic string) ([]backend.GroupInfo, error) {
	if err := validateStoredTopic(topic); err != nil {
		return nil, fmt.Errorf("rabbitmq: groups: %w", err)
	}
	ex := b.exchangeName(topic)
	var binds []mgmtBinding
	found, err := b.mgmtGet(ctx, "exchanges/"+b.vhost()+"/"+url.PathEscape(ex)+"/bindings/source", &binds)
	if err != nil {
		return nil, fmt.Errorf("rabbitmq: groups of %q: %w", topic, err)
	}
	if !found {
		return []backend.GroupInfo{}, nil
	}
	pre := b.opts.Prefix + ".q." + topic + "/"
	out := []backend.GroupInfo{}
	for _, bd := range binds {
		if bd.DestinationType != "queue" || !b.isGroupQueue(bd.Destination, pre) {
			continue
		}
		var q mgmtQueue
		found, err := b.mgmtGet(ctx, "queues/"+b.vhost()+"/"+url.PathEscape(bd.Destination)+"?columns=name,messages_ready,messages_unacknowledged,consumers", &q)
		if err != nil {
			return nil, fmt.Errorf("rabbitmq: groups of %q: %w", topic, err)
		}
		if !found {
			continue // deleted meanwhile
		}
		name, ok := strings.CutPrefix(bd.Destination, pre)
		if !ok {
			name = bd.Destination
		}
		out = append(out, backend.GroupInfo{Name: name, Consumers: figure(q.Consumers), Pending: figure(q.Unacked), Lag: figure(q.Ready)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// isGroupQueue reports whether the queue name is a group's queue:
// pre (the topic's "<prefix>.q.<topic>/") and its group, or a hashed
// group queue name. The backend's other queues (partition counts,
// members, results, locks, lock states, release notes, holds) are not.
func (b *Backend) isGroupQueue(name, pre string) bool {
	if g, ok := strings.CutPrefix(name, pre); ok {
		return g != ""
	}
	sum, ok := strings.CutPrefix(name, b.opts.Prefix+".q.")
	if !ok || len(sum) != 64 {
		return false
	}
	_, err := hex.DecodeString(sum)
	return err == nil
}

// Peek implements backend.Inspector: it is unsupported (an error wrapping
// backend.ErrUnsupported), since RabbitMQ reads a queue's messages only by
// consuming them, which counts a delivery and changes the order.
func (b *Backend) Peek(context.Context, string, string, int) ([]*backend.Message, string, error) {
	return nil, "", fmt.Errorf("rabbitmq: peek: %w", errNoPeek)
}

// Delete implements backend.Inspector: it is unsupported, as Peek is.
func (b *Backend) Delete(context.Context, string, []string) (int, error) {
	return 0, fmt.Errorf("rabbitmq: delete: %w", errNoPeek)
}
