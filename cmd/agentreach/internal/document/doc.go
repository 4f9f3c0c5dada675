// Package document holds the commands that edit the documents the
// dispatchers read: caps (REACH_CAPS declarations), policy and workflow
// (REACH_POLICY), and runs (the workflow runs in REACH_RUNS).
package document
