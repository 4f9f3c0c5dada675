// Package cli is what every agentreach command shares: the command line
// (flags with their environment variables and help, sub-commands, usage
// errors), the connection flags and the connection they open, the failure
// codes and their JSON object, exit codes, logging, payload input, the
// output helpers and the version.
//
// A command is a RunFunc: it parses its own arguments with a Cmdline
// (NewCmdline, Group, Parse), prints to stdout and stderr, and returns its
// exit status (ExitOK, ExitFail, ExitUsage).
package cli
