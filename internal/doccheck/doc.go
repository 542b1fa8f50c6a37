// Package doccheck holds the test that compiles every Go code block of
// README.md and docs/*.md, checks their JSON blocks, the bus subcommands
// their shell blocks name, their relative links, and the README's length.
// It has no code of its own.
package doccheck
