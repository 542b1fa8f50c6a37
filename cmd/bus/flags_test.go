package main

import (
	"flag"
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus"
)

func TestFlagsAnywhereOnTheCommandLine(t *testing.T) {
	tests := []struct {
		name       string
		args       []string
		topic, key string
		verbose    bool
		positional []string
	}{
		{"flags first", []string{"--topic", "t", "--key", "k1", "hello"}, "t", "k1", false, []string{"hello"}},
		{"a flag after an argument", []string{"--topic", "t", "hello", "--key", "k1"}, "t", "k1", false, []string{"hello"}},
		{"flags between arguments", []string{"a", "-v", "b", "--topic=t", "c"}, "t", "", true, []string{"a", "b", "c"}},
		{"-- ends the flags", []string{"--topic", "t", "--", "--key", "k1"}, "t", "", false, []string{"--key", "k1"}},
		{"a lone dash is an argument", []string{"-", "--topic", "t"}, "t", "", false, []string{"-"}},
		{"no arguments", []string{"--topic", "t"}, "t", "", false, []string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := flag.NewFlagSet("x", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			topic, key := fs.String("topic", "", ""), fs.String("key", "", "")
			verbose := fs.Bool("v", false, "")
			_, ok := parseFlags(fs, tt.args)
			require.True(t, ok, "parse %q", tt.args)
			assert.Equal(t, tt.topic, *topic, "--topic")
			assert.Equal(t, tt.key, *key, "--key")
			assert.Equal(t, tt.verbose, *verbose, "-v")
			assert.Equal(t, tt.positional, fs.Args(), "the positional arguments, in order")
		})
	}
}

func TestFlagsAnywhereStillRefuseUnknownFlags(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	var out strings.Builder
	fs.SetOutput(&out)
	fs.String("topic", "", "")
	code, ok := parseFlags(fs, []string{"hello", "--nope"})
	assert.False(t, ok, "an unknown flag after an argument is still refused")
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, out.String(), "nope", "the flag package says which flag")
}

func TestPublishWithAFlagAfterThePayloadPublishesOneMessage(t *testing.T) {
	var stdout, stderr strings.Builder
	code := run(t.Context(), []string{"publish", "--url", "mem://flags-anywhere", "--topic", "t", "hello", "--key", "k1"}, strings.NewReader(""), &stdout, &stderr)
	require.Equal(t, exitOK, code, "stderr: %s", stderr.String())
	ids := strings.Fields(stdout.String())
	assert.Len(t, ids, 1, "one message, hello, not three (hello, --key, k1)")
}

func TestParseAckModeRoundTrips(t *testing.T) {
	for _, m := range []bus.AckMode{bus.AckOnSuccess, bus.AckOnReceive, bus.AckManual} {
		got, err := parseAckMode(string(m))
		require.NoError(t, err)
		assert.Equal(t, m, got, "%s reads back", m)
	}
	_, err := parseAckMode("sometimes")
	assert.ErrorContains(t, err, "sometimes", "an unknown mode is refused by name")
}
