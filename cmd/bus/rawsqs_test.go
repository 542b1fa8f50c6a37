package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sns"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus/internal/testkit/awstest"
)

// TestBenchBaselineOnSQS: the baseline of an sqs URL is aws-sdk-go-v2 on
// the same emulator; both sides deliver every message once, and the raw
// side deletes the topic and the queue it created. In the consume
// scenario both sides make the group before the backlog is published,
// as SQS cannot start a group from the oldest message.
func TestBenchBaselineOnSQS(t *testing.T) {
	awstest.SetDummyCredentials(t)
	srv := awstest.Start(t)
	for _, scenario := range []string{scenarioE2E, scenarioPublish, scenarioConsume} {
		t.Run(scenario, func(t *testing.T) {
			cfg := testBenchConfig(scenario)
			cfg.URL, cfg.N, cfg.Publishers, cfg.Timeout = srv.URL(), 60, 1, 90*time.Second
			c := baselineRun(t, cfg)
			assert.Equal(t, "aws-sdk-go-v2", c.Raw.Client)
			assert.Equal(t, "sqs", c.Raw.Backend)
			assert.Positive(t, c.Ratio.CPU, "cpu/msg ratio")
		})
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	topics, err := srv.SNS(t).ListTopics(ctx, &sns.ListTopicsInput{})
	require.NoError(t, err)
	for _, tp := range topics.Topics {
		assert.NotContains(t, aws.ToString(tp.TopicArn), "bus-bench-raw-", "the raw side deletes its topics")
	}
	queues, err := srv.SQS(t).ListQueues(ctx, &sqs.ListQueuesInput{})
	require.NoError(t, err)
	for _, q := range queues.QueueUrls {
		assert.False(t, strings.Contains(q, "bus-bench-raw-"), "the raw side deletes its queue %s", q)
	}
}
