package lifecycle

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestAppendWritesWhatEncodingJSONReads(t *testing.T) {
	tests := []struct {
		name string
		e    Event
	}{
		{"received", Event{Kind: Received, Time: time.Date(2026, 11, 25, 9, 0, 0, 123456789, time.UTC), MessageID: "m-1", Key: "k", Topic: "orders", Group: "g", Member: "h-1-ab", Attempt: 1}},
		{"failed with odd text", Event{Kind: Failed, Time: time.Unix(1, 5), MessageID: "m\"\\<>&\n\t\x01", Topic: "t", Error: "bad \u2028 \xff é 日本", Duration: 3 * time.Millisecond}},
		{"retry", Event{Kind: RetryScheduled, Time: time.Unix(2, 0), MessageID: "m", Topic: "t", Attempt: 3, Delay: time.Second}},
		{"dead letter", Event{Kind: DeadLettered, Time: time.Unix(3, 0), MessageID: "m", Topic: "t", Code: "expired", DeadLetter: "t.dlq", Error: "too late"}},
		{"scaled", Event{Kind: Scaled, Time: time.Unix(4, 0), Topic: "t", Group: "g", Member: "m", Bound: 32, Reason: "lag grows"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Append(nil, &tt.e)
			require.True(t, json.Valid(got), "valid JSON: %s", got)
			want, err := json.Marshal(&tt.e)
			require.NoError(t, err)
			var a, b map[string]any
			require.NoError(t, json.Unmarshal(got, &a))
			require.NoError(t, json.Unmarshal(want, &b))
			delete(a, "time") // written with all nine digits of fraction; compared below
			delete(b, "time")
			assert.Equal(t, b, a, "the same fields and values as encoding/json writes")
			back, err := Decode(got)
			require.NoError(t, err)
			assert.True(t, tt.e.Time.Equal(back.Time), "the time round-trips")
			back.Time = tt.e.Time
			if utf8.ValidString(tt.e.Error) {
				assert.Equal(t, tt.e, back, "the event round-trips")
			}
		})
	}
}

func TestCutErrorKeepsRunesWhole(t *testing.T) {
	short := "fine"
	assert.Equal(t, short, CutError(short), "a short error is kept")
	long := strings.Repeat("é", MaxErrorLen)
	cut := CutError(long)
	assert.LessOrEqual(t, len(cut), MaxErrorLen, "cut to the bound")
	assert.True(t, utf8.ValidString(cut), "cut at a rune boundary")
	assert.True(t, strings.HasSuffix(cut, "…"), "marked as cut")
}

func TestDecodeRefusesWhatIsNoEvent(t *testing.T) {
	_, err := Decode([]byte("not json"))
	require.Error(t, err, "not JSON")
	_, err = Decode([]byte(`{"topic":"t"}`))
	require.Error(t, err, "no kind")
}

func BenchmarkAppend(b *testing.B) {
	e := Event{Kind: Succeeded, Time: time.Now(), MessageID: "019abc12-3456-7def-8123-456789abcdef", Key: "customer-7",
		Topic: "orders", Group: "billing", Member: "web-1-4711-9f2c03a1b2c4", Attempt: 1, Duration: 1830 * time.Microsecond}
	buf := make([]byte, 0, 512)
	for b.Loop() {
		buf = Append(buf[:0], &e)
	}
	b.ReportMetric(float64(len(buf)), "bytes/event")
}
