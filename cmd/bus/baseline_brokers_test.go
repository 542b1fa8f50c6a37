package main

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/eventbus-go/bus/internal/testkit/kafkatest"
	"github.com/eventbus-go/bus/internal/testkit/rabbittest"
)

// The RabbitMQ and Kafka baselines drive the loops of internal/rawclient
// that contrib/watermill's BenchmarkPeers drives too; these runs keep
// them working for the command.

func TestBenchBaselineOnRabbitMQ(t *testing.T) {
	url := rabbittest.Start(t).URL()
	for _, scenario := range []string{scenarioE2E, scenarioPublish} {
		t.Run(scenario, func(t *testing.T) {
			cfg := testBenchConfig(scenario)
			cfg.URL, cfg.N, cfg.Publishers = url, 1000, 2
			c := baselineRun(t, cfg)
			assert.Equal(t, "amqp091-go", c.Raw.Client)
		})
	}
}

func TestBenchBaselineOnKafka(t *testing.T) {
	cfg := testBenchConfig(scenarioE2E)
	cfg.URL, cfg.N, cfg.Publishers = kafkatest.Start(t).URL(), 1000, 2
	c := baselineRun(t, cfg)
	assert.Equal(t, "franz-go", c.Raw.Client)
}
