package nats

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// kvEntry is a key's value and revision. For a key without a value,
// leaderGet returns the revision of its delete or purge marker (0 when it
// was never written) with jetstream.ErrKeyNotFound: a compare-and-set
// against it (KeyValue.Update) is how a writer takes the key.
type kvEntry struct {
	value []byte
	rev   uint64
}

// errNoMessage is the err_code of the stream API's "no message found".
const errNoMessage = 10037

// leaderGet reads key of kv from the leader of the bucket's stream,
// through the stream API's message get, rather than through the direct
// get that any replica answers (jetstream's KeyValue.Get). A replica that
// is behind the leader does not have what a compare-and-set just wrote:
// on a cluster, a member read its own group lock back as free, or a
// partition count that a Create had just found there as missing, and its
// next compare-and-set failed. It returns jetstream.ErrKeyNotFound when
// the key has no value (never written, deleted or purged), with the
// revision of the marker (see kvEntry), and retries
// while the bucket has no leader to answer (settled).
func (b *Backend) leaderGet(ctx context.Context, kv jetstream.KeyValue, key string) (kvEntry, error) {
	req, err := json.Marshal(map[string]string{"last_by_subj": "$KV." + kv.Bucket() + "." + key})
	if err != nil {
		return kvEntry{}, err
	}
	var resp struct {
		Message *struct {
			Header []byte `json:"hdrs"`
			Data   []byte `json:"data"`
			Seq    uint64 `json:"seq"`
		} `json:"message"`
		Error *struct {
			ErrCode     int    `json:"err_code"`
			Description string `json:"description"`
		} `json:"error"`
	}
	err = settled(ctx, func() error {
		msg, err := b.nc.RequestWithContext(ctx, "$JS.API.STREAM.MSG.GET.KV_"+kv.Bucket(), req)
		if err != nil {
			return err
		}
		resp.Message, resp.Error = nil, nil
		return json.Unmarshal(msg.Data, &resp)
	})
	switch {
	case err != nil:
		return kvEntry{}, fmt.Errorf("get %q: %w", key, err)
	case resp.Error != nil && resp.Error.ErrCode == errNoMessage:
		return kvEntry{}, jetstream.ErrKeyNotFound
	case resp.Error != nil:
		return kvEntry{}, fmt.Errorf("get %q: %s (err_code %d)", key, resp.Error.Description, resp.Error.ErrCode)
	case resp.Message == nil:
		return kvEntry{}, fmt.Errorf("get %q: %w", key, errors.New("empty answer"))
	}
	if len(resp.Message.Header) > 0 {
		// A delete or purge marker: the key has no value.
		if h, err := natsgo.DecodeHeadersMsg(resp.Message.Header); err == nil && h.Get("KV-Operation") != "" {
			return kvEntry{rev: resp.Message.Seq}, jetstream.ErrKeyNotFound
		}
	}
	return kvEntry{value: resp.Message.Data, rev: resp.Message.Seq}, nil
}
