package awstest

import (
	"context"
	_ "embed"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sns"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/eventbus-go/bus/internal/sdkhttp"
	"github.com/eventbus-go/bus/internal/testkit/serverproc"
)

// startTimeout bounds how long the emulator may take to answer.
const startTimeout = 30 * time.Second

// Region is the region the tests use; the emulator serves every region.
const Region = "us-east-1"

// motoServer runs moto_server with the corrections it documents.
//
//go:embed moto_server.py
var motoServer []byte

// Server is a private moto_server process owned by one test. Its methods
// are safe for concurrent use.
type Server struct {
	t    testing.TB
	bin  string
	port int
	dir  string
	proc serverproc.Proc
}

// Start launches a private moto_server on a free loopback port, waits
// until it answers and stops it when the test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	bin, err := lookBinary()
	if err != nil {
		t.Fatalf("awstest: %v; run `make test`, which installs it", err)
	}
	s := &Server{t: t, bin: bin, port: serverproc.FreePort(t), dir: t.TempDir()}
	t.Cleanup(s.stop)
	if err := s.launch(); err != nil {
		t.Fatalf("awstest: %v", err)
	}
	return s
}

// SetDummyCredentials sets the AWS SDK's credential variables to values the
// emulator accepts, for the test's duration, and clears the profile
// variables so that no file of the machine is read.
func SetDummyCredentials(t testing.TB) {
	t.Helper()
	for k, v := range dummyCredentials(t.TempDir()) {
		t.Setenv(k, v)
	}
}

// SetDummyCredentialsForProcess sets the variables SetDummyCredentials
// sets for the rest of the process, for a TestMain whose tests run in
// parallel (t.Setenv refuses parallel tests); dir holds the empty
// configuration files.
func SetDummyCredentialsForProcess(dir string) error {
	for k, v := range dummyCredentials(dir) {
		if err := os.Setenv(k, v); err != nil {
			return err
		}
	}
	return nil
}

func dummyCredentials(dir string) map[string]string {
	return map[string]string{
		"AWS_ACCESS_KEY_ID":           "test",
		"AWS_SECRET_ACCESS_KEY":       "test",
		"AWS_SESSION_TOKEN":           "",
		"AWS_PROFILE":                 "",
		"AWS_CONFIG_FILE":             filepath.Join(dir, "config"),
		"AWS_SHARED_CREDENTIALS_FILE": filepath.Join(dir, "credentials"),
		"AWS_EC2_METADATA_DISABLED":   "true",
	}
}

// Addr returns the server's host:port.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// Endpoint returns the http URL the AWS SDK is pointed at.
func (s *Server) Endpoint() string { return "http://" + s.Addr() }

// URL returns an sqs:// URL for the server in Region.
func (s *Server) URL() string { return "sqs://" + Region + "?endpoint=" + s.Endpoint() }

// SQS returns an SQS client of the server, with the credentials it
// accepts; its idle connections close when the test ends.
func (s *Server) SQS(t testing.TB) *sqs.Client { return s.sqsClient(clientConfig(closedAtEnd(t))) }

// SNS returns an SNS client of the server, as SQS does.
func (s *Server) SNS(t testing.TB) *sns.Client { return s.snsClient(clientConfig(closedAtEnd(t))) }

func (s *Server) sqsClient(cfg aws.Config) *sqs.Client {
	return sqs.NewFromConfig(cfg, func(o *sqs.Options) { o.BaseEndpoint = aws.String(s.Endpoint()) })
}

func (s *Server) snsClient(cfg aws.Config) *sns.Client {
	return sns.NewFromConfig(cfg, func(o *sns.Options) { o.BaseEndpoint = aws.String(s.Endpoint()) })
}

// clientConfig is the configuration of a client of the server: its
// region and the credentials it accepts, over hc.
func clientConfig(hc *http.Client) aws.Config {
	return aws.Config{Region: Region, Credentials: credentials.NewStaticCredentialsProvider("test", "test", ""), HTTPClient: sdkhttp.Client{HTTP: hc}}
}

// closedAtEnd returns an HTTP client whose idle connections close when
// t ends.
func closedAtEnd(t testing.TB) *http.Client {
	hc := &http.Client{Transport: &http.Transport{}}
	t.Cleanup(hc.CloseIdleConnections)
	return hc
}

// Pause freezes the server (SIGSTOP): it keeps its connections but
// answers nothing until Resume. The test is skipped where processes
// cannot be frozen.
func (s *Server) Pause() {
	s.t.Helper()
	if !serverproc.CanFreeze {
		s.t.Skip("awstest: pause: processes cannot be frozen on this system")
	}
	if err := s.proc.Pause(); err != nil {
		s.t.Fatalf("awstest: pause: %v", err)
	}
}

// Resume lets a paused server run again (SIGCONT).
func (s *Server) Resume() { s.proc.Resume() }

// Stop stops the server and waits until the process is gone.
func (s *Server) Stop() { s.proc.Stop(syscall.SIGKILL) }

// Restart starts an empty server again on the same port, stopping it
// first if it is still running, and waits until it answers.
func (s *Server) Restart() {
	s.t.Helper()
	s.Stop()
	if err := s.launch(); err != nil {
		s.t.Fatalf("awstest: restart: %v", err)
	}
}

func (s *Server) stop() { s.proc.Stop(syscall.SIGKILL) }

func (s *Server) launch() error {
	logPath := filepath.Join(s.dir, "moto.log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logFile.Close()
	python, err := pythonOf(s.bin)
	if err != nil {
		return err
	}
	script := filepath.Join(s.dir, "moto_server.py")
	if err := os.WriteFile(script, motoServer, 0o600); err != nil {
		return err
	}
	cmd := exec.Command(python, script, "-H", "127.0.0.1", "-p", strconv.Itoa(s.port))
	cmd.Dir = s.dir
	cmd.Env = serverEnv()
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	s.proc.Group = true
	done, err := s.proc.Start(cmd)
	if err != nil {
		return fmt.Errorf("start moto_server: %w", err)
	}
	client := &http.Client{Timeout: 2 * time.Second}
	err = serverproc.WaitReady("moto_server on "+s.Addr(), startTimeout, done, logPath, func() error {
		resp, err := client.Get(s.Endpoint() + "/moto-api/")
		if err != nil {
			return err
		}
		_ = resp.Body.Close()
		if resp.StatusCode >= 500 {
			return fmt.Errorf("answered %s", resp.Status)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return s.warmUp(logPath)
}

// warmUp calls SNS and SQS once each, one after the other: moto loads a
// service's code on its first request, and concurrent first requests to
// a cold server fail with 500.
func (s *Server) warmUp(logPath string) error {
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	hc := &http.Client{Transport: &http.Transport{}}
	defer hc.CloseIdleConnections()
	cfg := clientConfig(hc)
	cfg.Retryer = func() aws.Retryer { return aws.NopRetryer{} }
	if _, err := s.snsClient(cfg).ListTopics(ctx, &sns.ListTopicsInput{}); err != nil {
		return fmt.Errorf("moto_server on %s: SNS ListTopics: %w: %s", s.Addr(), err, serverproc.LogTail(logPath))
	}
	if _, err := s.sqsClient(cfg).ListQueues(ctx, &sqs.ListQueuesInput{}); err != nil {
		return fmt.Errorf("moto_server on %s: SQS ListQueues: %w: %s", s.Addr(), err, serverproc.LogTail(logPath))
	}
	return nil
}

// serverEnv is the test's environment without its AWS_ variables: the
// emulator runs botocore, which refuses an AWS_PROFILE naming no profile,
// and needs no credentials of the test's.
func serverEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "AWS_") {
			env = append(env, kv)
		}
	}
	return env
}

// lookBinary finds moto_server on PATH or in the virtual environment
// scripts/setup.sh installs it into.
func lookBinary() (string, error) {
	if p, err := exec.LookPath("moto_server"); err == nil {
		return p, nil
	}
	venv := os.Getenv("BUS_MOTO_VENV")
	if venv == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("moto_server not on PATH and no home directory: %w", err)
		}
		venv = filepath.Join(home, ".cache", "bus-moto", "venv")
	}
	p := filepath.Join(venv, "bin", "moto_server")
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("moto_server not on PATH nor in %s", venv)
	}
	return p, nil
}

// pythonOf returns the Python interpreter beside moto_server, the one
// that has moto installed (a virtual environment's, or a version
// manager's shim that picks the same version as moto_server's).
func pythonOf(bin string) (string, error) {
	for _, name := range []string{"python3", "python"} {
		p := filepath.Join(filepath.Dir(bin), name)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("no python3 beside %s to run moto with", bin)
}
