/*
 * cfg_load.c: a configuration from a file: parsed over the defaults, the environment applied,
 * validated (cfg.h, cfg_load). It sits above the files it calls, so cfg.c calls nothing above.
 */
#include "conf/cfg_internal.h"

hr_status cfg_load(cfg *c, const char *path, char *err, size_t errlen) {
    hr_status st;
    cfg_init(c);
    HR_CHECK_GOTO(cfg_parse_file(c, path, err, errlen), st, fail);
    HR_CHECK_GOTO(cfg_apply_env(c, err, errlen), st, fail);
    HR_CHECK_GOTO(cfg_validate(c, err, errlen), st, fail);
    return HR_OK;
fail:
    cfg_free(c);
    return st;
}
