/*
 * netns.h: shaped links for the benches. N network namespaces PREFIX-0..N-1, each holding one
 * node at 10.77.0.(i+1)/24 on a veth link to a bridge in PREFIX-br, each node's egress shaped
 * with tc (netem: rate and delay; where sch_netem is missing, tbf: the rate alone). The
 * namespaces are the bench's own, made at the start and removed at exit, also on failure
 * (and on SIGINT or SIGTERM, see netns_cleanup_on_signals). Needs root (CAP_NET_ADMIN and
 * CAP_SYS_ADMIN) and ip and tc.
 *
 * Rates and delays reach tc as numbers this file formats, never as the user's text (tc runs
 * through the shell).
 */
#ifndef HR_BENCH_NETNS_H
#define HR_BENCH_NETNS_H

#include <stddef.h>

#define NETNS_RATE_MIN  1e6  /* 1mbit: slower links make the largest sizes take hours */
#define NETNS_RATE_MAX  1e12 /* 1tbit */
#define NETNS_DELAY_MAX 1.0  /* seconds */

/* `text` in tc's rate syntax (a positive number and a unit: 10gbit, 500mbit, 1gbps) into bits
 * per second. 0, or -1 with the reason in `why`. A bare number is refused: tc reads it as
 * bits per second, which is easily meant as bytes. */
int netns_parse_rate(const char *text, double *bps, char *why, size_t whylen);
/* `text` as a delay (a number and s, ms or us; 0 alone for none) into seconds. 0, or -1 with
 * the reason in `why`. */
int netns_parse_delay(const char *text, double *seconds, char *why, size_t whylen);
/* "10 Gbit/s", "500 Mbit/s" */
void netns_rate_str(double bps, char *out, size_t n);

/* Make n namespaces with links of bps bits per second and `delay` seconds of one-way delay.
 * 0, or -1 (what was made is removed at exit, or by netns_cleanup). */
int netns_setup(int n, double bps, double delay);
/* SIGINT and SIGTERM remove the namespaces and end the process (for a bench that has no stop
 * of its own: one that stops on a signal and exits removes them at exit). */
void netns_cleanup_on_signals(void);
/* The namespaces' prefix ("hrbPID"), or "" when none are made. */
const char *netns_prefix(void);
/* The node address of namespace i: "10.77.0.(i+1)". */
void netns_addr(int i, char *out, size_t n);
/* 1 when sch_netem was missing: tbf shapes the rate and the delay is not emulated. */
int netns_no_delay(void);
/* Move the calling thread into namespace i. 0, or -1 after a message. */
int netns_enter(int i);
/* In a forked child: this process does not remove the namespaces at its exit. */
void netns_disown(void);
/* Remove the namespaces (the process that made them; safe to call again). */
void netns_cleanup(void);

#endif
