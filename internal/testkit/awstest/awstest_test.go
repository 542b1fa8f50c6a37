package awstest_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus/internal/testkit/awstest"
)

func TestStartPauseResumeRestart(t *testing.T) {
	s := awstest.Start(t)
	client := &http.Client{Timeout: 500 * time.Millisecond}
	get := func() error {
		resp, err := client.Get(s.Endpoint() + "/moto-api/")
		if err == nil {
			_ = resp.Body.Close()
		}
		return err
	}
	require.NoError(t, get(), "a started emulator answers")
	s.Pause()
	require.Error(t, get(), "a paused emulator answers nothing")
	s.Resume()
	require.Eventually(t, func() bool { return get() == nil }, 10*time.Second, 20*time.Millisecond, "a resumed emulator answers again")
	s.Restart()
	require.NoError(t, get(), "a restarted emulator answers")
}
