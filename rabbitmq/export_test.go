package rabbitmq

import "context"

// AbandonGets runs n times what a caller whose ctx ended does: a
// basic.get on queue q under an ended ctx, and the close of its channel
// right away. It returns the publishing connection before and after.
func AbandonGets(b *Backend, q string, n int) (before, after any, err error) {
	conn, err := b.pub.get(context.Background())
	if err != nil {
		return nil, nil, err
	}
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	for range n {
		ch, err := b.pub.channel(context.Background())
		if err != nil {
			return conn, nil, err
		}
		_ = callCtx(ended, ch, func() error {
			_, _, err := ch.Get(q, false)
			return err
		})
		go closeChannel(ch, b.opts.CloseTimeout)
	}
	ch, err := b.pub.channel(context.Background())
	if err != nil {
		return conn, nil, err
	}
	defer closeChannel(ch, b.opts.CloseTimeout)
	err = ch.Qos(1, 0, false) // one round trip after every close
	now, _ := b.pub.get(context.Background())
	return conn, now, err
}

// QueueName is the name of the quorum queue of group on topic.
func QueueName(b *Backend, topic, group string) string { return b.queueName(topic, group) }

// PublishingConn returns the backend's publishing connection, dialing it
// when it is down.
func PublishingConn(b *Backend) (any, error) { return b.pub.get(context.Background()) }
