// Package cloudeventsinterop holds the test that puts bus's CloudEvents
// binary content mode beside the CloudEvents Go SDK's: events the SDK
// writes are read by a typed subscription, and events a typed topic
// publishes are read by the SDK. It is a module of its own, so that the
// library does not list the SDK.
package cloudeventsinterop
