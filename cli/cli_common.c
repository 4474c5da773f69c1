/* cli_common.c: option handling and config loading shared by the commands. */
#include "base/hr_log.h"
#include "cli/cli.h"
#include "cluster/hr_fault.h"
#include "cluster/nccl_path.h"
#include "cluster/node_id.h"
#include "cluster/transport.h"
#include "trainer/blas_pick.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int cli_usage_error(const char *cmd, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "hetring %s: ", cmd);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    return CLI_USAGE;
}

/* Hold each of standard input, output and error that the caller closed (hetring run 2>&-) with
 * a descriptor that can be neither read nor written (O_PATH), so that it stays as it was, closed
 * to every read and write (EBADF), while the next file or socket opened cannot take its number:
 * else a log line written to descriptor 2 would land in a checkpoint being written, or in a ring
 * link. -1 when none can be opened. */
static int std_fds_hold(void) {
    for (int fd = 0; fd < 3; fd++) {
        if (fcntl(fd, F_GETFD) != -1 || errno != EBADF) continue;
        int got = open("/", O_PATH); /* the lowest free number: fd */
        if (got < 0) return -1;
        if (got != fd) {
            dup2(got, fd);
            close(got);
        }
    }
    return 0;
}

int cli_main_start(char **argv, const char *prog) {
    char err[HR_ERRLEN];
    if (std_fds_hold() != 0) {
        fprintf(stderr, "%s: standard input, output or error is closed, and cannot be held: %s\n",
                prog, strerror(errno));
        return CLI_FAIL;
    }
    hr_status blas = blas_pick_main(argv, err, sizeof err); /* may run this program again */
    if (blas == HR_OK && hr_log_init_from_env(err, sizeof err) != 0) blas = HR_ERR_CONFIG;
    if (blas == HR_OK) return CLI_OK;
    fprintf(stderr, "%s: %s\n", prog, err);
    return CLI_USAGE;
}

int cli_main_end(int rc, const char *prog) {
    errno = 0;
    if (fflush(stdout) == 0 && !ferror(stdout)) return rc;
    fprintf(stderr, "%s: cannot write standard output (%s)\n", prog,
            errno ? strerror(errno) : "an earlier write failed");
    return rc == CLI_OK ? CLI_FAIL : rc;
}

int cli_main_unknown(const char *prog, const char *what, const char *word, void (*usage)(FILE *)) {
    fprintf(stderr, "%s: unknown %s '%s'\n\n", prog, what, word);
    usage(stderr);
    return CLI_USAGE;
}

int cli_common_opt(cli_common *o, const char *name, const char *arg) {
    if (strcmp(name, "conf") == 0) {
        o->conf = arg;
        return 1;
    }
    if (strcmp(name, "node") == 0) {
        o->node = arg;
        return 1;
    }
    if (strcmp(name, "set") == 0) {
        if (o->n_sets == CLI_MAX_SETS) {
            fprintf(stderr, "hetring: too many --set options (at most %d)\n", CLI_MAX_SETS);
            return -1;
        }
        o->sets[o->n_sets++] = arg;
        return 1;
    }
    return 0;
}

void cli_name_data_key(const cfg *c, char *err, size_t errlen) {
    const size_t pl = strlen(c->path);
    char at[CFG_PATH + 64], why[HR_ERRLEN];
    if (c->dataset < CFG_DATA_MNIST || !err[0]) return;
    if (strncmp(err, c->path, pl) == 0 && err[pl] == ':' &&
        (isdigit((unsigned char)err[pl + 1]) || strncmp(err + pl + 1, " [train] ", 9) == 0))
        return;
    snprintf(why, sizeof why, "%s", err);
    snprintf(err, errlen, "%s: [train] data_dir = %s: %s",
             cfg_where(c, -1, "data_dir", at, sizeof at), c->data_dir, why);
}

hr_status cli_check_supported(const cfg *c, char *err, size_t errlen) {
    /* backend = nccl: security none, NCCL in this build (or the test fake armed for a node of
     * the file), every node a GPU node; and no buckets where every view goes over NCCL
     * (transport.h) */
    int fake = 0;
    double arg;
    for (int k = 0; k < c->n_nodes && hr_fault_fake_nccl(); k++)
        fake |= hr_fault_get("fake_nccl", c->nodes[k].id, 0, &arg);
    HR_CHECK(transport_check_config(c, nccl_path_real() != NULL || fake, err, errlen));
    HR_CHECK(transport_check_buckets(c, nccl_path_real() != NULL || fake, err, errlen));
    return HR_OK; /* a node's device is checked where it runs (app_check_device) */
}

/* Print `err` (after "hetring CMD: " when `cmd` is given), free `c` and return CLI_USAGE. */
static int config_error(cfg *c, const char *cmd, const char *err) {
    if (cmd)
        fprintf(stderr, "hetring %s: %s\n", cmd, err);
    else
        fprintf(stderr, "%s\n", err);
    cfg_free(c);
    return CLI_USAGE;
}

int cli_load_config(cfg *c, const cli_common *o, const char *cmd) {
    char err[HR_ERRLEN];
    if (!o->conf)
        return cli_usage_error(cmd, "--conf FILE is required (see hetring %s --help)", cmd);
    cfg_init(c);
    hr_status st = cfg_parse_file(c, o->conf, err, sizeof err);
    if (st == HR_OK) st = cfg_apply_env(c, err, sizeof err);
    for (int i = 0; st == HR_OK && i < o->n_sets; i++) st = cfg_set(c, o->sets[i], err, sizeof err);
    if (st == HR_OK) st = cfg_validate(c, err, sizeof err);
    if (st == HR_OK) st = cli_check_supported(c, err, sizeof err);
    return st == HR_OK ? CLI_OK : config_error(c, NULL, err);
}

int cli_resolve_node(cfg *c, const char *node, const char *cmd, int *self) {
    char err[HR_ERRLEN];
    if (node_id_resolve(c, node, self, err, sizeof err) != HR_OK) return config_error(c, cmd, err);
    return CLI_OK;
}

int cli_self_exe(char *buf, size_t len) {
    ssize_t n = readlink("/proc/self/exe", buf, len - 1);
    if (n <= 0) return -1;
    buf[n] = 0;
    return 0;
}
