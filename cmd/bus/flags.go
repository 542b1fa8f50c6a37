package main

import (
	"errors"
	"flag"
)

// parseFlags parses args into fs with flags anywhere on the command line:
// a flag after a positional argument is still a flag ("bus publish
// --topic t hello --key k1" publishes one message, hello, with key k1),
// and "--" ends the flags (what follows is positional, even when it looks
// like a flag). The positional arguments, in order, are fs.Args()
// afterwards. It returns the exit code and false when the command must
// stop: exitOK after -h, exitUsage after a bad flag (the flag package has
// printed why).
func parseFlags(fs *flag.FlagSet, args []string) (code int, ok bool) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return exitOK, false
			}
			return exitUsage, false
		}
		rest := fs.Args()
		if used := len(args) - len(rest); used > 0 && args[used-1] == "--" {
			positional = append(positional, rest...) // after the terminator
			break
		}
		if len(rest) == 0 {
			break
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
	// Parsing only a terminator leaves exactly the positional arguments.
	if err := fs.Parse(append([]string{"--"}, positional...)); err != nil {
		return exitUsage, false
	}
	return 0, true
}
