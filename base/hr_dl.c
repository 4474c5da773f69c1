/*
 * hr_dl.c: opening the GPU libraries at run time (see hr_dl.h). HETRING_CUDA_LIBS is read
 * here and nowhere else, and logged (info, cuda) whenever it decides where a library comes
 * from.
 */
#include "base/hr_dl.h"

#include "base/hr_log.h"

#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* dlopen one name, under $HETRING_CUDA_LIBS when it is set; dlerror's words in why. */
static void *open_one(const char *name, char *why, size_t len) {
    const char *dir = getenv("HETRING_CUDA_LIBS");
    char path[HR_ERRLEN];
    if (dir && dir[0]) {
        snprintf(path, sizeof path, "%s/%s", dir, name);
        static int said;
        if (!__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED))
            HR_INFO(CUDA,
                    "HETRING_CUDA_LIBS=%s: the GPU libraries are opened from there, not "
                    "through the loader's search",
                    dir);
        name = path;
    }
    dlerror();
    void *h = dlopen(name, RTLD_LAZY | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        int k = snprintf(why, len, "%s", e ? e : name);
        if (dir && dir[0] && k >= 0 && (size_t)k < len)
            k = snprintf(why + k, len - (size_t)k, " (HETRING_CUDA_LIBS=%s)", dir);
    }
    return h;
}

void *hr_dl_open(const char *const *names, int n, char *err, size_t errlen) {
    char first[HR_ERRLEN] = "", why[HR_ERRLEN];
    for (int i = 0; i < n; i++) {
        void *h = open_one(names[i], i ? why : first, i ? sizeof why : sizeof first);
        if (h) return h;
    }
    char others[256] = "";
    for (int i = 1; i < n; i++)
        snprintf(others + strlen(others), sizeof others - strlen(others), "%s%s",
                 i == 1 ? "; also tried " : ", ", names[i]);
    hr_fail(err, errlen, HR_ERR_UNSUPPORTED, "%s%s", first, others);
    return NULL;
}

hr_status hr_dl_bind(void *h, const char *lib, const hr_dl_sym *syms, int n, void *table, char *err,
                     size_t errlen) {
    for (int i = 0; i < n; i++) {
        dlerror();
        void *f = dlsym(h, syms[i].name);
        if (!f) {
            const char *e = dlerror();
            return hr_fail(err, errlen, HR_ERR_UNSUPPORTED,
                           "%s has no %s (%s): older than this build needs", lib, syms[i].name,
                           e ? e : "dlsym found nothing");
        }
        memcpy((char *)table + syms[i].off, &f, sizeof f);
    }
    return HR_OK;
}

void hr_dl_path(void *h, char *out, size_t len) {
    struct link_map *lm = NULL;
    if (len) out[0] = 0;
    if (h && dlinfo(h, RTLD_DI_LINKMAP, &lm) == 0 && lm && lm->l_name)
        snprintf(out, len, "%s", lm->l_name);
}

void hr_dl_close(void *h) {
    if (h) dlclose(h);
}

void *hr_dl_open_checked(const hr_dl_lib *l, char *ver, size_t vlen, char *err, size_t errlen) {
    char why[HR_ERRLEN], path[HR_ERRLEN];
    void *h = hr_dl_open(l->names, 2, err, errlen);
    if (h && l->version(h, ver, vlen, why, sizeof why) != HR_OK) {
        hr_dl_path(h, path, sizeof path);
        hr_fail(err, errlen, HR_ERR_UNSUPPORTED, "%s: %s", path, why);
        hr_dl_close(h), h = NULL;
    }
    return h;
}

#define HR_DL_MAX_LIBS 4 /* libraries of one table at the most */

hr_status hr_dl_load(const hr_dl_lib *libs, int n, void *table, size_t size, hr_log_sub sub,
                     char *err, size_t errlen) {
    void *h[HR_DL_MAX_LIBS] = {NULL};
    char ver[HR_DL_MAX_LIBS][64], said[HR_DL_MAX_LIBS * 64 + 8] = "", why[HR_ERRLEN];
    hr_status st = n <= HR_DL_MAX_LIBS ? HR_OK : HR_ERR_INVAL;
    for (int i = 0; i < n && st == HR_OK; i++)
        if (!(h[i] = hr_dl_open_checked(&libs[i], ver[i], sizeof ver[i], why, sizeof why)))
            st = hr_fail(err, errlen, HR_ERR_UNSUPPORTED, "%s: %s", libs[i].label, why);
    for (int i = 0; i < n && st == HR_OK; i++)
        st = hr_dl_bind(h[i], libs[i].label, libs[i].syms, libs[i].n_syms, table, err, errlen);
    if (st != HR_OK) {
        for (int i = 0; i < HR_DL_MAX_LIBS; i++) hr_dl_close(h[i]);
        memset(table, 0, size);
        return st;
    }
    for (int i = 0; i < n; i++)
        snprintf(said + strlen(said), sizeof said - strlen(said), "%s%s", i ? ", " : "", ver[i]);
    hr_log(sub, HR_LOG_INFO, "loaded %s", said);
    return HR_OK;
}

void hr_dl_describe(const hr_dl_lib *libs, int n, char *out, size_t len) {
    size_t used = 0;
    if (len) out[0] = 0;
    for (int i = 0; i < n && used < len; i++) {
        char ver[64], path[512], why[HR_ERRLEN];
        void *h = hr_dl_open_checked(&libs[i], ver, sizeof ver, why, sizeof why);
        hr_dl_path(h, path, sizeof path);
        if (h)
            snprintf(out + used, len - used, "%s  %s: %s (%s)", i ? "\n" : "", libs[i].label, ver,
                     path);
        else
            snprintf(out + used, len - used, "%s  %s: cannot be used: %s", i ? "\n" : "",
                     libs[i].label, why);
        hr_dl_close(h);
        used += strlen(out + used);
    }
}

hr_status hr_dl_once_run(hr_dl_once *o, hr_status (*load)(char *err, size_t errlen), char *err,
                         size_t errlen) {
    pthread_mutex_lock(&o->mu);
    if (!o->tried) o->st = load(o->why, sizeof o->why), o->tried = 1;
    pthread_mutex_unlock(&o->mu);
    if (o->st != HR_OK) hr_fail(err, errlen, o->st, "%s", o->why);
    return o->st;
}
