package main

// The backends bus can open besides mem://; each registers its URL
// schemes from init.
import (
	_ "github.com/eventbus-go/bus/kafka"       // kafka://
	_ "github.com/eventbus-go/bus/nats"        // nats://, tls://, nats+tls://
	_ "github.com/eventbus-go/bus/postgres"    // postgres://, postgresql://
	_ "github.com/eventbus-go/bus/rabbitmq"    // amqp://, amqps://
	_ "github.com/eventbus-go/bus/redisstream" // redis://, rediss://
	_ "github.com/eventbus-go/bus/sqs"         // sqs://
)
