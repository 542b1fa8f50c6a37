package kafkatest_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eventbus-go/bus/internal/testkit/kafkatest"
)

func TestStartAnswersAndRestartKeepsTopics(t *testing.T) {
	n := kafkatest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(n.Addr()))
	require.NoError(t, err)
	defer cl.Close()
	adm := kadm.NewClient(cl)
	_, err = adm.CreateTopic(ctx, 2, 1, nil, "kept")
	require.NoError(t, err, "create a topic on the private broker")

	n.Restart()
	// A ctx of its own: the restart may take most of the first one on a
	// loaded machine.
	ctx, cancel = context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	require.Eventually(t, func() bool {
		td, err := adm.ListTopics(ctx, "kept")
		return err == nil && td.Has("kept") && len(td["kept"].Partitions) == 2
	}, 30*time.Second, 50*time.Millisecond, "the topic survives a kill and restart")
}

func TestVersionIsThePinnedOne(t *testing.T) {
	pom, err := os.ReadFile("../../../scripts/kafka/pom.xml")
	require.NoError(t, err)
	require.Contains(t, string(pom), "<kafka.version>"+kafkatest.Version+"</kafka.version>",
		"the harness looks for the jars of the version scripts/setup.sh fetches")
}
