package backend

import (
	"context"
	"errors"
	"maps"
	"strconv"
	"time"
)

// Inspector is implemented by backends that can report their state and
// manage retained messages. The bus uses it to list, replay and purge dead
// letters, and the bus command and its dashboard use it to show topics and
// groups. It is optional: without it those operations return
// bus.ErrUnsupported.
//
// A figure the backend cannot know is Unknown, never 0. Inspector methods
// are safe for concurrent use and honour their ctx; they never change what
// a consumer group will receive, except Delete, which removes messages.
type Inspector interface {
	// Topics lists the topics the backend retains messages for, sorted by
	// name. Dead-letter topics are topics like any other.
	Topics(ctx context.Context) ([]TopicInfo, error)

	// Groups lists the consumer groups of topic, sorted by name. An
	// unknown topic has no groups (an empty list and a nil error).
	Groups(ctx context.Context, topic string) ([]GroupInfo, error)

	// Peek reads up to n retained messages of topic in publish order,
	// without consuming them or changing any group. cursor is "" for the
	// oldest retained message, or the next value of an earlier Peek; next
	// is "" when there is nothing after the last returned message. The
	// returned messages have no AckID and Attempt 0.
	Peek(ctx context.Context, topic, cursor string, n int) (msgs []*Message, next string, err error)

	// Delete removes the retained messages of topic whose IDs are listed
	// and returns how many it removed. IDs it does not find are skipped,
	// not errors. It is meant for purging dead letters: deleting a message
	// that a group has received but not settled may make its settlement
	// fail with ErrStale.
	Delete(ctx context.Context, topic string, ids []string) (int, error)
}

// CopyDeleter is implemented by Inspectors that can remove exactly the
// messages a Peek returned, leaving a later message of the same topic with
// the same ID in place. The bus replays a dead letter by publishing it and
// then removing its copy: with CopyDeleter, a replayed message that is
// dead-lettered again before that removal keeps its new dead letter;
// without it, Delete by ID removes both.
type CopyDeleter interface {
	// DeleteCopies removes the retained messages of topic that equal one
	// of msgs in ID and headers (SameCopy) and returns how many it
	// removed. Messages no longer retained are skipped, not errors.
	DeleteCopies(ctx context.Context, topic string, msgs []*Message) (int, error)
}

// HasID returns the test Delete applies: whether a retained message has
// one of ids.
func HasID(ids []string) func(*Message) bool {
	want := make(map[string]bool, len(ids))
	for _, id := range ids {
		want[id] = true
	}
	return func(m *Message) bool { return want[m.ID] }
}

// SameCopy returns the test DeleteCopies applies: whether a retained
// message has the ID and the headers of one of msgs.
func SameCopy(msgs []*Message) func(*Message) bool {
	byID := make(map[string][]map[string]string, len(msgs))
	for _, m := range msgs {
		byID[m.ID] = append(byID[m.ID], m.Headers)
	}
	return func(m *Message) bool {
		for _, h := range byID[m.ID] {
			if maps.Equal(h, m.Headers) {
				return true
			}
		}
		return false
	}
}

// Figure is a count that a backend may not know. Unknown is -1; every
// other value is the count.
type Figure int64

// Unknown is the Figure of a count the backend cannot know.
const Unknown Figure = -1

// Known reports whether f is a count rather than Unknown.
func (f Figure) Known() bool { return f >= 0 }

// String returns the count, or "unknown".
func (f Figure) String() string {
	if !f.Known() {
		return "unknown"
	}
	return strconv.FormatInt(int64(f), 10)
}

// MarshalJSON writes the count, or null when it is Unknown.
func (f Figure) MarshalJSON() ([]byte, error) {
	if !f.Known() {
		return []byte("null"), nil
	}
	return strconv.AppendInt(nil, int64(f), 10), nil
}

// UnmarshalJSON reads a count, or null as Unknown.
func (f *Figure) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*f = Unknown
		return nil
	}
	n, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil {
		return err
	}
	*f = Figure(n)
	return nil
}

// TopicInfo describes one topic.
type TopicInfo struct {
	Name string `json:"name"`
	// Messages is how many messages the topic retains.
	Messages Figure `json:"messages"`
	// Bytes is the retained size, where the backend knows it.
	Bytes Figure `json:"bytes"`
	// Published is how many messages have entered the topic since it was
	// made (a delayed message when it is due), a count that only grows,
	// whatever retention removes: the growth of it between two looks is
	// the topic's publish rate. Unknown where the broker keeps no such
	// count (a backend sets Unknown rather than leave it 0).
	Published Figure `json:"published"`
	// Oldest and Newest are the publish times of the oldest and newest
	// retained messages; zero when there are none or they are not known.
	Oldest time.Time `json:"oldest,omitzero"`
	Newest time.Time `json:"newest,omitzero"`
	// Scheduled is how many messages the broker holds until their
	// DeliverAt (Capabilities.Scheduling), and NextDue when the first of
	// them is due (zero when none is or it is not known). Without
	// Scheduling such messages are among Messages, and Scheduled is
	// Unknown.
	Scheduled Figure    `json:"scheduled"`
	NextDue   time.Time `json:"next_due,omitzero"`
	// DeadLetters is set by the bus (not the backend) when the topic's
	// oldest message is a dead letter.
	DeadLetters bool `json:"dead_letters,omitempty"`
}

// GroupInfo describes one consumer group of a topic.
type GroupInfo struct {
	Name string `json:"name"`
	// Consumers is how many members the group has now.
	Consumers Figure `json:"consumers"`
	// Pending is how many messages the group has received but not
	// settled (in flight).
	Pending Figure `json:"pending"`
	// Lag is how many retained messages the group has not received yet.
	Lag Figure `json:"lag"`
	// OldestPending is when the oldest pending message was delivered;
	// zero when nothing is pending or it is not known.
	OldestPending time.Time `json:"oldest_pending,omitzero"`
	// Partitions, Partition and Owner are set by the bus (not the
	// backend) on a partitioned topic: the topic's partition count, the
	// partition this row describes, and the live member that owns it (""
	// when the group has none).
	Partitions int    `json:"partitions,omitempty"`
	Partition  int    `json:"partition,omitempty"`
	Owner      string `json:"owner,omitempty"`
}

// TopicDeleter is implemented by backends that can remove a whole topic:
// its retained messages and the consumer groups on it. The bus command
// uses it to remove the topics it made for itself (bus bench). It is
// optional.
//
// DeleteTopic honours its ctx; deleting a topic that does not exist is not
// an error. It is meant for topics nobody uses: a subscription still live
// on the topic may recreate its group, or end with an error, as the
// backend documents.
type TopicDeleter interface {
	DeleteTopic(ctx context.Context, topic string) error
}

// SeekTarget is where GroupSeeker.SeekGroup moves a group: its oldest
// retained message, the end of the topic, or the first message published
// at or after a time.
type SeekTarget struct {
	// Oldest moves the group to the oldest retained message: every
	// retained message is delivered to it again.
	Oldest bool
	// Newest moves the group to the end: only messages published after the
	// seek are delivered.
	Newest bool
	// Time, when neither Oldest nor Newest is set, moves the group to the
	// first message published at or after it.
	Time time.Time
}

// GroupSeeker is implemented by backends that can move a consumer group,
// as Pub/Sub seeks a subscription: after SeekGroup the group receives the
// messages from the target on, whether it had received or settled them
// before or not, and none before it. It is optional.
//
// Deliveries the group has in flight when it seeks are not settled by
// the seek: a backend may redeliver them after their lease, or drop them,
// and documents which. A backend may refuse to seek a group whose members
// are live, with an error saying so. SeekGroup honours its ctx; seeking a
// group that does not exist is an error wrapping ErrUnknownGroup.
type GroupSeeker interface {
	SeekGroup(ctx context.Context, topic, group string, to SeekTarget) error
}

// ErrUnknownGroup is wrapped by SeekGroup's error for a group the topic
// does not have.
var ErrUnknownGroup = errors.New("unknown consumer group")
