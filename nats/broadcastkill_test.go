package nats_test

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus/internal/testkit/broadcasttest"
	"github.com/eventbus-go/bus/internal/testkit/natstest"
)

// TestBroadcastKilledProcess: three processes subscribe in broadcast on
// JetStream and one is SIGKILLed mid-stream; the live ones get every
// message, and within 1.5 times the expiry the dead one's durable
// consumer (its position and unacked deliveries) and its group lock are
// gone from the server (the JetStream consumer list, the key-value
// buckets).
func TestBroadcastKilledProcess(t *testing.T) {
	srv := natstest.Start(t)
	nc, err := natsgo.Connect(srv.URL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	broadcasttest.Run(t, broadcasttest.Config{
		URL:    srv.URL(),
		Topic:  "broadcast.kill",
		Expiry: 3 * time.Second,
		Leftovers: func(ctx context.Context, _, group string) ([]string, error) {
			return jetStreamLeftovers(ctx, js, group)
		},
	})
}

// jetStreamLeftovers lists what the server holds of group: a consumer
// of any stream named after it (a consumer's name is the escaped group,
// which keeps the tail of the group's unique ID), and any key of a
// key-value bucket naming it (its lock, its releases).
func jetStreamLeftovers(ctx context.Context, js jetstream.JetStream, group string) ([]string, error) {
	tail := group[strings.LastIndexByte(group, '-')+1:]
	lock := hex.EncodeToString([]byte(group))
	var left []string
	streams := js.ListStreams(ctx)
	for s := range streams.Info() {
		name := s.Config.Name
		if bucket, ok := strings.CutPrefix(name, "KV_"); ok {
			kv, err := js.KeyValue(ctx, bucket)
			if err != nil {
				return nil, fmt.Errorf("bucket %s: %w", bucket, err)
			}
			keys, err := kv.ListKeys(ctx)
			if err != nil {
				return nil, fmt.Errorf("keys of %s: %w", bucket, err)
			}
			for k := range keys.Keys() {
				if strings.Contains(k, tail) || strings.Contains(k, lock) {
					left = append(left, fmt.Sprintf("key %s of bucket %s", k, bucket))
				}
			}
			continue
		}
		stream, err := js.Stream(ctx, name)
		if err != nil {
			return nil, fmt.Errorf("stream %s: %w", name, err)
		}
		consumers := stream.ListConsumers(ctx)
		for c := range consumers.Info() {
			if strings.Contains(c.Name, tail) {
				left = append(left, fmt.Sprintf("consumer %s of %s: %d unacked, %d pending", c.Name, name, c.NumAckPending, c.NumPending))
			}
		}
		if err := consumers.Err(); err != nil && !errors.Is(err, jetstream.ErrEndOfData) {
			return nil, fmt.Errorf("consumers of %s: %w", name, err)
		}
	}
	if err := streams.Err(); err != nil && !errors.Is(err, jetstream.ErrEndOfData) {
		return nil, fmt.Errorf("streams: %w", err)
	}
	return left, nil
}
