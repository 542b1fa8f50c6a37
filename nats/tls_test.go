package nats_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/require"

	bus "github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/internal/testkit/natstest"
	busnats "github.com/eventbus-go/bus/nats"
)

// testPKI is a throw-away CA with a server and a client certificate.
type testPKI struct {
	caFile, certFile, keyFile string // client side
	server                    *tls.Config
}

func newTestPKI(t *testing.T, serverName string) testPKI {
	t.Helper()
	dir := t.TempDir()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "bus test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	require.NoError(t, err)
	ca, err := x509.ParseCertificate(caDER)
	require.NoError(t, err)

	issue := func(serial int64, cn string, usage x509.ExtKeyUsage, dns []string) tls.Certificate {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		require.NoError(t, err)
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn}, DNSNames: dns,
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		require.NoError(t, err)
		return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	}
	srvCert := issue(2, serverName, x509.ExtKeyUsageServerAuth, []string{serverName})
	cliCert := issue(3, "bus client", x509.ExtKeyUsageClientAuth, nil)

	p := testPKI{
		caFile: filepath.Join(dir, "ca.pem"), certFile: filepath.Join(dir, "client.pem"), keyFile: filepath.Join(dir, "client.key"),
	}
	writePEM(t, p.caFile, "CERTIFICATE", caDER)
	writePEM(t, p.certFile, "CERTIFICATE", cliCert.Certificate[0])
	keyDER, err := x509.MarshalECPrivateKey(cliCert.PrivateKey.(*ecdsa.PrivateKey))
	require.NoError(t, err)
	writePEM(t, p.keyFile, "EC PRIVATE KEY", keyDER)

	pool := x509.NewCertPool()
	pool.AddCert(ca)
	p.server = &tls.Config{
		Certificates: []tls.Certificate{srvCert}, ClientCAs: pool,
		ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12,
	}
	return p
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	require.NoError(t, os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600))
}

// TestTLSWithCAClientCertAndServerName connects over TLS to a server
// whose certificate names a host other than the address dialled, and
// which requires a client certificate.
func TestTLSWithCAClientCertAndServerName(t *testing.T) {
	const serverName = "nats.bus.test"
	pki := newTestPKI(t, serverName)
	srv := natstest.Start(t, func(o *server.Options) {
		o.TLS, o.TLSVerify, o.TLSConfig, o.TLSTimeout = true, true, pki.server, 5
	})
	host := strings.TrimPrefix(srv.URL(), "nats://")
	_, _, err := net.SplitHostPort(host)
	require.NoError(t, err)

	q := "?tls_ca=" + pki.caFile + "&tls_cert=" + pki.certFile + "&tls_key=" + pki.keyFile + "&tls_server_name=" + serverName
	for _, scheme := range []string{"tls", "nats+tls"} {
		b, err := bus.Open(context.Background(), scheme+"://"+host+q)
		require.NoError(t, err, "%s:// with CA, client certificate and server name", scheme)
		require.NoError(t, b.Close(context.Background()))
	}

	_, err = busnats.Connect(context.Background(), "tls://"+host, &busnats.Options{
		TLSCAFile: pki.caFile, TLSServerName: serverName,
	})
	require.Error(t, err, "the server requires a client certificate")

	_, err = busnats.Connect(context.Background(), "tls://"+host, &busnats.Options{
		TLSCAFile: pki.caFile, TLSCertFile: pki.certFile, TLSKeyFile: pki.keyFile,
	})
	require.Error(t, err, "without the server name the certificate does not match 127.0.0.1")
}
