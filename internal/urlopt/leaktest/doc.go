// Package leaktest holds the end-to-end test that no credential from a
// backend URL reaches an error, a log line or an observer event, on every
// backend. It is a package of its own so that the fuzz target of urlopt
// is not built with the backends and their servers.
package leaktest
