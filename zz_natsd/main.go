package main

import (
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

func main() {
	dir, _ := os.MkdirTemp("", "natsd")
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: 14292, JetStream: true, StoreDir: dir})
	if err != nil {
		panic(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		panic("not ready")
	}
	fmt.Println("ready", s.ClientURL())
	time.Sleep(20 * time.Minute)
}
