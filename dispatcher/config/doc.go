// Package config holds what a dispatcher replica runs by: Config, the
// operator's settings (the agentreach dispatcher flags), with their
// defaults, their validation and what they say of one capability (its
// retries, whether it is a write); and Capability, one capability's
// settings with REACH_POLICY's live values over the Config, resolved and
// cached per policy snapshot by Capabilities (capability.go).
package config
