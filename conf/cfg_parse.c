/*
 * cfg_parse.c: INI parsing. inih parses the file; it does not give the handler line numbers, so
 * a line reader of our own feeds it one line at a time and counts them, and also notes section
 * headers so that empty sections, duplicate nodes and missing keys can be reported at their
 * header's line.
 */
#include "conf/cfg_internal.h"
#include "base/hr_file.h"

#include <ctype.h>
#include <errno.h>
#include <ini.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CFG_MAX_LINE 16384 /* characters of an INI line, its end of line not counted */

typedef struct {
    cfg *c;
    FILE *f;
    const char *path;
    char dir[PATH_MAX]; /* absolute directory of path: relative T_PATH values start there */
    int line;           /* line most recently handed to inih */
    int section;        /* -1 none, 0 global section, 1 node */
    cfg_node *node;     /* current node section */
    long node_id;       /* id of the current node section */
    int failed;         /* an error was recorded */
    hr_status status;   /* status of the first error */
    char *err;
    size_t errlen;
} parse_state;

static void parse_error(parse_state *ps, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void parse_error(parse_state *ps, const char *fmt, ...) {
    if (ps->failed) return;
    ps->failed = 1;
    ps->status = HR_ERR_CONFIG;
    int o = snprintf(ps->err, ps->errlen, "%s:%d: ", ps->path, ps->line);
    if (o < 0 || (size_t)o >= ps->errlen) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ps->err + o, ps->errlen - (size_t)o, fmt, ap);
    va_end(ap);
}

static int known_section(const char *name) {
    return strcmp(name, "cluster") == 0 || strcmp(name, "train") == 0 ||
           strcmp(name, "controller") == 0;
}

/* A section header was read: check it and open a node when it is [node.ID]. */
static void on_section(parse_state *ps, const char *name) {
    if (known_section(name)) {
        ps->section = 0;
        ps->node = NULL;
        return;
    }
    if (strncmp(name, "node.", 5) == 0) {
        long id;
        if (cfg_parse_long(name + 5, &id) || id < 0 || id > 65535 ||
            !isdigit((unsigned char)name[5])) {
            parse_error(ps,
                        "bad node id in [%s] (expected [node.N] with N an integer in [0, 65535])",
                        name);
            return;
        }
        int prev = cfg_node_index(ps->c, id);
        if (prev >= 0) {
            parse_error(ps,
                        "duplicate node id %ld: [node.%ld] was already defined at line %d "
                        "(expected each node id once)",
                        id, id, ps->c->nodes[prev].line);
            return;
        }
        if (ps->c->n_nodes >= CFG_MAX_NODES) {
            parse_error(ps, "too many nodes (expected at most %d)", CFG_MAX_NODES);
            return;
        }
        ps->node = cfg_add_node(ps->c, id, ps->line);
        if (!ps->node) {
            parse_error(ps, "out of memory");
            ps->status = HR_ERR_NOMEM;
            return;
        }
        ps->node_id = id;
        ps->section = 1;
        return;
    }
    parse_error(ps, "unknown section [%s] (expected [cluster], [train], [controller] or [node.ID])",
                name);
}

/* inih line reader: hands over one line at a time so that we know the line number. */
static char *read_line(char *str, int num, void *stream) {
    parse_state *ps = stream;
    if (ps->failed) return NULL;
    char *line = NULL;
    size_t cap = 0;
    ssize_t len = getline(&line, &cap, ps->f);
    if (len < 0) {
        free(line);
        return NULL;
    }
    ps->line++;
    ps->c->n_lines = ps->line;
    if (len >= num - 1) {
        free(line);
        parse_error(ps, "line is too long (expected at most %d characters)", num - 3);
        return NULL;
    }
    const char *nul = memchr(line, 0, (size_t)len); /* inih would stop the line there */
    if (nul) {
        parse_error(ps, "NUL byte in column %ld (expected text; is this a binary file?)",
                    (long)(nul - line) + 1);
        free(line);
        return NULL;
    }
    memcpy(str, line, (size_t)len + 1);
    /* Section headers never reach the handler, so note them here. */
    const char *p = line;
    if (ps->line == 1 && (unsigned char)p[0] == 0xEF && (unsigned char)p[1] == 0xBB &&
        (unsigned char)p[2] == 0xBF)
        p += 3;
    while (isspace((unsigned char)*p)) p++;
    if (*p == '[') {
        const char *close = strchr(p, ']');
        if (close) {
            char name[256];
            snprintf(name, sizeof name, "%.*s", (int)(close - p - 1), p + 1);
            on_section(ps, name);
        }
    }
    free(line);
    return ps->failed ? NULL : str;
}

static int on_key(void *user, const char *section, const char *name, const char *value) {
    parse_state *ps = user;
    if (ps->failed) return 0;
    const key_spec *keys = ps->section == 1 ? cfg_nkeys : cfg_gkeys;
    int n = ps->section == 1 ? cfg_n_nkeys : cfg_n_gkeys;
    const char *sec = ps->section == 1 ? "node" : section;
    if (ps->section < 0) {
        parse_error(ps, "key '%s' outside any section (expected a [section] header first)", name);
        return 0;
    }
    int idx;
    const key_spec *k = cfg_find_key(keys, n, sec, name, &idx);
    if (!k) {
        char list[1024];
        cfg_list_keys(keys, n, sec, list, sizeof list);
        parse_error(ps, "unknown key '%s' in [%s] (expected one of %s)", name, section, list);
        return 0;
    }
    int *lines = ps->section == 1 ? ps->node->key_line : ps->c->key_line;
    if (lines[idx]) {
        parse_error(ps, "duplicate key '%s' in [%s], first set at line %d (expected each key once)",
                    name, section, lines[idx]);
        return 0;
    }
    for (const char *h = strchr(value, '#'); h; h = strchr(h + 1, '#'))
        if (h > value && isspace((unsigned char)h[-1])) {
            /* inih ends a value at ';' only: "host = 10.0.0.2 # rack 2" would be the host */
            const char *end = h, *note = h + 1;
            while (end > value && isspace((unsigned char)end[-1])) end--;
            while (isspace((unsigned char)*note)) note++;
            parse_error(ps,
                        "%s = '%s': a '#' after the value is read as part of it (expected a "
                        "comment after a value to start with ';', as '%.*s ; %s')",
                        name, value, (int)(end - value), value, note);
            return 0;
        }
    char why[512];
    void *base = ps->section == 1 ? (void *)ps->node : (void *)ps->c;
    if (cfg_value_set(k, base, value, ps->dir, why, sizeof why)) {
        parse_error(ps, "%s: %s", name, why);
        return 0;
    }
    lines[idx] = ps->line;
    return 1;
}

/* Parse the INI in `f`, named `path` in messages; relative paths resolve against `dir`. */
static hr_status parse_stream(cfg *c, FILE *f, const char *path, const char *dir, char *err,
                              size_t errlen) {
    parse_state ps = {.c = c, .f = f, .path = path, .section = -1, .err = err, .errlen = errlen};
    snprintf(ps.dir, sizeof ps.dir, "%s", dir);
    /* A line that starts with whitespace would otherwise continue the previous value; we want
     * indented keys to be keys. This inih setting is process-wide and we never want it on. */
    ini_allow_multiline = false;
    /* Debian's libinih sizes its line buffer from ini_max_line at run time (the compiled-in
     * INI_MAX_LINE is 200); read_line refuses a longer line with its file:line. */
    ini_max_line = CFG_MAX_LINE + 3;
    int rc = ini_parse_stream(read_line, &ps, on_key, &ps);
    if (ps.failed) return ps.status;
    if (rc > 0) {
        ps.line = rc;
        parse_error(&ps, "malformed line (expected '[section]', 'key = value' or a ; comment)");
        return HR_ERR_CONFIG;
    }
    if (rc < 0) return hr_fail(err, errlen, HR_ERR_NOMEM, "%s: out of memory while parsing", path);
    return HR_OK;
}

hr_status cfg_parse_file(cfg *c, const char *path, char *err, size_t errlen) {
    snprintf(c->path, sizeof c->path, "%s", path);
    /* opened without blocking: a FIFO that no one writes reads as empty rather than holding the
     * node for ever in open; a pipe with a writer (--conf <(...)) still reads whole */
    struct stat sb;
    int fd = hr_file_open_read(path, &sb);
    if (fd >= 0 && S_ISDIR(sb.st_mode)) close(fd), fd = -1, errno = EISDIR;
    FILE *f = fd >= 0 ? fdopen(fd, "r") : NULL;
    if (!f) {
        int e = errno;
        if (fd >= 0) close(fd);
        return hr_fail(err, errlen, HR_ERR_IO, "%s: cannot open: %s (expected a readable INI file)",
                       path, strerror(e));
    }
    char dir[PATH_MAX];
    cfg_dir_of(path, dir, sizeof dir);
    hr_status st = parse_stream(c, f, path, dir, err, errlen);
    fclose(f);
    return st;
}

hr_status cfg_parse_text(cfg *c, const char *text, const char *name, char *err, size_t errlen) {
    snprintf(c->path, sizeof c->path, "%s", name);
    size_t len = strlen(text);
    /* fmemopen of zero bytes fails on some C libraries: an empty text is an empty file */
    FILE *f = fmemopen(len ? (void *)text : (void *)"\n", len ? len : 1, "r");
    if (!f) return hr_fail(err, errlen, HR_ERR_NOMEM, "%s: cannot read: %s", name, strerror(errno));
    char dir[PATH_MAX];
    cfg_current_dir(dir, sizeof dir);
    hr_status st = parse_stream(c, f, name, dir, err, errlen);
    fclose(f);
    return st;
}
