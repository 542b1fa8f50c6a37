package rabbittest_test

import (
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus/internal/testkit/rabbittest"
)

func TestStartAnswersAndRestartKeepsDurableQueues(t *testing.T) {
	n := rabbittest.Start(t)
	c, err := amqp.Dial(n.URL())
	require.NoError(t, err, "dial the private node")
	ch, err := c.Channel()
	require.NoError(t, err)
	_, err = ch.QueueDeclare("kept", true, false, false, false, amqp.Table{"x-queue-type": "quorum"})
	require.NoError(t, err, "declare a quorum queue")
	_ = c.Close()

	n.Restart()
	c, err = amqp.DialConfig(n.URL(), amqp.Config{Dial: amqp.DefaultDial(5 * time.Second)})
	require.NoError(t, err, "dial after the restart")
	defer c.Close()
	ch, err = c.Channel()
	require.NoError(t, err)
	_, err = ch.QueueDeclarePassive("kept", true, false, false, false, amqp.Table{"x-queue-type": "quorum"})
	require.NoError(t, err, "the durable queue survives a kill and restart")
}
