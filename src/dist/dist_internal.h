// The flight recorder's side of the collectives (flight.c), called by dist.c only.
#ifndef SLM_DIST_INTERNAL_H
#define SLM_DIST_INTERNAL_H

#include <stdint.h>

// Registers a group (the world, or a split) of `size` ranks whose world ranks are ranks[size]
// (copied; at most SLM_FLIGHT_GROUP_RANKS kept). Returns its id (>= 0), or -1 when the table
// is full (its collectives are then recorded without group membership).
int slm_flight_group_add(const char *name, int size, const int *ranks);
void slm_flight_group_remove(int gid);
// Records the start of collective number `seq` (1-based, per group) in the ring; returns the
// entry's id for slm_flight_mark (0 when recording is off). No allocation.
uint64_t slm_flight_begin(int gid, uint64_t seq, const char *op, const char *what, int64_t bytes);
// Entry states.
enum { SLM_FLIGHT_STARTED = 1, SLM_FLIGHT_WAITING = 2, SLM_FLIGHT_DONE = 3 };
// Sets an entry's state (DONE also stamps its end time); a no-op for an id the ring overwrote.
void slm_flight_mark(uint64_t id, int state);

// The dist context string (slm_dist_set_context's buffer, read by every entry and the dump).
void slm_flight_set_context_source(const char *ctx);

#endif
