// Package procgroup starts child processes in process groups of their own
// and signals those groups, so that the launchers (paramserv local, bench's
// clusters) reach whatever a child starts too, on every system Go builds
// for: on Linux a child is also killed by the kernel if its launcher dies
// (Pdeathsig); other Unix systems lack that; Windows has no process groups
// or SIGTERM, so there a signal kills the child alone.
package procgroup
