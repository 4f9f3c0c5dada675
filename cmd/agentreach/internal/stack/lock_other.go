//go:build !unix

package stack

import "github.com/rs/zerolog"

// lockDataDir does not lock on this system: it logs that two stacks on one
// data dir are not prevented.
func lockDataDir(dir string, log zerolog.Logger) (unlock func() error, err error) {
	log.Warn().Str("data_dir", dir).Msg("the data dir is not locked on this system: never run two `agentreach up` on one --data-dir")
	return func() error { return nil }, nil
}
