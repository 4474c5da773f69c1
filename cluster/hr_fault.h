/*
 * hr_fault.h: fault injection for tests (HETRING_FAULT).
 *
 * HETRING_FAULT is a comma-separated list of KIND:NODE[:ARG] items; NODE is a node id or *.
 * Kinds: crash (the node kills itself with SIGKILL: once ready, or at iteration ARG), hang (the
 * node sleeps ARG seconds once ready), perturb and perturb_last (flip a bit of the first or
 * the last parameter at iteration ARG, I4), decision (corrupt the controller decision at
 * iteration ARG, I5); and for elastic membership, crashes part-way through something:
 * sleep (ARG seconds at the start of every iteration: a slow step whatever the load),
 * sleep_short (the same while the node's view lacks some of the cluster file's nodes),
 * crash_compute (iteration ARG, 1 ms after it began), crash_comm (the all-reduce of iteration ARG,
 * 2 ms in), crash_view (this node's view change number ARG once the election decided it: 0 is the
 * one at start, 1 the next), crash_xfer (the state transfer of view change ARG, on the donor or
 * a receiver, inside it: once the state's size went round and before the state itself, so
 * that the other members wait in the state's broadcast), and perturb_xfer (change the momentum a
 * receiver took in view change ARG, so the state check must stop the run); and emu_device (the
 * node's device, cuda:N or cpu, is the GPU emulated on the host, trainer/device.h, each operation
 * ARG ms late); for the NCCL path (cluster/nccl_path.h): fake_nccl (the node's NCCL is the
 * recording fake of cluster/nccl_fake.c, whatever the build has), nccl_init_fail (its NCCL init of
 * the view with epoch ARG fails), nccl_refused (its device takes no new communicator from the view
 * with epoch ARG on, as after a teardown that failed) and nccl_error (its NCCL all-reduce of
 * iteration ARG fails, once);
 * for [train] nonfinite (cluster/hetring.c): nan_grad (the first float of every buffer the node
 * hands over at iteration ARG becomes NaN), big_grad (3e38 instead: finite, but two nodes' sum
 * is not) and nan_loss (its loss sum of iteration ARG is NaN); and leave (the node asks to leave
 * in iteration ARG, as SIGTERM would, so it leaves at the boundary after it) and fail_view (its
 * all-reduce of iteration ARG completes, then it fails the view, as links that break just then
 * would: the others may have applied the step, this node has not). Hooks exist
 * only in builds configured with -DHETRING_TEST_HOOKS=ON (the default, so that ctest can use them);
 * elsewhere hr_fault_get always reports "no fault".
 */
#ifndef HR_FAULT_H
#define HR_FAULT_H

#include "cluster/nccl_path.h"
#include "trainer/device.h"

/* Whether this build's hooks are compiled in (`hetring version` says so). */
int hr_fault_hooks_built(void);

/* The emulated GPU (trainer/device.h's device_emu_ops) for the test hook emu_device; NULL in a
 * build without the hooks, where that hook is never armed. */
const device_ops *hr_fault_emu_device(void);

/* The recording fake of the NCCL operations (cluster/nccl_fake.c) for the test hook fake_nccl;
 * NULL in a build without the hooks. */
const nccl_path_ops *hr_fault_fake_nccl(void);

/* Is fault KIND armed for node `node_id`? On success stores ARG (or `def`) in *arg. */
int hr_fault_get(const char *kind, long node_id, double def, double *arg);
/* Act on the process-level faults at a hook point: `iter` < 0 is "ready" (hang, and crash
 * without ARG), `iter` >= 0 an iteration boundary (crash:NODE:ITER). */
void hr_fault_point(long node_id, long iter);
/* At an iteration boundary of a view of `members` nodes: sleep_short:NODE:ARG sleeps ARG seconds
 * while the view has fewer members than the `configured` nodes of the cluster file, so that
 * the survivors of a kill are still training, slowly, when the node comes back, however long
 * its restart takes (bounded by the run's own iterations). */
void hr_fault_pace(long node_id, int members, int configured);
/* SIGKILL this process now, in the middle of `what` (named in the log line). */
void hr_fault_kill_now(const char *what);
/* SIGKILL this process `seconds` from now, from a thread, while the caller goes on with
 * `what` (named in the log line). */
void hr_fault_kill_after(const char *what, double seconds);

#endif
