/*
 * hr_file.h: the file handling every writer and reader of the project shares, so that each
 * keeps the same promises: a run checks before it starts that it may write the files it will
 * write later (a node's --metrics and --summary, a bench's --json); a file that replaces another
 * is written beside it, fsynced and renamed over it, so a full disk or a crash keeps the old
 * one; a write error is never lost between the stream and its close; and a FIFO or device given
 * where a file belongs never holds a node for ever in open().
 */
#ifndef HR_FILE_H
#define HR_FILE_H

#include "base/hr_log.h"

#include <stdio.h>
#include <stddef.h>
#include <sys/stat.h>

/* 0 when `path` (where its links lead: hr_file_target) is a regular file this process may
 * write, or names a new file its directory takes (a probe file of this process's own,
 * PATH.probe.PID.TAG, TAG as hr_file_tmp_name's, created and removed again); else
 * -1 with the reason in `why` ("not a regular file", or strerror's). Processes may check one
 * path at the same time. */
int hr_file_writable(const char *path, char *why, size_t n);

/* The file that writing `path` reaches, in out[0..n): `path` itself, or where its chain of
 * symbolic links ends (a relative link read from the link's own directory), also when that
 * file does not exist yet, as open(O_CREAT) follows it. A file that replaces another is written
 * there, so a link is kept and what it points to is replaced, not the link. 0, or -1 with
 * errno: ELOOP after 40 links, ENAMETOOLONG, or readlink's. */
int hr_file_target(const char *path, char *out, size_t n);

/* The name a file is written under before it replaces `path`: PATH.tmp.PID.TAG, TAG 8 hex
 * digits naming this process namespace (a hash of the boot id, the PID namespace and the host
 * name), so the name is this process's alone also where processes of two containers or machines,
 * each with its own process ids, write one file in a shared directory. Every replaced file of
 * the project (checkpoints, --summary, a bench's --json, key files) is written under it. 0, or -1
 * (errno ENAMETOOLONG) when it does not fit in `n` bytes. */
int hr_file_tmp_name(char *out, size_t n, const char *path);

/* Remove the temporary files (hr_file_tmp_name's, and PATH.tmp.PID of versions before the tag)
 * that writes of `path` left when their process was killed: those of this namespace whose
 * process no longer runs. The files of other namespaces are kept (a process id means nothing
 * here: a write there may be running) and named in an INFO line of `sub`, as are the files
 * removed; `what` names the write in those lines ("checkpoint save"). */
void hr_file_remove_stale(const char *path, hr_log_sub sub, const char *what);

/* Rename `tmp` (written and closed) over `path` and make the rename durable (the directory is
 * synced). 0, or an errno value, with `tmp` removed. */
int hr_file_replace(const char *tmp, const char *path);

/* A stream that replaces `path` whole or not at all; where `path` is a symbolic link, the file
 * it leads to (hr_file_target), and the link stays. hr_file_create removes the temporary
 * files earlier writes left (hr_file_remove_stale, in CLI lines) and opens hr_file_tmp_name's
 * TARGET.tmp.PID.TAG for writing, its name in tmp[0..n); NULL with errno when it cannot (tmp
 * empty when no name was made: ENAMETOOLONG, ELOOP). hr_file_commit flushes and fsyncs it,
 * closes it (hr_file_close, with `kept`) and renames it over the target (hr_file_replace): 0,
 * or an errno value, with the temporary file removed. */
FILE *hr_file_create(const char *path, char *tmp, size_t n);
int hr_file_commit(FILE *f, int kept, const char *tmp, const char *path);

/* Close a stream that was written to. 0 when everything written reached the file; else an errno
 * value: `kept` where a write failed (pass errno as the writes left it, or the value kept when
 * the first one failed), else fclose's, else EIO. The stream is closed either way. */
int hr_file_close(FILE *f, int kept);

/* Open `path` for reading without waiting in open() (a FIFO no one writes, a device) and fill
 * `sb` with what it is; the descriptor returned blocks again, as reads expect. The caller
 * decides which kinds of file it takes. -1 with errno on failure. */
int hr_file_open_read(const char *path, struct stat *sb);

/* Create directory `path` and its missing parents with `mode`, as mkdir -p: 0 when it exists
 * as a directory afterwards, else -1 with errno (ENOTDIR where a part is not a directory). */
int hr_file_mkdirs(const char *path, mode_t mode);

#endif
