// Package config holds what a dispatcher replica runs by: Config, the
// operator's settings (the agentreach dispatcher flags), with their
// defaults, their validation and what they say of one capability (its
// retries, whether it is a write). REACH_POLICY's live values go over
// them, per capability, in the dispatcher (policy.go).
package config
