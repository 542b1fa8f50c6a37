// Package cputime reads the CPU time the process has used. Benchmarks
// report CPU per message next to wall-clock rates, because on a machine
// where other work competes for the cores the CPU figure is the honest
// side of a ratio.
package cputime
