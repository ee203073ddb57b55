// Package placement maps worker clusters to brokers: the Broker Cluster
// Mapping (BCM) problem of seed 003 §4.2 (Eq. (1)) and its Rounding-Based
// algorithm RBCM (Algorithm 1: LP relaxation, randomized rounding), plus what
// the paper leaves out and a deployment needs: a deterministic repair step so
// the hard constraints always hold, a greedy baseline, lower bounds to judge
// both against, and a minimal-churn Remap for when brokers join or leave.
//
// The package is pure: no I/O, no goroutines, no clocks. Randomness comes only
// from Config.Seed, so the same model and config give the same assignment.
package placement
