package rabbittest

import (
	"net"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus/internal/testkit/serverproc"
)

// A node whose port another process takes before the node binds it (the
// management API's, seconds into the boot) exits at start; launchNew
// starts it once more on new ports.
func TestLaunchNewMovesToNewPortsWhenAPortIsTaken(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer taken.Close()
	port := taken.Addr().(*net.TCPAddr).Port
	n := newNode(t, serverproc.FreePort(t), true, "", func(n *Node) { n.mgmt = port })
	require.NoError(t, n.launchNew(), "the node starts on new ports")
	require.NotEqual(t, port, n.mgmt, "the management API moved off the taken port")
	require.NoError(t, n.ready(), "the node answers AMQP and its management API")
}
