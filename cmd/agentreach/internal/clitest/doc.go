// Package clitest runs agentreach commands in tests: a command to completion
// or in the background until the test ends, with its exit status and
// output; a provisioned embedded server; the failure object --json prints;
// and the stdin replacements for payloads and confirmations.
package clitest
