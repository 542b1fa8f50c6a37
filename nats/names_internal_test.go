package nats

import (
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestEscapeNameIsInjectiveAndValid(t *testing.T) {
	tests := []struct {
		topic, want string
	}{
		{"orders", "orders"},
		{"orders.created", "orders-created"},
		{"orders-created", "orders_hcreated"},
		{"orders_created", "orders__created"},
		{"orders:created", "orders_ccreated"},
		{"a._b", "a-__b"},
		{"a_.b", "a__-b"},
		{"orders~3", "orders_p3"},
		{"orders.eu~12", "orders-eu_p12"},
	}
	seen := map[string]string{}
	for _, tt := range tests {
		got := escapeName(tt.topic)
		assert.Equal(t, tt.want, got, "escapeName(%q)", tt.topic)
		assert.True(t, validStreamName(got), "escapeName(%q) = %q must be a valid stream name", tt.topic, got)
		back, ok := unescapeName(got)
		assert.True(t, ok && back == tt.topic, "unescapeName(%q) = %q, %v: want %q", got, back, ok, tt.topic)
		if other, dup := seen[got]; dup {
			t.Errorf("topics %q and %q both map to %q", other, tt.topic, got)
		}
		seen[got] = tt.topic
	}
}

func TestGroupOfReadsTheGroupFromTheConsumerName(t *testing.T) {
	per := &Backend{opts: Options{StreamMode: StreamPerTopic}}
	shared := &Backend{opts: Options{StreamMode: StreamShared}}
	for _, group := range []string{"billing", "billing-eu", "a_t", "x:1.y"} {
		for _, b := range []*Backend{per, shared} {
			g, ok := b.groupOf("orders~2", b.consumerFor("orders~2", group))
			assert.True(t, ok && g == group, "%v: groupOf(consumerFor(%q)) = %q, %v", b.opts.StreamMode, group, g, ok)
		}
	}
	for _, name := range []string{"bad_", "bad_z", "other_torders", "billing_torders_p2"} {
		_, ok := per.groupOf("orders~2", name)
		assert.False(t, ok, "per-topic: %q is not a consumer name of the backend's", name)
	}
	_, ok := shared.groupOf("orders~2", "billing_torders")
	assert.False(t, ok, "shared: a consumer of another topic")
}

func TestBoundNameKeepsLongNamesShortAndDistinct(t *testing.T) {
	long1 := strings.Repeat("a", 300) + "1"
	long2 := strings.Repeat("a", 300) + "2"
	b1, b2 := boundName(long1), boundName(long2)
	assert.LessOrEqual(t, len(b1), maxNameLen, "bounded name length")
	assert.NotEqual(t, b1, b2, "names differing after the cut stay distinct")
	assert.True(t, validStreamName(b1), "bounded name is a valid stream name")
	assert.Equal(t, "short", boundName("short"), "short names are kept")
}

func TestConsumerNamesKeepTopicGroupPairsApart(t *testing.T) {
	b := &Backend{opts: Options{StreamMode: StreamShared, SubjectPrefix: "bus", StreamName: "BUS"}}
	// Without a separator these pairs would concatenate to the same text.
	assert.NotEqual(t, b.consumerFor("b.c", "a"), b.consumerFor("c", "a_tb"), "shared-stream consumer names")
	assert.Equal(t, "BUS", b.streamFor("any.topic"), "shared mode uses one stream")
	assert.Equal(t, []string{"bus.>"}, b.streamSubjects("any.topic"))
	p := &Backend{opts: Options{StreamMode: StreamPerTopic, SubjectPrefix: "bus", StreamPrefix: "BUS"}}
	assert.Equal(t, "BUS_orders-created", p.streamFor("orders.created"))
	assert.Equal(t, "bus.orders.created", p.subjectFor("orders.created"))
	assert.Equal(t, "billing", p.consumerFor("orders.created", "billing"))
	assert.Equal(t, "BUS_orders-created_p3", p.streamFor("orders.created~3"), "a partition has a stream of its own")
	assert.Equal(t, "bus.orders.created~3", p.subjectFor("orders.created~3"), "~ is a valid subject character")
	assert.Equal(t, "billing_torders-created_p3", b.consumerFor("orders.created~3", "billing"), "a partition's group in a shared stream")
}

func TestParseAckSubject(t *testing.T) {
	tests := []struct {
		name      string
		reply     string
		wantErr   bool
		stream    string
		delivered int
		seq       uint64
	}{
		{name: "v1", reply: "$JS.ACK.ORDERS.workers.3.42.40.1700000000000000000.7", stream: "ORDERS", delivered: 3, seq: 42},
		{name: "v2", reply: "$JS.ACK._.ACCHASH.ORDERS.workers.1.5.5.1700000000000000000.0.token", stream: "ORDERS", delivered: 1, seq: 5},
		{name: "v2 without token", reply: "$JS.ACK.dom.ACCHASH.ORDERS.workers.2.9.8.1700000000000000000.0", stream: "ORDERS", delivered: 2, seq: 9},
		{name: "not an ack subject", reply: "_INBOX.abc", wantErr: true},
		{name: "too few tokens", reply: "$JS.ACK.ORDERS.workers.3", wantErr: true},
		{name: "bad number", reply: "$JS.ACK.ORDERS.workers.x.42.40.1700000000000000000.7", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := parseAckSubject(tt.reply)
			if tt.wantErr {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.stream, m.stream)
			assert.Equal(t, tt.delivered, m.delivered)
			assert.Equal(t, tt.seq, m.streamSeq)
			assert.Equal(t, time.Unix(0, 1700000000000000000), m.timestamp)
		})
	}
}

func TestServerAtLeastDetectsVersions(t *testing.T) {
	tests := []struct {
		version string
		want    bool
	}{
		{"2.9.10", false},
		{"2.10.0", true},
		{"2.11.0-RC.1", true},
		{"3.0.0", true},
		{"1.4.1", false},
		{"", false},
		{"garbage", false},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, serverAtLeast(tt.version, 2, 10), "serverAtLeast(%q, 2, 10)", tt.version)
	}
}

func TestURLParametersSetOptions(t *testing.T) {
	u, err := url.Parse("nats://127.0.0.1:4222?jetstream=false&prefix=app&streams=shared&stream=APP&storage=memory&retention=interest&replicas=3&max_age=1h&duplicates=5m&publish_window=50&bind=true&compression=true&creds=/c&nkey=/n&tls_ca=/ca&tls_server_name=srv")
	require.NoError(t, err)
	var o Options
	require.NoError(t, parseURLOptions(u.Query(), &o))
	want := Options{
		CoreNATS: true, SubjectPrefix: "app", StreamMode: StreamShared, StreamName: "APP", Storage: StorageMemory,
		Retention: RetentionInterest, Replicas: 3, MaxAge: time.Hour, Duplicates: 5 * time.Minute, PublishWindow: 50,
		BindOnly: true, Compression: true, CredsFile: "/c", NKeySeedFile: "/n", TLSCAFile: "/ca", TLSServerName: "srv",
	}
	assert.Equal(t, want, o)
}

func TestInvalidOptionsAreRejected(t *testing.T) {
	tests := []struct {
		name  string
		query string
		opts  Options
	}{
		{name: "unknown parameter", query: "colour=blue"},
		{name: "bad bool", query: "jetstream=maybe"},
		{name: "bad storage", query: "storage=tape"},
		{name: "bad duration", query: "max_age=forever"},
		{name: "wildcard prefix", opts: Options{SubjectPrefix: "a.*"}},
		{name: "stream prefix with dot", opts: Options{StreamPrefix: "A.B"}},
		{name: "replicas", opts: Options{Replicas: 7}},
		{name: "cert without key", opts: Options{TLSCertFile: "/c"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := tt.opts
			err := parseURLOptions(url.Values(mustQuery(t, tt.query)), &o)
			if err == nil {
				_, err = o.withDefaults()
			}
			require.ErrorIs(t, err, ErrInvalidOption)
		})
	}
}

func mustQuery(t *testing.T, q string) url.Values {
	v, err := url.ParseQuery(q)
	require.NoError(t, err)
	return v
}

func TestServerLimitsAreSafetyNets(t *testing.T) {
	assert.Greater(t, maxDeliver(10), 10, "the server must deliver past the bus's max deliveries")
	assert.Equal(t, -1, maxDeliver(0))
	assert.Equal(t, 2*64+512, maxAckPending(64), "MaxAckPending follows max in flight")
}
