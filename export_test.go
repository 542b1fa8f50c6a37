package bus

import "github.com/eventbus-go/bus/backend"

// BackendMessage lets external tests name the SPI message type briefly.
type BackendMessage = backend.Message
