// Package sdkhttp wraps the HTTP client that aws-sdk-go-v2 sends requests
// with, so that the transport cannot close a connection whose answer is
// being read.
//
// smithy-go wraps every request body in a reader that it closes as soon
// as the client returns the response headers, and whose WriteTo returns
// io.EOF once closed. net/http writes a body of known length, then reads
// it again through io.Copy, which calls WriteTo, to check that nothing is
// left over; when the answer's headers arrive before that check runs (a
// fast server, a busy machine), the check gets io.EOF as an error, the
// transport's write loop fails, and it closes the connection while the
// SDK still reads the answer's body: the call fails with "use of closed
// network connection" although the server answered 200 and acted on the
// request. A publish is then stored but reported failed. The Client here
// hands the transport each request body behind a reader with only Read
// and Close, whose Read returns io.EOF once closed, which io.Copy takes
// as the end of the body.
package sdkhttp

import (
	"io"
	"net/http"
)

// Client sends the SDK's requests through an *http.Client, each request
// body behind a reader with only Read and Close.
type Client struct {
	HTTP *http.Client
}

// Do sends req with HTTP.
func (c Client) Do(req *http.Request) (*http.Response, error) {
	if req.Body != nil && req.Body != http.NoBody {
		req.Body = readCloser{req.Body}
	}
	return c.HTTP.Do(req)
}

// readCloser hides every method of the body but Read and Close (WriteTo
// above all).
type readCloser struct{ io.ReadCloser }
