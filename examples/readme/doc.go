// Package readme holds the test that builds the README's Go program as a
// module of its own, the way the README tells a reader to: go mod init, a
// replace directive pointing at this repository, go build and go vet.
package readme
