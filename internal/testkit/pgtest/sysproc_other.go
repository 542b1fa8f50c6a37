//go:build !linux

package pgtest

import "syscall"

// procAttr runs initdb and postgres as ourselves.
func procAttr(string) (*syscall.SysProcAttr, error) { return nil, nil }
