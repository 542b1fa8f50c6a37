// Package faultproxy is a TCP proxy that injects network faults between a
// client and a server, for the fault tests of the backends.
//
// # Faults
//
// A [Proxy] listens on a free 127.0.0.1 port and forwards every connection
// to one target address. While it runs, a test can:
//
//   - [Proxy.Reset] every live connection: both ends see a TCP RST
//     (SO_LINGER 0), as after a middlebox or server crash;
//   - [Proxy.Blackhole] the link: nothing is forwarded in either direction,
//     connections stay open and new connections are accepted, but bytes
//     are held (as TCP retransmits them) until the blackhole lifts, then
//     delivered in order;
//   - [Proxy.Partition] it for a duration: a blackhole that lifts by itself;
//   - [Proxy.SetLatency]: every chunk read from either side is written to
//     the other side no earlier than the latency after it was read. Chunks
//     are pipelined, so latency does not cap throughput.
//
// Held data is bounded per direction ([chunkQueue] chunks of at most
// [chunkSize] bytes); beyond that the proxy stops reading and TCP flow
// control pushes back on the sender.
//
// # Lifecycle
//
// [Proxy.Close] stops accepting, closes every connection and waits for
// every goroutine the proxy started. All methods are safe for concurrent
// use.
package faultproxy
