package inmemory

import (
	"net/url"

	"github.com/eventbus-go/bus/backend"
)

// OpenURL is a placeholder until the backend lands.
func OpenURL(u *url.URL) (backend.Backend, error) { return nil, nil }
