package sdkhttp

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	smithyhttp "github.com/aws/smithy-go/transport/http"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The premise: the body smithy-go sends a request with returns io.EOF
// from WriteTo once closed, which io.Copy reports as an error.
func TestSmithyBodyWriteToFailsOnceClosed(t *testing.T) {
	req := smithyhttp.NewStackRequest().(*smithyhttp.Request)
	req.URL.Scheme, req.URL.Host = "http", "127.0.0.1"
	req, err := req.SetStream(bytes.NewReader([]byte("Action=Publish")))
	require.NoError(t, err)
	body := req.Build(context.Background()).Body
	require.Implements(t, (*io.WriterTo)(nil), body, "the body has WriteTo")
	require.NoError(t, body.Close())
	_, err = io.Copy(io.Discard, body)
	assert.ErrorIs(t, err, io.EOF, "io.Copy of the closed body fails with io.EOF")
	_, err = io.Copy(io.Discard, readCloser{body})
	assert.NoError(t, err, "behind readCloser the closed body simply ends")
}

// closingBody is a request body that behaves as smithy-go's: WriteTo
// returns io.EOF once it is closed. It closes itself when its last byte
// has been read, as the SDK does when the answer's headers arrive before
// the transport has checked the body for bytes left over.
type closingBody struct {
	mu     sync.Mutex
	r      *bytes.Reader
	closed bool
}

func (b *closingBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return 0, io.EOF
	}
	n, err := b.r.Read(p)
	if b.r.Len() == 0 {
		b.closed = true
	}
	return n, err
}

func (b *closingBody) WriteTo(w io.Writer) (int64, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return 0, io.EOF
	}
	return b.r.WriteTo(w)
}

func (b *closingBody) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	return nil
}

func TestClientReadsTheAnswerWhenTheBodyClosesBeforeTheCheck(t *testing.T) {
	answer := strings.Repeat("<member>ok</member>", 20000) // read in many parts
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, answer)
	}))
	defer srv.Close()
	hc := &http.Client{Transport: &http.Transport{}}
	defer hc.CloseIdleConnections()

	send := func(do func(*http.Request) (*http.Response, error)) (string, error) {
		payload := strings.Repeat("Entry=x&", 1000)
		req, err := http.NewRequest(http.MethodPost, srv.URL, nil)
		require.NoError(t, err)
		req.Body, req.ContentLength = &closingBody{r: bytes.NewReader([]byte(payload))}, int64(len(payload))
		resp, err := do(req)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return string(b), err
	}

	_, err := send(hc.Do)
	assert.Error(t, err, "sent as is, the body's io.EOF fails the transport's write and closes the connection")

	for range 20 {
		got, err := send(Client{HTTP: hc}.Do)
		require.NoError(t, err, "through Client the body simply ends")
		require.Equal(t, answer, got, "the whole answer is read")
	}
}
