/*
 * hr_file.h: whether this process may write a file it is asked to write later, checked before
 * a run starts (a node's --metrics and --summary, a bench's --json), so that a run never does
 * its work to find out at its first record or at its end.
 */
#ifndef HR_FILE_H
#define HR_FILE_H

#include <stddef.h>

/* 0 when `path` is a regular file this process may write, or names a new file its directory
 * takes (a probe file of this process's own, PATH.probe.PID, created and removed again); else
 * -1 with the reason in `why` ("not a regular file", or strerror's). Processes may check one
 * path at the same time. */
int hr_file_writable(const char *path, char *why, size_t n);

#endif
