package sqs

import (
	"fmt"
	"net/url"
	"regexp"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/eventbus-go/bus/backend"
)

// Options configures a Backend. Every field's default is documented on
// it; every value is validated by New before any I/O.
type Options struct {
	// Region is the AWS region, e.g. "eu-west-1" (required).
	Region string
	// Endpoint, when set, is the base URL of both SNS and SQS (an
	// emulator, a VPC endpoint): http or https with a host. Empty: the
	// region's AWS endpoints.
	Endpoint string
	// Credentials, when set, sign every request. Nil: the AWS SDK's
	// default chain (environment, shared files, container and instance
	// roles).
	Credentials aws.CredentialsProvider
	// Prefix is put before every topic and queue name the backend
	// creates (default none), so that several applications share an
	// account. Letters, digits, hyphens and underscores.
	Prefix string
	// CloseTimeout bounds Close of the backend (default 2s).
	CloseTimeout time.Duration
	// RequestTimeout bounds each HTTP request to SNS or SQS, also one
	// whose call's ctx has no deadline, on a network that went dead
	// (default 30s, at least 5s: a receive long-polls for a second).
	RequestTimeout time.Duration
	// FIFO makes every topic an SNS FIFO topic and every group an SQS
	// FIFO queue (default false: standard topics and queues): the
	// message's key is its message group, so the messages of a key are
	// delivered in publish order, one receive at a time, and a message
	// ID is stored once within SQS's five-minute deduplication window.
	// FIFO and standard topics of one name are different topics.
	FIFO bool
}

const (
	defaultCloseTimeout   = 2 * time.Second
	defaultRequestTimeout = 30 * time.Second
	minRequestTimeout     = 5 * time.Second
)

var (
	regionPattern = regexp.MustCompile(`^[a-z]{2}(-[a-z0-9]+)+-[0-9]+$|^[a-z0-9]+(-[a-z0-9]+)*$`)
	prefixPattern = regexp.MustCompile(`^[A-Za-z0-9_-]*$`)
)

// withDefaults returns a copy of o with defaults filled in, or an error
// wrapping backend.ErrInvalidOption.
func (o *Options) withDefaults() (Options, error) {
	var out Options
	if o != nil {
		out = *o
	}
	if out.Region == "" {
		return out, fmt.Errorf("%w: no region", backend.ErrInvalidOption)
	}
	if len(out.Region) > 64 || !regionPattern.MatchString(out.Region) {
		return out, fmt.Errorf("%w: region %q is not an AWS region name", backend.ErrInvalidOption, out.Region)
	}
	if out.Endpoint != "" {
		u, err := url.Parse(out.Endpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
			return out, fmt.Errorf("%w: endpoint is not an http(s) URL with a host and nothing after its path", backend.ErrInvalidOption)
		}
	}
	if len(out.Prefix) > 40 || !prefixPattern.MatchString(out.Prefix) {
		return out, fmt.Errorf("%w: prefix %q: want at most 40 letters, digits, hyphens and underscores", backend.ErrInvalidOption, out.Prefix)
	}
	if out.CloseTimeout == 0 {
		out.CloseTimeout = defaultCloseTimeout
	}
	if out.CloseTimeout < 10*time.Millisecond {
		return out, fmt.Errorf("%w: close timeout %v, want at least 10ms", backend.ErrInvalidOption, out.CloseTimeout)
	}
	if out.RequestTimeout == 0 {
		out.RequestTimeout = defaultRequestTimeout
	}
	if out.RequestTimeout < minRequestTimeout {
		return out, fmt.Errorf("%w: request timeout %v, want at least %v (a receive long-polls for %ds)", backend.ErrInvalidOption, out.RequestTimeout, minRequestTimeout, receiveWait)
	}
	return out, nil
}
