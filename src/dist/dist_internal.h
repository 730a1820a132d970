// The flight recorder's side of the collectives (flight.c) and what the device communicators
// (device.c) share with the host ones (dist.c); used inside dist/ only.
#ifndef SLM_DIST_INTERNAL_H
#define SLM_DIST_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "dist/dist.h"

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

// dist.c's side for device.c. A collective's flight-recorder entry on `c` (its next sequence
// number; `bytes` sent by this rank).
uint64_t slm_comm_flight_begin(slm_comm *c, const char *op, const char *what, int64_t bytes);
// The deadline of every wait (slm_dist_set_timeout), seconds; <= 0: none.
double slm_dist_timeout(void);
// Adds blocked seconds to slm_dist_wait_seconds.
void slm_dist_add_wait(double seconds);
// The timeout message both paths print: "collective WHAT timed out after T s (CONTEXT; group:
// GROUP, N ranks); a peer rank is dead or stuck" into buf[n].
void slm_dist_timeout_text(char *buf, size_t n, const char *what, const char *group, int size);
// On a timeout: writes the flight dump, logs where, and waits slm_flight_abort_grace so peers
// waiting in the same collective time out and dump too (nothing when dumping is off).
void slm_dist_timeout_dump(const char *what);

#endif
