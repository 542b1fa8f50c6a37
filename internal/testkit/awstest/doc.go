// Package awstest starts private local AWS emulators (moto in server mode)
// for tests of the sqs:// backend.
//
// # Servers
//
// [Start] launches moto_server on a free 127.0.0.1 port, with its working
// directory and log in t.TempDir(), waits until it answers and stops it in
// t.Cleanup. The emulator keeps its state in memory: a [Server.Restart]
// starts an empty one on the same port. [Server.Pause] freezes it (SIGSTOP)
// and [Server.Resume] lets it run again, for tests of a server that
// answers late. [Server.Endpoint] is the URL the AWS SDK is pointed at and
// [Server.URL] an sqs:// URL for the bus.
//
// # Corrections
//
// The server runs moto_server through moto_server.py, which corrects the
// ways in which moto 5.2.1 departs from what AWS documents and the backend
// relies on: concurrent ReceiveMessage calls on one queue can hand out one
// message twice (the script serializes each queue's calls, releasing the
// lock while a receive long-polls); a long poll does not see a message
// group that a delete freed until it ends, and a long poll on a standard
// queue does not see a message whose visibility timeout ended until it
// ends (each pass over the queue looks anew, every 50 ms); a FIFO queue
// forgets a MessageDeduplicationId once its message is deleted instead of
// keeping it for the five-minute deduplication interval (the script keeps
// it). It also cuts moto's costs per request, so that the fault suite's
// thousands of messages go through within its bounds: a send or a receive
// counts no messages, a receive reads the clock once, a delete passes over
// the queue once, a receipt handle is drawn in one call, and no request
// reads moto's package directory or logs a line. Everything else is
// moto's own.
//
// # Requirements
//
// moto_server (PyPI package moto with its server extra, the version pinned
// in scripts/setup.sh) must be on PATH or in the virtual environment
// scripts/setup.sh installs it into ($BUS_MOTO_VENV, by default
// ~/.cache/bus-moto/venv); `make test` installs it. A missing
// binary fails the test rather than skipping it. The emulator accepts any
// credentials: Start sets none, and the tests set AWS_ACCESS_KEY_ID and
// AWS_SECRET_ACCESS_KEY to dummy values (see [SetDummyCredentials]).
package awstest
