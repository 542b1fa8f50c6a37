// Package apicheck holds the test that keeps api/*.txt, the list of every
// exported name of the module's public packages, in step with the code.
// A change to the public face shows as a diff of those files in review.
// Regenerate them with
//
//	go test ./internal/apicheck -update
package apicheck
